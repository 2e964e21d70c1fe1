"""Writes to a lead's conversation that no message makes: how far a user has
read it, a conversation settled without a reply, a person's note, and a
decision on a proposal, addressed to its proposer.

The rest of the conversation's summary (its last message, since when the
person has waited) is kept by the database from the messages themselves
(crm.models.Conversation).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from crm.models import Conversation, Lead, Note
from crm.services.receipts import receipt_write


def conversation_read(user: Any, lead: Lead, *, at: datetime | None = None) -> None:
    """Mark `lead`'s conversation read by `user` up to `at` (now): one
    upsert, and the mark only moves forward (two tabs, a slow request)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO crm_conversationread AS r (user_id, lead_id, read_at) VALUES (%s, %s, %s)"
            " ON CONFLICT (user_id, lead_id) DO UPDATE SET read_at = GREATEST(r.read_at, EXCLUDED.read_at)",
            [user.pk, lead.pk, at or timezone.now()],
        )


@transaction.atomic
def conversation_settle(lead: Lead, *, actor: str, reason: str, at: datetime | None = None) -> bool:
    """Nothing that came in up to `at` waits for a person any more (the
    person texted STOP, or a person marked it done: "thanks, see you
    Tuesday" needs no answer). A message in after `at` waits again. Returns
    whether anything was waiting; a receipt records a settle that changed
    something. Who waits is then the database's one rule again
    (`conversation_waiting_recompute`), as after any message."""
    at = at or timezone.now()
    waiting = (
        Conversation.objects.select_for_update(no_key=True)
        .filter(lead=lead)
        .values_list("awaiting_since", flat=True)
        .first()
    )
    Conversation.objects.filter(lead=lead).update(settled_at=Greatest(F("settled_at"), Value(at)))
    conversation_waiting_recompute(lead)
    if waiting is None or waiting > at:
        return False
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=lead.public_id,
        actor=actor,
        action="conversation.settled",
        reason=reason,
        before={"awaiting_since": waiting},
        after={"awaiting_since": Conversation.objects.filter(lead=lead).values_list("awaiting_since", flat=True)[0]},
    )
    return True


def conversation_waiting_recompute(lead: Lead) -> None:
    """Who waits on us in `lead`'s conversation, computed again from its
    messages by the rule the message trigger applies (crm.db_triggers)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT leadops_conversation_waiting(%s)", [lead.pk])


@transaction.atomic
def note_add(lead: Lead, *, author: str, body: str, at: datetime | None = None) -> Note:
    """A person's note on the lead's conversation, with its receipt."""
    body = body.strip()
    if not body:
        raise ValueError("a note needs some text")
    note = Note(business=lead.business, lead=lead, author=author, body=body, created_at=at or timezone.now())
    note.full_clean()
    note.save()
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=note.public_id,
        actor=author,
        action="note.added",
        after={"note": body},
    )
    return note


def decision_note_add(lead: Lead, *, author: str, body: str, addressee: Any = None, at: datetime | None = None) -> Note:
    """A decision on a proposal (a held reply rejected, approved with edits,
    left to expire) in the lead's conversation, addressed to `addressee`:
    unread for them until they read the conversation (crm.inbox), read for
    everyone else. Written by the decision, inside its transaction, with a
    receipt; `author` is who decided (a username, or the role that expired it).
    """
    body = body.strip()
    if not body:
        raise ValueError("a decision needs some words")
    note = Note(
        business=lead.business,
        lead=lead,
        kind=Note.Kind.DECISION,
        author=author,
        addressee=addressee,
        body=body,
        created_at=at or timezone.now(),
    )
    note.full_clean(exclude=["addressee"])
    note.save()
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=note.public_id,
        actor=author,
        action="note.added",
        reason="a decision, for its proposer",
        after={"note": body, "kind": Note.Kind.DECISION, "to": addressee.get_username() if addressee else None},
    )
    return note
