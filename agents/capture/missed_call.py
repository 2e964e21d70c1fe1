"""Missed-call detector: keeps a Call current from Twilio's status callbacks
and turns a call nobody answered into the lead's next action (call back),
plus at most one automated text per caller and window.

An inbound call we forward reports twice: the `<Dial>` action (DialCallStatus,
DialCallDuration: did the contractor's phone answer, and for how long?) and the
number's StatusCallback (CallStatus, CallDuration of the caller's leg). The
caller's leg ends `completed` whenever Twilio answered it with TwiML, answered
by a person or not, so the Dial outcome is the one that can say "missed", and
a later `completed` never undoes it. Callbacks arrive more than once and are
processed in any order, so "missed" is decided at most once per call: the
`call.missed` receipt records it, written under a lock on the Call row.

A person who calls three times and reaches nobody is one call back, not
three: the call-back is the lead's one next action (`Task.Kind.NEXT_ACTION`),
each missed call is linked to it (`Call.callback_task`) and its title counts
them. They get at most one automated text per window
(`Business.missed_call_text_back_window_hours`), through the send gate like
every message, so consent, STOP, quiet hours and the number's type decide
whether it goes; a withheld number gets none. A missed call starts no
message sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from django.db import transaction
from django.db.models import Count, Max
from django.utils import timezone

from agents.events import lead_event
from agents.outbound.gate import message_send
from agents.outbound.twilio_accounts import messaging_service_for, twilio_sources
from agents.playbook.templates import TemplateError, playbook_context, template_for_automation, template_render
from crm.models import Business, Call, Contact, ContactPointKind, Lead, Message, Task, TeamMember
from crm.selectors import business_manager
from crm.services import lead_sync
from crm.services.next_action import next_action_set, next_action_update
from crm.services.receipts import receipt_write, receipt_written

ACTOR = "agent:missed_call"
# A completed call shorter than this, with no recording, was a hang-up or a
# pocket answer, not a conversation: it counts as missed. A business-level
# setting once businesses can tune it; the same for every business until then.
MISSED_CALL_MAX_SECONDS = 5
MISSED_STATUSES = frozenset({"no-answer", "busy", "canceled", "failed"})
TERMINAL_STATUSES = MISSED_STATUSES | {"completed"}
# DialCallStatus has one value CallStatus lacks.
STATUS_ALIASES = {"answered": "in-progress"}
TEXT_BACK_TEMPLATE = "missed_call_sms"
TEXT_BACK_KEY_PREFIX = "missed-call-text"


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
    call back when this update recorded the call as missed. Joins the
    caller's transaction and locks the Call row, so one call's callbacks apply
    one at a time; an update that may end an inbound call locks its lead and
    caller first (`_caller_lock`).
    """
    if call.direction == "in" and update.status in TERMINAL_STATUSES:
        _caller_lock(call)
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


def _caller_lock(call: Call) -> Contact | None:
    """Lock the call's lead, then its caller's contact, before the Call row:
    the lock order (crm.locks: leads, contacts, then a lead's records). Two
    missed calls from one person then decide their call back and text one
    after the other, whichever workers process them, and the second sees what
    the first wrote."""
    if call.lead_id is not None:
        lead_sync.lead_for_update(call.lead_id)
    if call.contact_id is None:
        return None
    return Contact.objects.select_for_update(no_key=True, of=("self",)).get(pk=call.contact_id)


def _username(member: TeamMember | None) -> str | None:
    return member.user.get_username() if member else None


@transaction.atomic
def call_missed_record(call: Call, *, reason: str, at: datetime) -> Task | None:
    """Record that nobody answered `call`: a `call.missed` receipt, the call
    back as the lead's next action (owned by the lead's owner, or by the
    business's first active manager or owner when it has none), and where the
    business opts in, the caller's one text-back of the window.

    At most once per call (None when already recorded). A lead whose open
    next action is already a call back keeps that task: this call is added
    to it (its title counts the calls), never a second one. Returns the call
    back. Joins the caller's transaction; locks the lead, the contact and the
    Call row, in that order.
    """
    contact = _caller_lock(call)
    call = (
        Call.objects.select_for_update(of=("self",))
        .select_related("business", "lead__contact", "lead__owner__user")
        .get(pk=call.pk)
    )
    if receipt_written(subject=call.public_id, action="call.missed"):
        return None
    lead = call.lead
    if lead is not None:
        lead.business = call.business  # the same row, in hand
    phones = _caller_phones(contact)
    task = None
    text_back = "off"
    if lead is None or lead.is_test or not lead.is_open:
        text_back = "not sent: no open lead"
    else:
        task = _call_back(call, lead, phones, at=at)
        if call.business.missed_call_text_back:
            text_back = _text_back(call, lead, contact, phones)
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
            "task": task.public_id if task else None,
            "owner": _username(task.owner if task else None),
            "text_back": text_back,
        },
    )
    if lead is not None and not lead.is_test:
        lead_event(lead, "missed_call", key=call.public_id, actor=ACTOR)
    return task


def _caller_phones(contact: Contact | None) -> set[str]:
    """The caller's valid numbers: none for a withheld caller ID, which
    makes a contact of its own with no way to reach it."""
    if contact is None:
        return set()
    return {p.value for p in contact.points.all() if p.kind == ContactPointKind.PHONE and p.is_valid}


