"""Missed-call detector: keeps a Call current from Twilio's status callbacks
and turns a call nobody answered into one call-back task for a person.

An inbound call we forward reports twice: the `<Dial>` action (DialCallStatus,
DialCallDuration: did the contractor's phone answer, and for how long?) and the
number's StatusCallback (CallStatus, CallDuration of the caller's leg). The
caller's leg ends `completed` whenever Twilio answered it with TwiML, answered
by a person or not, so the Dial outcome is the one that can say "missed", and
a later `completed` never undoes it. Callbacks arrive more than once and are
processed in any order, so "missed" is decided at most once per call: the
`call.missed` receipt records it, written under a lock on the Call row.

A missed call starts no message sequence: it asks a person to call back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction

from agents.events import lead_event
from crm.models import Call, Lead, Task, TeamMember
from crm.selectors import business_manager
from crm.services import lead_sync
from crm.services.receipts import receipt_write, receipt_written
from crm.services.records import task_create

ACTOR = "agent:missed_call"
# A completed call shorter than this, with no recording, was a hang-up or a
# pocket answer, not a conversation: it counts as missed. A business-level
# setting once businesses can tune it; the same for every business until then.
MISSED_CALL_MAX_SECONDS = 5
MISSED_STATUSES = frozenset({"no-answer", "busy", "canceled", "failed"})
TERMINAL_STATUSES = MISSED_STATUSES | {"completed"}
# DialCallStatus has one value CallStatus lacks.
STATUS_ALIASES = {"answered": "in-progress"}
TASK_KIND = Task.Kind.CALL_BACK


@dataclass(frozen=True)
class CallStatusUpdate:
    """One status callback, read from Twilio's parameters."""

    status: str
    duration: int | None = None
    recording_url: str = ""
    # The <Dial> action: the forwarded leg's outcome, not the caller's leg.
    from_dial: bool = False


def _seconds(value: str | None) -> int | None:
    text = (value or "").strip()
    return int(text) if text.isdigit() else None


def status_update_from(params: Mapping[str, str]) -> CallStatusUpdate:
    """The update a Dial action (DialCallStatus) or a StatusCallback (CallStatus) carries."""
    dial_status = params.get("DialCallStatus", "")
    status = dial_status or params.get("CallStatus", "")
    duration = params.get("DialCallDuration") if dial_status else params.get("CallDuration")
    return CallStatusUpdate(
        status=STATUS_ALIASES.get(status, status)[:20],
        duration=_seconds(duration),
        recording_url=params.get("RecordingUrl", ""),
        from_dial=bool(dial_status),
    )


def missed_reason(update: CallStatusUpdate, *, has_recording: bool = False) -> str:
    """Why this update makes its call a missed call, or "" when it does not."""
    if update.status in MISSED_STATUSES:
        return f"the call ended {update.status}"
    if (
        update.status == "completed"
        and update.duration is not None
        and update.duration < MISSED_CALL_MAX_SECONDS
        and not (has_recording or update.recording_url)
    ):
        return f"completed after {update.duration} s (under {MISSED_CALL_MAX_SECONDS} s) without a recording"
    return ""


def _status_merged(current: str, new: str) -> str:
    if not new:
        return current
    if new not in TERMINAL_STATUSES:
        # A late "ringing" never reopens a call that has ended.
        return current if current in TERMINAL_STATUSES else new
    if new == "completed" and current in MISSED_STATUSES:
        return current  # the caller's leg completing after an unanswered forward
    return new


