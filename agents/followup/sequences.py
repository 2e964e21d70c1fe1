"""The sequence engine: follow-up paths that run on their own clock and stop
the moment they should.

- A `Sequence` is a business's path for one trigger (`no_reply`, `no_show`,
  `open_estimate`, `appointment`): steps with a delay (`after: 15m`, `2h`,
  `1d`; measured from the step before, the first from the start; `clock:
  business` counts only the business's open hours and days), a channel (sms,
  email, voice, task) and an approved template or a task title.
- An `Enrollment` is one lead's place in one path. Its next step is one
  `Timer` row (kind `sequence.step`, dedupe key `seq:<enrollment>:<step>`),
  claimed by `run_timers`. A step runs under a row lock on the enrollment and
  advances `next_step_index` by compare-and-set in the same transaction as
  its send, so a step runs at most once whatever overlaps, redeliveries or
  stale re-claims happen; its message's idempotency key is the same key.
- One active automated enrollment per contact (a partial unique constraint).
  The path with the better priority (lower number) runs; any other waits
  (`waiting`) — a newcomer behind it, or the running one when a better path
  arrives — and resumes at its step when the running one ends.
- Two records of one person merged (crm.services.merge), each with a path
  running: the better priority keeps running, the other ends (`merged`).
- Exits shared by every path (`EXIT_REASONS`): reply, booking, won, opt-out,
  complaint, manual hold, disqualification, a stage that leaves the trigger's
  stages, plus each sequence's `goal_stages`. They are applied eagerly by the
  roles that see them (`enrollments_stop`) and checked again before every
  step. Every exit writes a receipt with its reason and blocks the path's
  messages that have not gone out yet (deferred, awaiting approval, queued).
- `sequence_preview` shows, without sending or writing anything, each step's
  time, channel, rendered text and the gate's verdict at that time.

Lock order, everywhere here: the lead row, then the contact row, then
enrollment rows — the order capture and CRM Sync already take the first two.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import transaction
from django.db.models import Q, Subquery
from django.urls import reverse
from django.utils import timezone

from agents.outbound.clock import DAYS, business_minutes_after
from agents.outbound.gate import COUNTED_STATUSES, gate_check, message_send, recipient_point
from agents.playbook.templates import (
    STEP_PLACEHOLDERS,
    TemplateError,
    placeholders_of,
    playbook_context,
    template_for_automation,
    template_render,
    text_render,
)
from crm.models import (
    CLOSED_STAGES,
    Appointment,
    Contact,
    Enrollment,
    Lead,
    Message,
    Provider,
    Sequence,
    Source,
    Stage,
    Task,
    Timer,
)
from crm.registry import Registry
from crm.selectors import business_manager
from crm.services import lead_sync
from crm.services.merge import CONTACTS_MERGING
from crm.services.receipts import receipt_write
from crm.services.records import task_create, task_ensure
from crm.services.timers import timer_handler_register, timer_schedule

ACTOR = "agent:sequence_engine"
STEP_TIMER = "sequence.step"
E = Enrollment.Status
M = Message.Status

# The shared exits, and what each means on the enrollment.
EXIT_REASONS = (
    "reply",
    "booking",
    "won",
    "opt_out",
    "complaint",
    "hold",
    "disqualified",
    "stage_left",
    "goal",
    "completed",
)
# Exits that are the path reaching its end rather than being cut short.
COMPLETING_REASONS = frozenset({"goal", "completed"})
# The stages in which a trigger's path makes sense; leaving them ends the path.
TRIGGER_STAGES: dict[str, frozenset[str]] = {
    "no_reply": frozenset({Stage.NEW, Stage.ASSIGNED, Stage.CONTACTED}),
    "no_show": frozenset({Stage.NO_SHOW}),
    "open_estimate": frozenset({Stage.ESTIMATE_SENT, Stage.APPOINTMENT_HELD, Stage.QUALIFIED}),
    "appointment": frozenset({Stage.BOOKED}),
}
# The last step gets this long to be answered before the path is complete.
COMPLETE_AFTER = timedelta(days=1)
# Messages of an ended path that have not gone out: blocked as `stopped`.
UNSENT = (M.DRAFT, M.DEFERRED, M.PENDING_APPROVAL, M.QUEUED)
# Statuses of a message that went out: the provider accepted it (or, in dry
# run, would have been asked to). Queued, sending and unknown are not yet
# known to have gone anywhere, and a sweep may still fail them.
WENT_OUT = (M.DRY_RUN, M.SENT, M.DELIVERED)

_UNIT_MINUTES = Sequence.STEP_DELAY_MINUTES

# Role-specific hooks, registered at startup by the modules that own them.
# An extra exit check for a trigger: returns an exit reason or "".
ExitCheck = Callable[[Enrollment, Lead, datetime], str]
# What happens when a trigger's path completes without an exit (no_reply →
# unresponsive).
CompletionHook = Callable[[Enrollment, Lead, datetime], None]
# How a channel's step is performed when the engine does not do it itself (voice).
StepRunner = Callable[[Enrollment, Lead, "Step", datetime], str]
TRIGGER_EXITS: Registry[ExitCheck] = Registry("sequence exit check")
ON_COMPLETE: Registry[CompletionHook] = Registry("sequence completion hook")
CHANNEL_RUNNERS: Registry[StepRunner] = Registry("sequence step runner")
# How each trigger's sends are signed in receipts ("agent:<role>").
TRIGGER_ROLES = {
    "no_reply": "agent:no_reply_follow_up",
    "no_show": "agent:no_show_recovery",
    "open_estimate": "agent:open_estimate_follow_up",
    "appointment": "agent:appointment_reminders",
}


class SequenceError(Exception):
    """A sequence's steps cannot be read (a bad delay or channel)."""