def call_back_title(*, who: str, calls: int, last: datetime, zone: str) -> str:
    """What the call back asks, counting the calls; times in the business's zone, named."""
    local = timezone.localtime(last, ZoneInfo(zone))
    when = f"{local:%b} {local.day} {local:%H:%M %Z}"
    if not who:
        if calls == 1:
            return f"Missed call from a withheld number at {when}: no number to call back"
        return f"Missed calls from a withheld number ({calls}, last at {when}): no number to call back"
    what = f"missed call at {when}" if calls == 1 else f"called {calls} times, last at {when}"
    return f"Call back {who} ({what})"[:300]


def _call_back(call: Call, lead: Lead, phones: set[str], *, at: datetime) -> Task:
    """Make the call back the lead's one next action, or add this call to
    the call back it already has. Runs under the lead's lock."""
    business = call.business
    owner = lead.owner if lead.owner is not None and lead.owner.is_active else None
    owner = owner or business_manager(business.pk)
    number = call.from_number if call.from_number in phones else ""
    name = lead.contact.name
    who = f"{name} ({number})" if name and number else number
    due_at = at + timedelta(minutes=business.first_response_minutes)
    current = lead.tasks.filter(kind=Task.Kind.NEXT_ACTION, status=Task.Status.OPEN).first()
    earlier = (
        current.missed_calls.exclude(pk=call.pk).aggregate(n=Count("pk"), last=Max("started_at"))
        if current is not None
        else {"n": 0}
    )
    if current is not None and earlier["n"]:
        # The person called again before anyone called back: the same task,
        # counting, and never due later than it already was.
        last = max(earlier["last"], call.started_at)
        title = call_back_title(who=who, calls=earlier["n"] + 1, last=last, zone=business.timezone)
        task = next_action_update(
            current, title, min(current.due_at, due_at), actor=ACTOR, reason=f"missed call {call.public_id}"
        )
    else:
        # Whatever was next (the first contact, a follow-up), the person
        # calling is newer: the call back replaces it as the next action.
        title = call_back_title(who=who, calls=1, last=call.started_at, zone=business.timezone)
        task = next_action_set(lead, title, due_at, actor=ACTOR, reason=f"missed call {call.public_id}", owner=owner)
    Call.objects.filter(pk=call.pk).update(callback_task=task)
    call.callback_task = task
    return task


def text_back_possible(business: Business) -> bool:
    """Whether the business has a line of its own to text from: an active
    Twilio number or a Messaging Service. A call tracked elsewhere (CallRail)
    reaches a business that may have none; its call back is then the follow-up."""
    sources = twilio_sources(business.pk)
    if any(s.is_active and (s.config or {}).get("phone_number") for s in sources):
        return True
    return bool(messaging_service_for(business.pk, sources=sources))


def text_back_window_start(business: Business, at: datetime) -> datetime:
    """The start of the fixed window `at` falls in: windows of the business's
    length, counted from the Unix epoch in UTC, so every call in one window
    names the same start."""
    seconds = business.missed_call_text_back_window_hours * 3600
    return datetime.fromtimestamp(int(at.timestamp()) // seconds * seconds, tz=UTC)


def text_back_key(business: Business, contact: Contact, at: datetime) -> str:
    start = text_back_window_start(business, at)
    return f"{TEXT_BACK_KEY_PREFIX}:{business.public_id}:{contact.public_id}:{start:%Y%m%dT%H%MZ}"


def _text_back(call: Call, lead: Lead, contact: Contact | None, phones: set[str]) -> str:
    """At most one automated text per caller per window, only from the
    approved playbook and only through the gate (the call itself is the
    conversation that allows a reply, agents.consent.policy; a STOP, a
    landline or quiet hours still decide). Says what happened, for the receipt.

    The window is rolling: no text-back when the caller got one (whatever the
    gate said of it) in the window's length before this call. Missed calls of
    one person are decided one at a time under their contact's lock, so the
    second sees the first's text. The idempotency key is the fixed window the
    call falls in (`text_back_key`): stable for every call in it, so the
    message's unique key alone refuses a second text there even if two
    deciders ever met; the rolling check is what keeps two texts a whole
    window apart when calls straddle a fixed window's end.
    """
    business = call.business
    hours = business.missed_call_text_back_window_hours
    window = timedelta(hours=hours)
    if contact is None or not phones:
        return "not sent: no number to text (withheld caller ID)"
    if not text_back_possible(business):
        return "not sent: the business has no Twilio number or Messaging Service to text from"
    if timezone.now() - call.started_at > window:
        return f"not sent: the call is more than {hours} h old"
    earlier = (
        Message.objects.filter(contact=contact, actor=ACTOR, direction="out", created_at__gt=call.started_at - window)
        .order_by("-created_at")
        .first()
    )
    if earlier is not None:
        return f"not sent: {earlier.public_id} ({earlier.status}) went to this caller within {hours} h"
    try:
        template = template_for_automation(business, TEXT_BACK_TEMPLATE, channel="sms")
        body = template_render(template, playbook_context(lead))
    except TemplateError as exc:
        return f"not sent: {exc}"  # no approved text-back: the call back is the follow-up
    message = message_send(
        lead=lead,
        channel="sms",
        body=body,
        actor=ACTOR,
        idempotency_key=text_back_key(business, contact, call.started_at),
        automated=True,
        template_key=template.key,
    )
    verdict = f"{message.status}: {message.block_reason}" if message.block_reason else message.status
    return f"{message.public_id} {verdict}"
