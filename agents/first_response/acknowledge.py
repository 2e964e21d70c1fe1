"""First response for a new lead.

In one step, once per lead: the approved acknowledgement through the send
gate (a person's task instead when the gate or the assistant says no), the
first human contact as the lead's next action, and a notice to whoever owns
the lead (or the manager) by email and Slack. The lead records when it was
acknowledged; `first_response_at` stays for the first time a person reaches it.

A lead that arrived as a phone call gets no acknowledgement: the step runs
while the call still rings through to the business, so a person either
answers it, or the missed-call detector's call back and its one bounded
text-back (agents.capture.missed_call) are the response. An acknowledgement
as well would be a second text about one call.

A marketplace lead (Thumbtack, Yelp) whose person may not be texted (no
phone, or no consent to text it) is acknowledged inside the marketplace's
thread instead: the same template, gate and idempotency key, on the
marketplace's channel (agents.outbound.marketplace). The customer asked
several businesses at once there, and the first to answer usually wins.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agents.ai.drafter import drafter_for
from agents.consent.policy import consent_decide
from agents.notify import member_notify
from agents.outbound.gate import message_send, recipient_point
from agents.outbound.marketplace import lead_marketplace_channel
from agents.playbook.assistant import draft_acknowledgement
from crm.localtime import when, zone_or_none
from crm.models import Appointment, Lead, Message, Stage
from crm.selectors import business_manager, member_zone, rows_held
from crm.services.lead_sync import lead_for_update, lead_is_current, lead_mark_acknowledged
from crm.services.next_action import next_action_ensure
from crm.services.records import task_create

ACTOR = "agent:first_response"
ACKNOWLEDGED = (Message.Status.DRY_RUN, Message.Status.QUEUED, Message.Status.SENT, Message.Status.DELIVERED)


@transaction.atomic
def lead_first_response(
    lead_id: int, *, now: datetime | None = None, title: str = "", due_at: datetime | None = None
) -> str:
    """Acknowledge and hand over a new lead; a no-op for test leads, closed
    leads and leads already acknowledged (task redeliveries)."""
    lead = lead_for_update(lead_id)
    if lead.is_test or lead.acknowledged_at or not lead.is_open:
        return "skipped"
    acknowledged, booked = (
        Lead.objects.filter(pk=lead.pk)
        .annotate(
            acknowledged=Exists(Message.objects.filter(idempotency_key=f"ack:{lead.public_id}")),
            booked=Exists(Appointment.objects.filter(lead=OuterRef("pk"))),
        )
        .values_list("acknowledged", "booked")
        .get()
    )  # one round trip for both
    if acknowledged:
        return "skipped"
    now = now or timezone.now()
    owner = lead.owner or business_manager(lead.business_id)
    outcome = "task"
    if lead.stage not in (Stage.NEW, Stage.ASSIGNED) or booked:
        # The lead moved on (a reply, a booking) before this step ran — the
        # queue can lag a fast person: an acknowledgement now would talk over them.
        outcome = f"not sent: the lead is already {lead.stage}"
    elif _arrived_by_call(lead):
        outcome = "not sent: the lead called (answered, or the missed-call text-back answers it)"
    # The business's drafter: with a language model it is still the approved
    # template (agents/ai/drafter.py), since this goes out without a person.
    elif (draft := draft_acknowledgement(lead, drafter=drafter_for(lead.business))).needs_person:
        task_create(
            lead=lead,
            title="Acknowledge this lead yourself",
            due_at=now,
            actor=ACTOR,
            kind="follow_up",
            owner=owner,
            reason=draft.reason,
        )
    else:
        message = message_send(
            lead=lead,
            channel=_acknowledgement_channel(lead, now),
            body=draft.body,
            actor="agent:sms_assistant",
            idempotency_key=f"ack:{lead.public_id}",
            automated=True,
            template_key=draft.template_key or "",
            now=now,
            lead_locked=lead_is_current(lead),
        )
        outcome = message.status
        if message.status in ACKNOWLEDGED:
            lead_mark_acknowledged(lead, now)
        elif message.status == Message.Status.BLOCKED:
            task_create(
                lead=lead,
                title=f"Reach this lead yourself (automatic reply blocked: {message.block_reason})",
                due_at=now,
                actor=ACTOR,
                kind="follow_up",
                owner=owner,
                reason=message.block_reason,
            )
    due = due_at or now + timedelta(minutes=lead.business.first_response_minutes)
    name = lead.contact.name or "the lead"
    next_action_ensure(lead, title or f"First contact: reach {name}", due, actor=ACTOR, reason="new lead", owner=owner)
    # On the clock of whoever is told (named): a Denver setter reads Denver time.
    zone = member_zone(owner) if owner is not None else zone_or_none(lead.business.timezone)
    by = when(due, "%H:%M", zone)
    text = f"New lead {lead.public_id}: {name} — first contact due by {by}. Acknowledgement: {outcome}."
    member_notify(owner, "New lead", text)
    return outcome


def _acknowledgement_channel(lead: Lead, now: datetime) -> str:
    """SMS, unless the lead came in a marketplace thread and the person may
    not be texted: then that thread."""
    marketplace = lead_marketplace_channel(lead)
    if not marketplace:
        return "sms"
    phone = recipient_point(lead.contact, "sms")
    if phone is not None and consent_decide(phone, "sms", automated=True, now=now).allowed:
        return "sms"
    return marketplace


def _arrived_by_call(lead: Lead) -> bool:
    # The touches the unit of work holds (a new lead's one, made with it), else its first.
    touches = rows_held(lead, "touches")
    if touches is not None:
        first = min(touches, key=lambda t: (t.received_at, t.pk), default=None)
    else:
        first = lead.touches.order_by("received_at", "id").first()
    return first is not None and first.channel == "call"