# --- steps and their clock ------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    index: int
    after: str
    channel: str
    template: str = ""
    title: str = ""
    clock: str = "absolute"  # or "business": count only open business hours and days


def sequence_steps(sequence: Sequence) -> list[Step]:
    steps = []
    for index, raw in enumerate(sequence.steps or []):
        if not isinstance(raw, dict) or Sequence.step_delay(str(raw.get("after", ""))) is None:
            raise SequenceError(f"sequence {sequence.key}: step {index + 1} has no valid 'after' (like 15m, 2h, 1d)")
        channel = str(raw.get("channel", ""))
        if channel not in Sequence.StepChannel.values:
            raise SequenceError(f"sequence {sequence.key}: step {index + 1} has an unknown channel {channel!r}")
        steps.append(
            Step(
                index=index,
                after=str(raw["after"]),
                channel=channel,
                template=str(raw.get("template", "")),
                title=str(raw.get("title", "")),
                clock=str(raw.get("clock", "absolute")),
            )
        )
    return steps


def delay_minutes(after: str) -> tuple[int, str]:
    delay = Sequence.step_delay(after)
    if delay is None:
        raise SequenceError(f"bad delay {after!r} (like 15m, 2h or 1d)")
    return delay


def step_due(sequence: Sequence, previous: datetime, step: Step) -> datetime:
    """When `step` is due, `previous` being the step before's due time (or the start).

    Absolute delays are plain time. On the business clock minutes and hours
    count only open business hours, and days count open business days (the
    same local time on the Nth open day, or that day's opening if later).
    """
    amount, unit = delay_minutes(step.after)
    hours = sequence.business.business_hours or {}
    if step.clock != "business" or not hours:
        return previous + timedelta(minutes=amount * _UNIT_MINUTES[unit])
    zone = ZoneInfo(sequence.business.timezone)
    if unit != "d":
        return business_minutes_after(previous, amount * _UNIT_MINUTES[unit], hours, zone)
    local = previous.astimezone(zone)
    day, counted = local.date(), 0
    for _ in range(7 * (amount + 8)):
        if counted == amount:
            break
        day += timedelta(days=1)
        counted += DAYS[day.weekday()] in hours
    landing = datetime.combine(day, local.time(), tzinfo=zone)
    # Zero open minutes after a closed moment is the next opening.
    return business_minutes_after(landing, 0, hours, zone).astimezone(previous.tzinfo)


def sequence_for(business_id: int, trigger: str) -> Sequence | None:
    """The business's active path for a trigger: the best priority, then the oldest."""
    return (
        Sequence.objects.select_related("business")
        .filter(business_id=business_id, trigger=trigger, is_active=True)
        .order_by("priority", "pk")
        .first()
    )


# --- placeholders a step supplies -------------------------------------------------------