@transaction.atomic
def call_status_record(call: Call, update: CallStatusUpdate, *, at: datetime) -> Task | None:
    """Apply one status callback to its call, then detect a missed call.

    Status only moves forward (an ended call stays ended; a missed outcome
    beats the caller's leg `completed`). The duration is the forwarded
    conversation's when there was one, else the caller's leg. Only inbound
    calls can be missed: our own unanswered outbound call is not. Returns the
    call-back task when this update created one. Joins the caller's
    transaction and locks the Call row, so one call's callbacks apply one at a time.
    """
    call = Call.objects.select_for_update().get(pk=call.pk)
    changed = []
    status = _status_merged(call.status, update.status)
    if status != call.status:
        call.status = status
        changed.append("status")
    takes_duration = update.from_dial or call.duration_seconds is None
    if update.duration is not None and takes_duration and call.duration_seconds != update.duration:
        call.duration_seconds = update.duration
        changed.append("duration_seconds")
    if update.recording_url and not call.recording_url:
        call.recording_url = update.recording_url[:1000]
        changed.append("recording_url")
    if changed:
        call.save(update_fields=changed)
    if call.direction != "in":
        return None
    reason = missed_reason(update, has_recording=bool(call.recording_url))
    if not reason:
        if update.from_dial and update.status == "completed" and (update.duration or 0) > 0 and call.lead_id:
            # The forwarded call was answered: a person spoke with the lead (speed to lead).
            lead = Lead.objects.select_related("business").get(pk=call.lead_id)
            lead_sync.lead_record_first_contact(lead, at, actor=ACTOR, how=f"answered call {call.public_id}")
        return None
    return call_missed_record(call, reason=reason, at=at)


def _username(member: TeamMember | None) -> str | None:
    return member.user.get_username() if member else None


@transaction.atomic
def call_missed_record(call: Call, *, reason: str, at: datetime) -> Task | None:
    """Record that nobody answered `call`: a `call.missed` receipt and a
    call-back task owned by the lead's owner, or by the business's first
    active manager (or owner) when the lead has none.

    At most once per call (None when already recorded). A lead that already
    has an open call-back task keeps that one task: the receipt names it.
    Joins the caller's transaction and locks the Call row.
    """
    call = Call.objects.select_for_update(of=("self",)).select_related("business", "lead__owner__user").get(pk=call.pk)
    if receipt_written(subject=call.public_id, action="call.missed"):
        return None
    lead = call.lead
    owner = lead.owner if lead is not None and lead.owner is not None and lead.owner.is_active else None
    owner = owner or business_manager(call.business_id)
    open_tasks = lead.tasks.select_related("owner__user") if lead is not None else Task.objects.none()
    existing = open_tasks.filter(kind=TASK_KIND, status=Task.Status.OPEN).first()
    task = None
    if existing is None:
        title = f"Call back {call.from_number or 'the caller'} (missed call)"
        due_at = at + timedelta(minutes=call.business.first_response_minutes)
        if lead is not None:
            task = task_create(
                lead=lead, title=title, due_at=due_at, actor=ACTOR, kind=TASK_KIND, owner=owner, reason="missed call"
            )
    kept = task or existing
    receipt_write(
        business=call.business,
        lead=lead,
        subject=call.public_id,
        actor=ACTOR,
        action="call.missed",
        reason=reason,
        after={
            "status": call.status,
            "duration": call.duration_seconds,
            "from": call.from_number,
            "task": kept.public_id if kept else None,
            "owner": _username(kept.owner if kept else None),
        },
    )
    if lead is not None and not lead.is_test:
        lead_event(lead, "missed_call", key=call.public_id, actor=ACTOR)
    if lead is not None and call.business.missed_call_text_back:
        _text_back(call, lead)
    return task


def _text_back(call: Call, lead: Lead) -> None:
    """One automated text-back per missed call, only where the business opts
    in, only from its approved playbook, and only through the gate (the call
    itself is the conversation that allows a reply)."""
    from agents.outbound.gate import message_send
    from agents.playbook.templates import TemplateError, playbook_context, template_for_automation, template_render

    try:
        template = template_for_automation(call.business, "missed_call_sms", channel="sms")
        body = template_render(template, playbook_context(lead))
    except TemplateError:
        return  # no approved text-back: the call-back task is the follow-up
    message_send(
        lead=lead,
        channel="sms",
        body=body,
        actor=ACTOR,
        idempotency_key=f"missed-call-text:{call.public_id}",
        automated=True,
        template_key=template.key,
    )
