"""The Reply Logger: every inbound reply, on any channel,
ends automation for that person, lands in the lead's conversation and gives
the lead's owner the conversation to take over.

- Where inbound texts and DMs are processed (agents/capture/providers/twilio.py
  and meta.py), `reply_log` runs inside that transaction: every active or
  waiting path of the person ends at once (`reply`, or `opt_out` /
  `complaint` when the text says so), before any later step could send, and
  the orchestrator is told (`reply`, `opt_out`, `complaint`).
- The orchestrator's `reply` step (`reply_step`) gives the owner one open
  take-over task (after hours, where the receptionist answers, only its
  handover does) and moves a lead that was only contacted to `engaged`
  through CRM Sync.
- Channels without a webhook (an email answered to a person's inbox) are
  logged with `reply_record`, which records the inbound message first.

The message itself is already on the lead (capture stored it): the
conversation is the lead's messages, in and out, in order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.ai.inbound import inbound_read_schedule, reception_wanted
from agents.ai.intents import intent_read
from agents.ai.urgency import message_urgent
from agents.events import lead_event
from agents.followup.sequences.engine import enrollments_stop
from crm.models import ContactPoint, Lead, Message, Stage, Task
from crm.selectors import business_manager, last_text_to
from crm.services import lead_sync
from crm.services.receipts import receipt_write
from crm.services.records import message_received_announce, task_create

ACTOR = "agent:reply_logger"
TAKE_OVER = Task.Kind.TAKE_OVER
# What a text means for the paths, from the consent check's reading of it.
READING_REASONS = {"opt_out": "opt_out", "revocation": "opt_out", "complaint": "complaint"}
# Stages a reply moves on: the person is talking to us now.
ENGAGES = (Stage.ASSIGNED, Stage.CONTACTED)


@transaction.atomic
def reply_log(message: Message, *, lead: Lead, reading: str = "", now: datetime | None = None) -> int:
    """Log one inbound reply already recorded on `lead`: end every automated
    path of the person now and tell the orchestrator. Returns how many paths
    ended. Joins the caller's transaction; a replay of the same message ends
    nothing more and records no second event."""
    reason = READING_REASONS.get(reading, "reply")
    ended = enrollments_stop(contact=lead.contact, reason=reason, actor=ACTOR, now=now)
    # The orchestrator's events are named as the reasons are.
    lead_event(lead, reason, key=message.public_id, data={"message": message.public_id}, actor=ACTOR)
    return ended


@transaction.atomic
def reply_record(
    lead: Lead, *, channel: str, body: str, actor: str, sender: str = "", now: datetime | None = None
) -> Message:
    """Record a reply that reached a person rather than a webhook (an email
    answered to the owner's inbox, a DM read in the app) and log it."""
    now = now or timezone.now()
    point = ContactPoint.objects.filter(contact=lead.contact, value=sender).first() if sender else None
    intent = intent_read(body, last_text_to(lead, before=now))
    message = Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        contact_point=point,
        direction="in",
        channel=channel,
        status=Message.Status.RECEIVED,
        body=body,
        from_number=sender[:64],
        actor=actor,
        intent=intent.intent,
        intent_confidence=intent.confidence,
        intent_source=intent.source,
        urgent=message_urgent(lead.business, body),
        created_at=now,
    )
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=message.public_id,
        actor=actor,
        action="message.received",
        reason="logged by a person",
        after={"channel": channel, "from": sender, "intent": message.intent},
    )
    message_received_announce(message)
    reply_log(message, lead=lead, now=now)
    inbound_read_schedule(message, lead)
    return message


def _message(data: dict[str, Any]) -> Message | None:
    return Message.objects.filter(public_id=str(data.get("message", ""))).first()


def reply_step(lead: Lead, data: dict[str, Any]) -> str:
    """The orchestrator's step for `reply`: automation stays off for the
    person, the owner takes over (one open take-over task per lead), and a
    lead we had only reached out to is now engaged."""
    enrollments_stop(contact=lead.contact, reason="reply", actor=ACTOR)
    message = _message(data)
    if not lead.is_open:
        return "logged on a closed lead"
    outcome = []
    # After hours, where the business turned the receptionist on, it answers
    # within the playbook and gives the owner the conversation only when a
    # person is needed, with the reason (agents.booking.receptionist): one
    # take-over task, never a second beside its own.
    received = message is not None and reception_wanted(message, lead)
    if not received and not lead.tasks.filter(kind=TAKE_OVER, status=Task.Status.OPEN).exists():
        owner = lead.owner if lead.owner is not None and lead.owner.is_active else business_manager(lead.business_id)
        who = lead.contact.name or (message.from_number if message else "") or "The lead"
        quoted = f": “{message.body[:120]}”" if message and message.body else ""
        task = task_create(
            lead=lead,
            title=f"{who} replied — take over the conversation{quoted}"[:300],
            due_at=timezone.now(),
            actor=ACTOR,
            kind=TAKE_OVER,
            owner=owner,
            reason=f"reply {message.public_id if message else ''}".strip(),
        )
        outcome.append(f"task {task.public_id}")
    elif received:
        outcome.append("the after-hours receptionist has the conversation")
    if lead.stage in ENGAGES and lead_sync.transition_allowed(lead.stage, Stage.ENGAGED):
        lead_sync.lead_transition(lead, Stage.ENGAGED, actor=ACTOR, reason="the person replied")
        outcome.append("engaged")
    return ", ".join(outcome) or "owner already has the conversation"


def opt_out_step(lead: Lead, data: dict[str, Any]) -> str:
    """The orchestrator's step for `opt_out`: every path of the person ends."""
    return f"ended {enrollments_stop(contact=lead.contact, reason='opt_out', actor=ACTOR)}"


def complaint_step(lead: Lead, data: dict[str, Any]) -> str:
    """The orchestrator's step for `complaint`: every path of the person ends
    (the hold and the complaint approval are the consent check's)."""
    return f"ended {enrollments_stop(contact=lead.contact, reason='complaint', actor=ACTOR)}"