def step_context(lead: Lead, needs: frozenset[str] = STEP_PLACEHOLDERS) -> dict[str, str]:
    """The lead's placeholders plus the step ones the record can answer (of
    those in `needs`): the business's number, a booking link, the next
    appointment's time. One the record cannot answer is left out, so a
    template needing it refuses to render and the step goes to a person
    instead of guessing."""
    context = playbook_context(lead)
    if not needs & STEP_PLACEHOLDERS:
        return context  # the common case: no query for what the text does not use
    sources = list(Source.objects.filter(business_id=lead.business_id, is_active=True).order_by("pk"))
    phone = next((str(s.config.get("phone_number", "")) for s in sources if s.provider == Provider.TWILIO), "")
    if phone:
        context["business_phone"] = phone
    booking = next((str(s.config.get("booking_url", "")) for s in sources if s.config.get("booking_url")), "")
    if not booking:
        form = next((s for s in sources if s.provider in (Provider.HOSTED_FORM, Provider.WEBSITE)), None)
        if form is not None:
            booking = settings.PUBLIC_BASE_URL.rstrip("/") + reverse("hosted-form", args=[form.key])
    if booking:
        context["booking_url"] = booking
    if "appointment_time" not in needs:
        return context
    upcoming = (
        Appointment.objects.filter(lead=lead, status__in=[Appointment.Status.SCHEDULED, Appointment.Status.CONFIRMED])
        .order_by("starts_at")
        .first()
    )
    if upcoming is not None:
        local = upcoming.starts_at.astimezone(ZoneInfo(lead.business.timezone))
        context["appointment_time"] = f"{local:%A %b} {local.day} at {local:%I:%M %p}".replace(" 0", " ")
    return context


@dataclass(frozen=True)
class Rendered:
    body: str = ""
    subject: str = ""
    template_key: str = ""
    problem: str = ""  # why the step cannot be sent automatically


def step_render(lead: Lead, step: Step) -> Rendered:
    """The approved text a message step sends, or the reason it cannot."""
    try:
        template = template_for_automation(lead.business, step.template, channel=step.channel)
        context = step_context(lead, frozenset(placeholders_of(template.body) + placeholders_of(template.subject)))
        body = template_render(template, context)
        subject = text_render(template.subject, context) if template.subject else ""
    except TemplateError as exc:
        return Rendered(problem=str(exc))
    return Rendered(body=body, subject=subject, template_key=template.key)


# --- locks, timers and receipts -------------------------------------------------------


def _lock_contact(contact_id: int) -> Contact:
    return Contact.objects.select_for_update().get(pk=contact_id)


def _step_key(enrollment: Enrollment, index: int) -> str:
    return f"seq:{enrollment.public_id}:{index}"


def _schedule(enrollment: Enrollment, index: int, due_at: datetime) -> None:
    """The timer for step `index` (the index past the last step completes the path)."""
    key = _step_key(enrollment, index)
    timer = timer_schedule(
        business=enrollment.business,
        lead=enrollment.lead,
        kind=STEP_TIMER,
        due_at=due_at,
        payload={"enrollment": enrollment.pk, "step": index},
        dedupe_key=key,
    )
    if timer.status == Timer.Status.CANCELED:
        # The path waited and now resumes at this step: its timer comes back.
        Timer.objects.filter(pk=timer.pk, status=Timer.Status.CANCELED).update(
            status=Timer.Status.PENDING, due_at=due_at, claimed_at=None, error=""
        )
    enrollment.next_step_index, enrollment.next_step_due_at = index, due_at
    enrollment.save(update_fields=["next_step_index", "next_step_due_at"])


def _cancel_timers(enrollment: Enrollment) -> None:
    Timer.objects.filter(
        lead_id=enrollment.lead_id,
        kind=STEP_TIMER,
        status=Timer.Status.PENDING,
        dedupe_key__startswith=f"seq:{enrollment.public_id}:",
    ).update(status=Timer.Status.CANCELED)


def _receipt(enrollment: Enrollment, action: str, *, actor: str, reason: str, before: str, **after: Any) -> None:
    receipt_write(
        business=enrollment.business,
        lead=enrollment.lead,
        subject=enrollment.public_id,
        actor=actor,
        action=action,
        reason=reason,
        before={"status": before},
        after={"status": enrollment.status, "sequence": enrollment.sequence.key, **after},
    )


def _block_unsent(enrollment: Enrollment, *, reason: str) -> int:
    """The path ended: what it meant to send and has not sent never goes out."""
    blocked = 0
    for message in Message.objects.filter(enrollment=enrollment, status__in=UNSENT).select_related("lead"):
        # Compare-and-set: a worker that claimed the row (queued → sending) first wins.
        if Message.objects.filter(pk=message.pk, status=message.status).update(
            status=M.BLOCKED, block_reason=Message.BlockReason.STOPPED, deferred_until=None
        ):
            blocked += 1
            receipt_write(
                business=message.business,
                lead=message.lead,
                subject=message.public_id,
                actor=ACTOR,
                action="message.blocked",
                reason=f"stopped: the path ended ({reason})",
                before={"status": message.status},
                after={"status": M.BLOCKED, "block_reason": "stopped"},
            )
    return blocked


