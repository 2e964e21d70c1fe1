"""First response for a new lead (issue 4, item 9).

In one step, once per lead: the approved acknowledgement through the send
gate (a person's task instead when the gate or the assistant says no), the
first human contact as the lead's next action, and a notice to whoever owns
the lead (or the manager) by email and Slack. The lead records when it was
acknowledged; `first_response_at` stays for the first time a person reaches it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import requests
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from agents.outbound.gate import message_send
from agents.playbook.assistant import draft_acknowledgement
from crm.models import Lead, Message
from crm.selectors import business_manager
from crm.services import lead_sync
from crm.services.records import task_create

log = logging.getLogger(__name__)
ACTOR = "agent:first_response"
ACKNOWLEDGED = (Message.Status.DRY_RUN, Message.Status.QUEUED, Message.Status.SENT, Message.Status.DELIVERED)


@transaction.atomic
def lead_first_response(lead_id: int, *, now: datetime | None = None) -> str:
    """Acknowledge and hand over a new lead; a no-op for test leads, closed
    leads and leads already acknowledged (task redeliveries)."""
    lead = (
        Lead.objects.select_for_update(of=("self",))
        .select_related("business", "contact", "owner__user")
        .get(pk=lead_id)
    )
    if lead.is_test or lead.acknowledged_at or not lead.is_open:
        return "skipped"
    if Message.objects.filter(idempotency_key=f"ack:{lead.public_id}").exists():
        return "skipped"
    now = now or timezone.now()
    draft = draft_acknowledgement(lead)
    owner = lead.owner or business_manager(lead.business_id)
    outcome = "task"
    if draft.needs_person:
        task_create(lead=lead, title="Acknowledge this lead yourself", due_at=now, actor=ACTOR, kind="follow_up",
                    owner=owner, reason=draft.reason)  # fmt: skip
    else:
        message = message_send(
            lead=lead, channel="sms", body=draft.body, actor="agent:sms_assistant", idempotency_key=f"ack:{lead.public_id}",
            automated=True, template_key=draft.template_key or "", now=now,
        )  # fmt: skip
        outcome = message.status
        if message.status in ACKNOWLEDGED:
            Lead.objects.filter(pk=lead.pk).update(acknowledged_at=now)
        elif message.status == Message.Status.BLOCKED:
            task_create(lead=lead, title=f"Reach this lead yourself (automatic reply blocked: {message.block_reason})",
                        due_at=now, actor=ACTOR, kind="follow_up", owner=owner, reason=message.block_reason)  # fmt: skip
    due = now + timedelta(minutes=lead.business.first_response_minutes)
    name = lead.contact.name or "the lead"
    if not lead.next_action:
        lead_sync.lead_set_next_action(lead, f"First contact: reach {name}", due, actor=ACTOR, reason="new lead")
    task_create(
        lead=lead, title=f"First contact: reach {name}", due_at=due, actor=ACTOR, owner=owner, reason="new lead"
    )
    if owner is not None:
        recipient = owner.email or owner.user.email
        text = f"New lead {lead.public_id}: {name} — first contact due by {due:%H:%M} UTC. Acknowledgement: {outcome}."
        transaction.on_commit(lambda: _notify(recipient, text))
    return outcome


def _notify(email: str, text: str) -> None:
    # After commit and outside any transaction: a slow mail or Slack server
    # never holds the lead, and a failure here never undoes the handover.
    if email:
        try:
            send_mail("New lead", text, None, [email])
        except OSError as exc:
            log.warning("lead notice by email failed: %s", exc)
    if settings.SLACK_WEBHOOK_URL:
        try:
            requests.post(settings.SLACK_WEBHOOK_URL, json={"text": text}, timeout=(3.05, 5))
        except requests.RequestException as exc:
            log.warning("lead notice to Slack failed: %s", exc)
