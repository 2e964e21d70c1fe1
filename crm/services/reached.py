"""A person reached the lead, or tried to: speed to lead, the stage that
moves with it, and the calls a person logs by hand.

Reaching the lead is a person's act (an automated acknowledgement is not):
the first time is the lead's speed to lead, recorded once whatever races it
(`lead_record_first_contact` is a conditional update), and a lead nobody had
contacted yet moves to `contacted`. A call a person talked through also
answers whatever the person wrote before it: the inbox stops showing them
as waiting.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from crm.models import Call, Lead, Stage
from crm.services import lead_sync
from crm.services.conversations import conversation_settle, note_add
from crm.services.records import call_record

# What a person says happened on a call they logged: (Twilio's status for
# the call, whether they talked to the person).
CALL_OUTCOMES: dict[str, tuple[str, bool]] = {
    "connected": ("completed", True),
    "voicemail": ("completed", False),
    "no_answer": ("no-answer", False),
    "busy": ("busy", False),
    "wrong_number": ("completed", False),
}


def lead_reached(lead: Lead, *, actor: str, how: str, reason: str = "", at: datetime | None = None) -> bool:
    """A person got hold of the lead at `at` (now): the first time is its
    speed to lead, and a new or assigned lead moves to contacted; each with
    its receipt. Joins the caller's transaction. Returns whether this was
    the lead's first contact."""
    at = at or timezone.now()
    with transaction.atomic():
        first = lead_sync.lead_record_first_contact(lead, at, actor=actor, how=how)
        if lead.stage in (Stage.NEW, Stage.ASSIGNED):
            lead_sync.lead_transition(lead, Stage.CONTACTED, actor=actor, reason=reason or how)
    return first


@transaction.atomic
def call_log(
    lead: Lead,
    *,
    actor: str,
    outcome: str,
    direction: str = "out",
    minutes: int | None = None,
    note: str = "",
    at: datetime | None = None,
) -> Call:
    """A call a person made or took outside the phone system: the Call with
    its receipt, their note on it (when they wrote one), and — when they
    talked to the person — the lead reached and what the person had written
    answered. One transaction."""
    if outcome not in CALL_OUTCOMES:
        raise ValueError(f"unknown call outcome {outcome!r}: one of {', '.join(CALL_OUTCOMES)}")
    if direction not in ("in", "out"):
        raise ValueError(f"a call is 'in' or 'out', not {direction!r}")
    at = at or timezone.now()
    status, talked = CALL_OUTCOMES[outcome]
    fields: dict[str, Any] = {"outcome": outcome}
    if minutes is not None:
        fields["duration_seconds"] = max(0, minutes) * 60
    call = call_record(lead=lead, actor=actor, direction=direction, status=status, started_at=at, **fields)
    if note.strip():
        note_add(lead, author=actor, body=f"Call {call.public_id}: {note.strip()}", at=at)
    if talked:
        lead_reached(lead, actor=actor, how=f"call {call.public_id}", at=at)
        conversation_settle(lead, actor=actor, reason=f"talked on the phone ({call.public_id})", at=at)
    return call