def _end(enrollment: Enrollment, *, reason: str, actor: str, now: datetime) -> None:
    """End one enrollment (the caller holds the contact lock)."""
    before = enrollment.status
    enrollment.status = E.COMPLETED if reason in COMPLETING_REASONS else E.STOPPED
    enrollment.stop_reason, enrollment.ended_at, enrollment.next_step_due_at = reason, now, None
    enrollment.save(update_fields=["status", "stop_reason", "ended_at", "next_step_due_at"])
    _cancel_timers(enrollment)
    blocked = _block_unsent(enrollment, reason=reason)
    _receipt(
        enrollment,
        f"enrollment.{enrollment.status}",
        actor=actor,
        reason=reason,
        before=before,
        step=enrollment.next_step_index,
        messages_blocked=blocked,
    )


def _activate(
    enrollment: Enrollment, *, actor: str, now: datetime, action: str, reason: str, before: str | None = None
) -> None:
    before = enrollment.status if before is None else before
    enrollment.status = E.ACTIVE
    enrollment.save(update_fields=["status"])
    steps = sequence_steps(enrollment.sequence)
    index = enrollment.next_step_index
    due = step_due(enrollment.sequence, now, steps[index]) if index < len(steps) else now
    _schedule(enrollment, index, due)
    _receipt(enrollment, action, actor=actor, reason=reason, before=before, step=index, next_step_due_at=due)


def _wait(enrollment: Enrollment, *, actor: str, behind: Enrollment, before: str | None = None) -> None:
    before = enrollment.status if before is None else before
    enrollment.status, enrollment.next_step_due_at = E.WAITING, None
    enrollment.save(update_fields=["status", "next_step_due_at"])
    _cancel_timers(enrollment)
    _receipt(
        enrollment,
        "enrollment.waiting",
        actor=actor,
        before=before,
        step=enrollment.next_step_index,
        reason=f"one path at a time: {behind.sequence.key} ({behind.public_id}, priority "
        f"{behind.sequence.priority}) runs for this person",
    )


def _resume_next(contact_id: int, *, actor: str, now: datetime) -> Enrollment | None:
    """The contact's best waiting path becomes active, unless one already is.
    A waiting path whose own exit applies by now ends instead."""
    if Enrollment.objects.filter(contact_id=contact_id, status=E.ACTIVE).exists():
        return None
    waiting = (
        Enrollment.objects.select_for_update(of=("self",))
        .select_related("sequence__business", "lead__business", "lead__contact", "business")
        .filter(contact_id=contact_id, status=E.WAITING)
        .order_by("sequence__priority", "created_at", "pk")
    )
    for enrollment in waiting:
        reason = exit_reason(enrollment, enrollment.lead, now)
        if reason:
            _end(enrollment, reason=reason, actor=actor, now=now)
            continue
        _activate(enrollment, actor=actor, now=now, action="enrollment.resumed", reason="the path ahead of it ended")
        return enrollment
    return None


# --- exits ---------------------------------------------------------------------------


def _replied_since(enrollment: Enrollment) -> bool:
    return Message.objects.filter(
        contact_id=enrollment.contact_id, direction="in", created_at__gt=enrollment.created_at
    ).exists()


def exit_reason(enrollment: Enrollment, lead: Lead, now: datetime) -> str:
    """The first shared exit (or the sequence's goal) that applies now, or ""."""
    sequence, trigger = enrollment.sequence, enrollment.sequence.trigger
    contact = lead.contact
    if lead.hold:
        return "hold"
    if contact.automation_paused:
        return "complaint" if "complaint" in (lead.exceptions or []) else "opt_out"
    if lead.stage in (sequence.goal_stages or []):
        return "goal"
    if lead.stage == Stage.WON:
        return "won"
    if lead.stage == Stage.DISQUALIFIED:
        return "disqualified"
    if lead.stage == Stage.BOOKED and trigger != "appointment":
        return "booking"
    if lead.stage not in TRIGGER_STAGES.get(trigger, frozenset(Stage.values) - set(CLOSED_STAGES)):
        return "stage_left"
    if trigger != "appointment" and _replied_since(enrollment):
        return "reply"
    extra = TRIGGER_EXITS.get(trigger)
    return extra(enrollment, lead, now) if extra else ""


def _startable(lead: Lead) -> bool:
    return lead.is_open and not lead.hold and not lead.is_test and not lead.contact.automation_paused


# --- the public write path ---------------------------------------------------------------


def _load(lead: Lead) -> Lead:
    # Locks the lead first (see the module's lock order).
    return (
        Lead.objects.select_for_update(of=("self",), no_key=True).select_related("business", "contact").get(pk=lead.pk)
    )


@transaction.atomic
def enrollment_start(lead: Lead, trigger: str, *, actor: str, now: datetime | None = None) -> Enrollment | None:
    """Enroll the lead in the business's active path for `trigger`.

    None when the business has no such path, or the lead is closed, held,
    paused, a test lead or outside the trigger's stages. Idempotent: a lead
    already in that path (active or waiting) gets that enrollment back. With
    another path running for the person, the better priority runs and the
    other waits. One transaction, under the lead and contact row locks;
    writes `enrollment.started` (or `.waiting`) receipts.
    """
    now = now or timezone.now()
    lead = _load(lead)
    sequence = sequence_for(lead.business_id, trigger)
    if sequence is None or not _startable(lead) or lead.stage not in TRIGGER_STAGES.get(trigger, {lead.stage}):
        return None
    if not sequence_steps(sequence):
        return None
    _lock_contact(lead.contact_id)
    existing = Enrollment.objects.filter(lead=lead, sequence=sequence, status__in=[E.ACTIVE, E.WAITING]).first()
    if existing is not None:
        return existing
    return _enroll(lead, sequence, actor=actor, now=now, start_index=0, reason=f"trigger {trigger}")


def _enroll(lead: Lead, sequence: Sequence, *, actor: str, now: datetime, start_index: int, reason: str) -> Enrollment:
    running = (
        Enrollment.objects.select_for_update(of=("self",))
        .select_related("sequence", "business", "lead")
        .filter(contact_id=lead.contact_id, status=E.ACTIVE)
        .first()
    )
    enrollment = Enrollment.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        sequence=sequence,
        status=E.WAITING,
        next_step_index=start_index,
    )
    if running is not None and running.sequence.priority <= sequence.priority:
        _wait(enrollment, actor=actor, behind=running, before="")
        return enrollment
    if running is not None:
        # A better path arrives: the running one steps aside and waits at its step.
        _wait(running, actor=actor, behind=enrollment)
    _activate(enrollment, actor=actor, now=now, action="enrollment.started", reason=reason, before="")
    return enrollment


@transaction.atomic
def enrollments_stop(
    *, lead: Lead | None = None, contact: Contact | None = None, reason: str, actor: str, now: datetime | None = None
) -> int:
    """End every active or waiting enrollment of the lead (or of every lead of
    the contact), cancel their pending step timers, block their unsent
    messages and write a receipt each; returns how many ended.

    A path of another lead of the same person that was waiting behind one of
    these resumes. One transaction, under the lead (when given) and contact
    row locks; safe to call again (nothing left to end is a no-op).
    """
    if (lead is None) == (contact is None):
        raise ValueError("pass a lead or a contact")
    now = now or timezone.now()
    if lead is not None:
        lead = _load(lead)
        contact_id = lead.contact_id
    else:
        assert contact is not None
        contact_id = contact.pk
    _lock_contact(contact_id)
    current = Enrollment.objects.select_for_update(of=("self",)).select_related("sequence", "business", "lead")
    current = current.filter(status__in=[E.ACTIVE, E.WAITING])
    current = current.filter(lead=lead) if lead is not None else current.filter(contact_id=contact_id)
    ended = 0
    for enrollment in current.order_by("pk"):
        _end(enrollment, reason=reason, actor=actor, now=now)
        ended += 1
    if ended:
        _resume_next(contact_id, actor=actor, now=now)
    return ended


@transaction.atomic
def enrollment_resume_after_hold(lead: Lead, *, actor: str, now: datetime | None = None) -> Enrollment | None:
    """The hold is released: the path the hold stopped starts again at the step
    it had reached (a new enrollment, so the old one's record stays as it
    was). None when nothing was stopped by the hold, the lead is still held or
    closed, or a path already runs for the lead."""
    now = now or timezone.now()
    lead = _load(lead)
    if not _startable(lead):
        return None
    _lock_contact(lead.contact_id)
    if Enrollment.objects.filter(lead=lead, status__in=[E.ACTIVE, E.WAITING]).exists():
        return None
    held = (
        Enrollment.objects.select_related("sequence__business")
        .filter(lead=lead, status=E.STOPPED, stop_reason="hold")
        .order_by("-ended_at", "-pk")
        .first()
    )
    if held is None or not held.sequence.is_active:
        return None
    if held.next_step_index >= len(sequence_steps(held.sequence)):
        return None
    if lead.stage not in TRIGGER_STAGES.get(held.sequence.trigger, {lead.stage}):
        return None
    return _enroll(
        lead,
        held.sequence,
        actor=actor,
        now=now,
        start_index=held.next_step_index,
        reason=f"hold released: {held.public_id} resumes at step {held.next_step_index + 1}",
    )


# --- running a step -------------------------------------------------------------------------


def step_run(enrollment_id: int, index: int, *, now: datetime, lead_id: int | None = None) -> str:
    """Run step `index` of an enrollment if it is still the one due.

    One transaction (the caller's, when it has one: `run_timers` runs each
    step with its timer's done mark), under the lead, contact and enrollment
    row locks. `lead_id`, when the caller knows it (the step's timer row
    does), saves reading it from the enrollment first. The
    shared exits are checked first; then the step acts (a message through the
    gate, a task for a person, or a call) and the next step is scheduled — or,
    past the last step, the path completes and a waiting path resumes.
    Returns what happened; "skipped" when the step already ran or the path
    ended (a redelivery, an overlapping run).
    """
    if lead_id is None:
        lead_id = Enrollment.objects.filter(pk=enrollment_id).values_list("lead_id", flat=True).first()
        if lead_id is None:
            return "skipped"
    # No savepoint inside a caller's transaction: a failing step fails it whole.
    with transaction.atomic(savepoint=False):
        lead = (
            Lead.objects.select_for_update(of=("self",), no_key=True)
            .select_related("business", "owner__user")
            .filter(pk=lead_id)
            .first()
        )
        # The enrollment's contact, read and locked in one statement (FOR
        # UPDATE locks only the contact row, not the enrollment it looks up).
        contact = (
            Contact.objects.select_for_update()
            .filter(pk=Subquery(Enrollment.objects.filter(pk=enrollment_id).values("contact_id")))
            .first()
        )
        if lead is None or contact is None:
            return "skipped"
        enrollment = Enrollment.objects.select_for_update(of=("self",)).select_related("sequence").get(pk=enrollment_id)
        if enrollment.lead_id != lead.pk:
            raise LookupError(f"timer for {enrollment.public_id} names lead {lead.public_id}, not the enrollment's")
        if enrollment.status != E.ACTIVE or enrollment.next_step_index != index:
            return "skipped"
        # One business row for all of them; the contact is the locked, current one.
        if contact.pk == lead.contact_id:
            lead.contact = contact
        else:
            lead.contact = Contact.objects.get(pk=lead.contact_id)
        for holder in (lead.contact, enrollment, enrollment.sequence):
            if holder.business_id == lead.business_id:
                holder.business = lead.business
        enrollment.lead, enrollment.contact = lead, contact
        reason = exit_reason(enrollment, lead, now)
        steps = sequence_steps(enrollment.sequence)
        if not reason and index >= len(steps):
            reason = "completed"
        if reason:
            _end(enrollment, reason=reason, actor=ACTOR, now=now)
            if reason == "completed" and (hook := ON_COMPLETE.get(enrollment.sequence.trigger)):
                hook(enrollment, lead, now)
            _resume_next(enrollment.contact_id, actor=ACTOR, now=now)
            return reason
        step = steps[index]
        outcome = _perform(enrollment, lead, step, now)
        previous = enrollment.next_step_due_at or now
        following = index + 1
        due = step_due(enrollment.sequence, previous, steps[following]) if following < len(steps) else None
        _schedule(enrollment, following, due or previous + COMPLETE_AFTER)
        _receipt(
            enrollment,
            "enrollment.step_ran",
            actor=ACTOR,
            reason=outcome,
            before=E.ACTIVE,
            step=index + 1,
            channel=step.channel,
            next_step_due_at=enrollment.next_step_due_at,
        )
        return outcome


def _step_owner(lead: Lead) -> Any:
    return lead.owner if lead.owner is not None and lead.owner.is_active else business_manager(lead.business_id)


def _perform(enrollment: Enrollment, lead: Lead, step: Step, now: datetime) -> str:
    if step.channel == Sequence.StepChannel.TASK:
        task = task_create(
            lead=lead,
            title=step.title or f"Follow up ({enrollment.sequence.key})",
            due_at=now,
            actor=TRIGGER_ROLES.get(enrollment.sequence.trigger, ACTOR),
            kind="follow_up",
            owner=_step_owner(lead),
            reason=f"step {step.index + 1} of {enrollment.sequence.key}",
        )
        return f"task {task.public_id}"
    runner = CHANNEL_RUNNERS.get(step.channel)
    if runner is not None:
        return runner(enrollment, lead, step, now)
    return message_step(enrollment, lead, step, now)


def message_step(enrollment: Enrollment, lead: Lead, step: Step, now: datetime) -> str:
    """Send the step's approved text through the gate; when there is no
    approved text for it, a person gets the step as a task instead."""
    rendered = step_render(lead, step)
    if rendered.problem:
        task = step_to_person(enrollment, lead, step, now, rendered.problem)
        return f"task {task.public_id}: {rendered.problem}"
    message = message_send(
        lead=lead,
        channel=step.channel,
        body=rendered.body,
        subject=rendered.subject,
        actor=TRIGGER_ROLES.get(enrollment.sequence.trigger, ACTOR),
        idempotency_key=_step_key(enrollment, step.index),
        automated=True,
        template_key=rendered.template_key,
        enrollment=enrollment,
        now=now,
        lead_locked=True,  # step_run holds the lead and contact locks and read them in this transaction
    )
    return f"{message.status} {message.public_id}" + (f" ({message.block_reason})" if message.block_reason else "")


def step_to_person(enrollment: Enrollment, lead: Lead, step: Step, now: datetime, problem: str) -> Task:
    title = f"Send the {step.channel} '{step.template}' yourself ({enrollment.sequence.key}, step {step.index + 1})"
    return task_ensure(
        lead=lead,
        title=title[:300],
        due_at=now,
        actor=ACTOR,
        kind="follow_up",
        owner=_step_owner(lead),
        reason=f"no approved text to send automatically: {problem}",
    )


def _step_timer(timer: Timer) -> None:
    # `claimed_at` is the `now` the run was asked to act at: running timers
    # "at" a later time (tests, catch-up) acts as of that time.
    step_run(
        int(timer.payload["enrollment"]),
        int(timer.payload["step"]),
        now=timer.claimed_at or timezone.now(),
        lead_id=timer.lead_id,
    )


# --- dry-run preview -------------------------------------------------------------------------


@dataclass
class PreviewStep:
    step: int
    due_at: datetime
    channel: str
    body: str
    subject: str = ""
    template: str = ""
    # The gate's verdict as a message status (dry_run, queued, deferred,
    # blocked), or `task` (a person's task), or `skipped` (voice not eligible).
    verdict: str = ""
    reason: str = ""
    deferred_until: datetime | None = None
    owner: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in self.__dict__.items()}


@dataclass
class _Projection:
    """What earlier previewed steps would have sent, for the later ones' checks."""

    sends: list[tuple[datetime, str]] = field(default_factory=list)


def sequence_preview(lead: Lead, sequence: Sequence, now: datetime | None = None) -> list[PreviewStep]:
    """What the path would do for this lead if it started at `now`: each step's
    due time, channel, rendered text, and the gate's verdict at that time
    (consent, quiet hours, daily cap, one path at a time), counting what the
    earlier steps would have sent. Reads only; sends and writes nothing."""
    now = now or timezone.now()
    lead = Lead.objects.select_related("business", "contact__business", "owner__user").get(pk=lead.pk)
    sequence = Sequence.objects.select_related("business").get(pk=sequence.pk)
    own = Enrollment.objects.filter(lead=lead, sequence=sequence, status__in=[E.ACTIVE, E.WAITING]).first()
    projection = _Projection()
    preview: list[PreviewStep] = []
    due = now
    for step in sequence_steps(sequence):
        due = step_due(sequence, due, step)
        owner = _step_owner(lead)
        item = PreviewStep(
            step=step.index + 1,
            due_at=due,
            channel=step.channel,
            body=step.title,
            template=step.template,
            owner=owner.user.get_username() if owner else None,
        )
        preview.append(item)
        if step.channel == Sequence.StepChannel.TASK:
            item.verdict = "task"
            continue
        rendered = step_render(lead, step)
        if rendered.problem:
            item.verdict, item.reason = "task", rendered.problem
            continue
        item.body, item.subject = rendered.body, rendered.subject
        if step.channel == Sequence.StepChannel.VOICE and (preview_check := CHANNEL_PREVIEWS.get("voice")):
            skip = preview_check(lead, projection.sends, due)
            if skip:
                item.verdict, item.reason = "skipped", skip
                continue
        _preview_gate(lead, own, step, item, projection, due)
    return preview


# A channel's own eligibility for the preview (voice: the SMS and email paths
# ran without a reply): given the lead, what earlier steps sent, and when.
PreviewCheck = Callable[[Lead, list[tuple[datetime, str]], datetime], str]
CHANNEL_PREVIEWS: Registry[PreviewCheck] = Registry("sequence preview check")


def _preview_gate(
    lead: Lead, own: Enrollment | None, step: Step, item: PreviewStep, projection: _Projection, due: datetime
) -> None:
    message = Message(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        contact_point=recipient_point(lead.contact, step.channel),
        direction="out",
        channel=step.channel,
        body=item.body,
        automated=True,
        enrollment=own,
    )
    verdict = gate_check(message, automated=True, compliance_reply=False, now=due)
    status, reason = verdict.status, verdict.reason
    if status == M.QUEUED:
        day_ago = due - timedelta(hours=24)
        on_record = Message.objects.filter(
            contact=lead.contact, direction="out", status__in=COUNTED_STATUSES, created_at__gte=day_ago
        ).count()
        projected = sum(1 for at, _channel in projection.sends if at >= day_ago)
        if on_record + projected >= lead.business.max_texts_per_day:
            status, reason = M.BLOCKED, "daily_cap"
    if status == M.QUEUED and settings.SEND_MODE != "live":
        status = M.DRY_RUN
    item.verdict, item.reason, item.deferred_until = status, reason, verdict.deferred_until
    if status in (M.DRY_RUN, M.QUEUED, M.DEFERRED):
        projection.sends.append((due, step.channel))


def sent_on_path(lead: Lead, channel: str) -> Q:
    """Automated messages of this channel the provider accepted (or, in dry run, would have been handed)."""
    return Q(lead=lead, direction="out", channel=channel, automated=True, status__in=WENT_OUT)


# --- the orchestrator's steps for holds -----------------------------------------------------


def hold_set_step(lead: Lead, data: dict[str, Any]) -> str:
    """`hold.set`: a person holds the lead, so its paths end (reason `hold`)."""
    return f"ended {enrollments_stop(lead=lead, reason='hold', actor=ACTOR)}"


def hold_released_step(lead: Lead, data: dict[str, Any]) -> str:
    """`hold.released`: the path the hold stopped starts again where it was."""
    resumed = enrollment_resume_after_hold(lead, actor=ACTOR)
    return f"resumed as {resumed.public_id}" if resumed else "nothing to resume"


def _lead_closed(lead: Lead, stage: str, actor: str) -> None:
    enrollments_stop(lead=lead, reason="won" if stage == Stage.WON else "stage_left", actor=actor)


# Why a path ended when its person was merged into another who had a better one.
MERGED_REASON = "merged"


def _contacts_merging(keep: Contact, merge: Contact, actor: str) -> list[str]:
    """Two records of one person become one, each maybe with a path running:
    one path per person, so the better priority (then the older) keeps
    running and the other ends, with its receipt. The merge holds both
    people's leads and contact rows; their waiting paths wait on."""
    active = list(
        Enrollment.objects.select_for_update(of=("self",))
        .select_related("sequence", "business", "lead")
        .filter(contact_id__in=[keep.pk, merge.pk], status=E.ACTIVE)
        .order_by("sequence__priority", "created_at", "pk")
    )
    now = timezone.now()
    for enrollment in active[1:]:
        _end(enrollment, reason=MERGED_REASON, actor=actor, now=now)
    return [enrollment.public_id for enrollment in active[1:]]


def register() -> None:
    # A step is one transaction: it commits with its timer's done mark.
    timer_handler_register(STEP_TIMER, _step_timer, atomic=True)
    # However a lead closes (a task's outcome, a visit's, a no-show's), its paths end with it.
    lead_sync.LEAD_CLOSED.register("sequences", _lead_closed)
    # However two records of one person merge, one path runs for them.
    CONTACTS_MERGING.register("sequences", _contacts_merging)
