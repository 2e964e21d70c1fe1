"""Calendar Booking: book, reschedule, cancel, mark held; reminders; and the
lead's next state after a held visit.

Concurrency (the last place in a slot): every booking into an availability
rule first locks that rule's row (`SELECT … FOR UPDATE`), then counts the
appointments holding places in the slot. Two setters racing for the last
place queue on the lock; the second counts the first one's appointment and is
told the slot is full (`SlotFull`), with nothing written. Locks are always
taken in the same order — availability, appointment, lead — so bookings,
reschedules, cancellations and no-shows never deadlock each other.

Booking, in the booking's own transaction: the lead moves to `booked`
through CRM Sync (via `engaged` from a new, lost or unresponsive lead), every
nurture path stops (`enrollments_stop`, reason `booking`), a pending no-show
deadline is canceled, the next action becomes the visit, the reminders are
scheduled as Timer rows with dedupe keys (24 h and 2 h before), the
technician brief is written on the appointment, and the confirmation goes
through the send gate (dry run by default). The `booking` event then emails
the brief to the technician (`booking_step`). Cancel and reschedule cancel
the reminders of the old appointment; a canceled lead gets a rebooking next
action (`cancellation_step`); a held visit gets the owner's next-state
decision (`held_step`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.db import transaction
from django.utils import timezone

from agents.booking.slots import HOLDING, BookingError, NotASlot, members_free, slot_window, when_label
from agents.booking.technician_brief import brief_email, brief_store
from agents.events import MissingInformation, lead_event
from agents.fit.exceptions import booking_refusal
from agents.followup.sequences.engine import enrollments_stop
from agents.notify import member_notify
from agents.outbound.gate import message_send
from agents.playbook.templates import TemplateError, playbook_context, template_for_automation, template_render
from crm.models import (
    Appointment,
    Availability,
    Estimate,
    EventType,
    Lead,
    Message,
    Stage,
    Task,
    TeamMember,
    Timer,
)
from crm.selectors import business_manager
from crm.services import lead_sync
from crm.services.next_action import next_action_set
from crm.services.outbox import event_emit
from crm.services.receipts import receipt_write
from crm.services.records import appointment_record, task_ensure
from crm.services.sync import calendar_busy, sync_changes_canceled
from crm.services.timers import timer_handler_register, timer_schedule

ACTOR = "agent:calendar_booking"
REMINDER_TIMER = "booking.reminder"
REMINDERS = (("24h", timedelta(hours=24)), ("2h", timedelta(hours=2)))
NO_SHOW_DEADLINE_TIMER = "no_show.deadline"
CONFIRMATION_TEMPLATE = "appointment_confirmation_sms"
REMINDER_TEMPLATE = "appointment_reminder_sms"
# A canceled visit is rebooked by a person within this; a held visit's next state is decided within a day.
REBOOK_DUE = timedelta(hours=2)
HELD_DECISION_DUE = timedelta(days=1)
NEXT_STATES = ("estimate_sent", "won", "lost", "follow_up")


class SlotFull(BookingError):
    code = "slot_full"


class AlreadyBooked(BookingError):
    code = "already_booked"


class LeadNotBookable(BookingError):
    code = "lead_not_bookable"


class AppointmentClosed(BookingError):
    code = "appointment_closed"


@dataclass(frozen=True)
class Booked:
    appointment: Appointment
    # The confirmation as the gate decided it (None: a person must confirm; see the task).
    confirmation: Message | None


def _zone(lead: Lead) -> ZoneInfo:
    return ZoneInfo(lead.business.timezone)


def appointment_when(appointment: Appointment) -> str:
    return when_label(appointment.starts_at, appointment.ends_at, _zone(appointment.lead))


def owner_or_manager(lead: Lead) -> TeamMember | None:
    return lead.owner if lead.owner_id and lead.owner and lead.owner.is_active else business_manager(lead.business_id)


def lead_display_name(lead: Lead) -> str:
    return lead.contact.name or lead.public_id


# --- moving the lead --------------------------------------------------------


def _to_booked(lead: Lead, *, actor: str, reason: str) -> None:
    """booked through CRM Sync; from new, lost or unresponsive by way of engaged
    (the person engaged by booking). LeadNotBookable where the table forbids it."""
    stage = Lead.objects.values_list("stage", flat=True).get(pk=lead.pk)
    try:
        if stage == Stage.BOOKED:
            return
        if lead_sync.transition_allowed(stage, Stage.BOOKED):
            lead_sync.lead_transition(lead, Stage.BOOKED, actor=actor, reason=reason)
        elif lead_sync.transition_allowed(stage, Stage.ENGAGED):
            lead_sync.lead_transition(lead, Stage.ENGAGED, actor=actor, reason=reason)
            lead_sync.lead_transition(lead, Stage.BOOKED, actor=actor, reason=reason)
        else:
            raise LeadNotBookable(f"{lead.public_id} is {stage}: a lead there cannot be booked")
    except lead_sync.LeadSyncError as exc:
        raise LeadNotBookable(str(exc)) from exc


# --- booking ----------------------------------------------------------------


def _technician(
    rule: Availability, starts: datetime, ends: datetime, *, wanted: TeamMember | None, prefer: TeamMember | None
) -> TeamMember | None:
    """Who takes the visit: the member asked for, else the free member with the
    fewest visits overlapping it (the previous technician first on a reschedule)."""
    members = list(rule.members.all())
    if not members:
        if wanted is not None:
            raise NotASlot(f"{rule.public_id} names no technicians: {wanted} cannot be picked")
        return None
    free = members_free(rule, starts, ends=ends, busy=calendar_busy([m.pk for m in members]))
    if wanted is not None:
        if wanted not in free:
            raise NotASlot(f"{wanted} does not work this slot or is away then")
        return wanted
    if not free:
        raise NotASlot("nobody on this slot is working then")
    busy = Counter(
        Appointment.objects.filter(
            assigned_to__in=free, status__in=HOLDING, starts_at__lt=ends, ends_at__gt=starts
        ).values_list("assigned_to_id", flat=True)
    )
    return min(free, key=lambda m: (m != prefer, busy[m.pk], m.pk))


def _locked_rule(availability: Availability, lead: Lead) -> Availability:
    # The lock that gives the last place to one setter: every booking into
    # this rule waits here, then counts with the earlier bookings committed.
    rule = (
        Availability.objects.select_for_update()
        .filter(pk=availability.pk, business_id=lead.business_id, is_active=True)
        .first()
    )
    if rule is None:
        raise NotASlot(f"{availability.public_id} is not an active availability rule of this business")
    return rule


def _slot_claim(
    rule: Availability, lead: Lead, starts_at: datetime, now: datetime, *, exclude: Appointment | None = None
) -> tuple[datetime, datetime]:
    starts, ends = slot_window(rule, starts_at, _zone(lead))
    if starts <= now:
        raise NotASlot("that slot has already started: pick a later one")
    holding = Appointment.objects.filter(availability=rule, starts_at=starts, status__in=HOLDING)
    if exclude is not None:
        holding = holding.exclude(pk=exclude.pk)
    taken = holding.count()
    if taken >= rule.capacity:
        raise SlotFull(
            f"{when_label(starts, ends, _zone(lead))} is full ({taken} of {rule.capacity} booked): pick another slot"
        )
    return starts, ends


@transaction.atomic
def appointment_book(
    lead: Lead,
    *,
    availability: Availability,
    starts_at: datetime,
    actor: str,
    assigned_to: TeamMember | None = None,
    notes: str = "",
    location: str = "",
    confirm: bool = True,
    now: datetime | None = None,
) -> Booked:
    """Book the lead into one approved slot, concurrency-safely. `location`:
    the service address the setter confirmed (else the contact's).

    Owns one transaction. Raises a BookingError (NotASlot, SlotFull,
    AlreadyBooked, LeadNotBookable) and writes nothing when refused.
    """
    now = now or timezone.now()
    refusal = booking_refusal(lead)
    if refusal:
        raise LeadNotBookable(refusal)
    rule = _locked_rule(availability, lead)
    starts, ends = _slot_claim(rule, lead, starts_at, now)
    current = lead.appointments.filter(status__in=HOLDING).order_by("starts_at").first()
    if current is not None:
        raise AlreadyBooked(
            f"{current.public_id} ({appointment_when(current)}) is still scheduled: reschedule it, "
            "or mark it held or no-show first"
        )
    member = _technician(rule, starts, ends, wanted=assigned_to, prefer=None)
    _to_booked(lead, actor=actor, reason=f"booked {when_label(starts, ends, _zone(lead))}")
    appointment = appointment_record(
        lead=lead,
        starts_at=starts,
        ends_at=ends,
        actor=actor,
        availability=rule,
        assigned_to=member,
        notes=notes,
        location=location.strip()[:300] or _location(lead),
        status=Appointment.Status.SCHEDULED,
    )
    return Booked(appointment, _after_booking(lead, appointment, actor=actor, confirm=confirm, now=now))


def _location(lead: Lead) -> str:
    contact = lead.contact
    return ", ".join(part for part in (contact.address, contact.postal_code) if part)[:300]


def _after_booking(lead: Lead, appointment: Appointment, *, actor: str, confirm: bool, now: datetime) -> Message | None:
    """What every new appointment sets off, in the booking's transaction."""
    enrollments_stop(lead=lead, reason="booking", actor=actor)
    Timer.objects.filter(lead=lead, kind=NO_SHOW_DEADLINE_TIMER, status=Timer.Status.PENDING).update(
        status=Timer.Status.CANCELED, error=f"rebooked: {appointment.public_id}"
    )
    who = appointment.assigned_to
    title = f"Visit {appointment_when(appointment)}" + (f" with {who}" if who else "")
    next_action_set(
        lead,
        title,
        appointment.starts_at,
        actor=actor,
        reason=f"booked {appointment.public_id}",
        owner=owner_or_manager(lead),
    )
    reminders_schedule(appointment, now=now)
    brief_store(appointment)
    confirmation = _confirm(lead, appointment, actor=actor, now=now) if confirm else None
    lead_event(lead, "booking", key=appointment.public_id, data={"appointment": appointment.public_id}, actor=actor)
    return confirmation


def _confirm(lead: Lead, appointment: Appointment, *, actor: str, now: datetime) -> Message | None:
    when = appointment_when(appointment)
    try:
        template = template_for_automation(lead.business, CONFIRMATION_TEMPLATE, channel="sms")
        body = template_render(template, {**playbook_context(lead), "appointment_time": when})
    except TemplateError as exc:
        _person_task(
            lead, f"Confirm the visit {when} with {lead_display_name(lead)} yourself", str(exc), actor=actor, now=now
        )
        return None
    message = message_send(
        lead=lead,
        channel="sms",
        body=body,
        actor=actor,
        idempotency_key=f"appointment.confirmation:{appointment.public_id}",
        automated=actor.startswith("agent:"),
        template_key=template.key,
        now=now,
    )
    if message.status == Message.Status.BLOCKED:
        _person_task(
            lead,
            f"Confirm the visit {when} with {lead_display_name(lead)} yourself",
            f"the confirmation was blocked ({message.block_reason})",
            actor=actor,
            now=now,
        )
    return message


def _person_task(lead: Lead, title: str, reason: str, *, actor: str, now: datetime) -> Task:
    return task_ensure(
        lead=lead, title=title, due_at=now, actor=actor, kind="follow_up", owner=owner_or_manager(lead), reason=reason
    )


# --- reminders ---------------------------------------------------------------


def reminders_schedule(appointment: Appointment, *, now: datetime) -> list[Timer]:
    """One timer per reminder still in the future; the dedupe key makes a
    second call (a redelivered step) find the same rows."""
    timers = []
    for label, before in REMINDERS:
        due = appointment.starts_at - before
        if due <= now:
            continue
        timers.append(
            timer_schedule(
                business=appointment.lead.business,
                lead=appointment.lead,
                kind=REMINDER_TIMER,
                due_at=due,
                payload={"appointment": appointment.pk, "reminder": label},
                dedupe_key=f"{REMINDER_TIMER}:{appointment.public_id}:{label}",
            )
        )
    return timers


def reminders_cancel(appointment: Appointment, *, why: str) -> int:
    return Timer.objects.filter(
        kind=REMINDER_TIMER,
        status=Timer.Status.PENDING,
        dedupe_key__startswith=f"{REMINDER_TIMER}:{appointment.public_id}:",
    ).update(status=Timer.Status.CANCELED, error=why)


@transaction.atomic
def reminder_send(timer: Timer) -> str:
    """The timer handler: the approved reminder through the gate, if the
    appointment still holds its place. The appointment row is locked, so a
    cancel racing the reminder either wins (nothing is sent) or waits for it."""
    appointment = (
        Appointment.objects.select_for_update(of=("self",))
        .select_related("lead__business", "lead__contact", "lead__owner__user")
        .filter(pk=timer.payload.get("appointment"))
        .first()
    )
    if appointment is None or appointment.status not in HOLDING:
        return "skipped: the appointment no longer holds its place"
    lead, label = appointment.lead, str(timer.payload.get("reminder", ""))
    when = appointment_when(appointment)
    try:
        template = template_for_automation(lead.business, REMINDER_TEMPLATE, channel="sms")
        body = template_render(template, {**playbook_context(lead), "appointment_time": when})
    except TemplateError as exc:
        receipt_write(
            business=lead.business,
            lead=lead,
            subject=appointment.public_id,
            actor=ACTOR,
            action="appointment.reminder_skipped",
            reason=str(exc),
            after={"reminder": label},
        )
        _person_task(
            lead, f"Remind {lead_display_name(lead)} of the visit {when}", str(exc), actor=ACTOR, now=timezone.now()
        )
        return "skipped: no approved reminder template"
    message = message_send(
        lead=lead,
        channel="sms",
        body=body,
        actor=ACTOR,
        automated=True,
        template_key=template.key,
        idempotency_key=f"appointment.reminder:{appointment.public_id}:{label}",
    )
    return message.status


def _reminder_timer(timer: Timer) -> None:
    reminder_send(timer)


# --- reschedule, cancel, held ---------------------------------------------------


def appointment_locked(appointment: Appointment) -> Appointment:
    return (
        Appointment.objects.select_for_update(of=("self",))
        .select_related("lead__business", "lead__contact", "lead__owner__user", "assigned_to__user")
        .get(pk=appointment.pk)
    )


@transaction.atomic
def appointment_reschedule(
    appointment: Appointment,
    *,
    availability: Availability,
    starts_at: datetime,
    actor: str,
    confirm: bool = True,
    now: datetime | None = None,
) -> Booked:
    """Move a scheduled visit to another approved slot: the new appointment
    (`rescheduled_from` the old) claims its place under the same lock as a
    booking; the old one is canceled with its reminders. The lead stays booked."""
    now = now or timezone.now()
    rule = _locked_rule(availability, appointment.lead)
    old = appointment_locked(appointment)
    if old.status not in HOLDING:
        raise AppointmentClosed(f"{old.public_id} is {old.status}: only a scheduled visit can be moved")
    lead = old.lead
    starts, ends = _slot_claim(rule, lead, starts_at, now, exclude=old)
    if rule.pk == old.availability_id and starts == old.starts_at:
        raise NotASlot(f"{old.public_id} is already at that time")
    member = _technician(rule, starts, ends, wanted=None, prefer=old.assigned_to)
    Appointment.objects.filter(pk=old.pk).update(status=Appointment.Status.CANCELED, outcome_at=now)
    reminders_cancel(old, why="rescheduled")
    new = appointment_record(
        lead=lead,
        starts_at=starts,
        ends_at=ends,
        actor=actor,
        availability=rule,
        assigned_to=member,
        notes=old.notes,
        location=old.location,
        status=Appointment.Status.SCHEDULED,
        rescheduled_from=old,
    )
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=old.public_id,
        actor=actor,
        action="appointment.rescheduled",
        before={"status": old.status, "starts_at": old.starts_at},
        after={"status": "canceled", "rescheduled_to": new.public_id, "starts_at": new.starts_at},
    )
    _to_booked(lead, actor=actor, reason=f"rescheduled to {when_label(starts, ends, _zone(lead))}")
    return Booked(new, _after_booking(lead, new, actor=actor, confirm=confirm, now=now))


@transaction.atomic
def appointment_cancel(
    appointment: Appointment, *, actor: str, reason: str, now: datetime | None = None, emit: bool = True
) -> Appointment:
    """Cancel a scheduled visit: its place and reminders are freed; a lead left
    without a visit goes back to `qualified`, and the `cancellation` event
    gives its owner a rebooking next action."""
    now = now or timezone.now()
    appt = appointment_locked(appointment)
    if appt.status not in HOLDING:
        raise AppointmentClosed(f"{appt.public_id} is {appt.status}: only a scheduled visit can be canceled")
    if not reason.strip():
        raise BookingError("say why the visit is canceled")
    Appointment.objects.filter(pk=appt.pk).update(status=Appointment.Status.CANCELED, outcome_at=now)
    reminders_cancel(appt, why=f"canceled: {reason}")
    lead = appt.lead
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=appt.public_id,
        actor=actor,
        action="appointment.canceled",
        reason=reason,
        before={"status": appt.status},
        after={"status": "canceled"},
    )
    # The calendars it went into hear of it by a row of this transaction.
    sync_changes_canceled(appt)
    still_booked = lead.appointments.filter(status__in=HOLDING).exists()
    if lead.stage == Stage.BOOKED and not still_booked:
        lead_sync.lead_transition(lead, Stage.QUALIFIED, actor=actor, reason=f"{appt.public_id} canceled: {reason}")
    if emit:
        lead_event(
            lead,
            "cancellation",
            key=appt.public_id,
            data={"appointment": appt.public_id, "reason": reason},
            actor=actor,
        )
    appt.refresh_from_db()
    return appt


# The outbox event of each outcome.
OUTCOME_EVENTS: dict[str, str] = {
    Appointment.Status.HELD: EventType.APPOINTMENT_HELD,
    Appointment.Status.NO_SHOW: EventType.APPOINTMENT_NO_SHOW,
}


def appointment_outcome_record(appt: Appointment, status: str, *, actor: str, now: datetime, what: str) -> Lead:
    """Record what became of a started visit (held or no-show) on the locked
    appointment: its reminders canceled, a receipt. Returns the visit's lead."""
    if appt.status not in HOLDING:
        raise AppointmentClosed(f"{appt.public_id} is {appt.status}: only a scheduled visit can be {what}")
    if now < appt.starts_at:
        raise BookingError(f"{appt.public_id} has not started yet")
    Appointment.objects.filter(pk=appt.pk).update(status=status, outcome_at=now)
    reminders_cancel(appt, why=status.replace("_", "-"))
    lead = appt.lead
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=appt.public_id,
        actor=actor,
        action=f"appointment.{status}",
        before={"status": appt.status},
        after={"status": status},
    )
    event_emit(
        business=lead.business_id,
        lead=lead,
        type=OUTCOME_EVENTS[status],
        subject=appt.public_id,
        data={"lead": lead.public_id, "appointment": appt.public_id, "starts_at": appt.starts_at, "outcome_at": now},
    )
    return lead


@transaction.atomic
def appointment_mark_held(appointment: Appointment, *, actor: str, now: datetime | None = None) -> Appointment:
    """The visit happened: the lead moves to `appointment_held` and the
    `appointment.held` event asks its owner for the next state."""
    now = now or timezone.now()
    appt = appointment_locked(appointment)
    lead = appointment_outcome_record(appt, Appointment.Status.HELD, actor=actor, now=now, what="marked held")
    if lead.stage == Stage.BOOKED:
        lead_sync.lead_transition(lead, Stage.APPOINTMENT_HELD, actor=actor, reason=f"{appt.public_id} held")
    lead_event(lead, "appointment.held", key=appt.public_id, data={"appointment": appt.public_id}, actor=actor)
    appt.refresh_from_db()
    return appt


@transaction.atomic
def appointment_next_state(
    lead: Lead,
    state: str,
    *,
    actor: str,
    reason: str = "",
    follow_up_at: datetime | None = None,
    follow_up_title: str = "",
    now: datetime | None = None,
) -> Lead:
    """After a held visit, the lead's next state: `won`, `lost` (with the
    reason), `estimate_sent` (only once an estimate was sent: the estimate's
    own step moves the lead), or a dated `follow_up` with an owner."""
    now = now or timezone.now()
    lead = Lead.objects.select_related("business", "contact", "owner__user").get(pk=lead.pk)
    if lead.stage != Stage.APPOINTMENT_HELD:
        raise BookingError(f"{lead.public_id} is {lead.stage}, not appointment_held")
    if state == "won":
        lead_sync.lead_close(lead, Stage.WON, actor=actor, reason=reason or "won after the visit")
    elif state == "lost":
        if not reason.strip():
            raise BookingError("a lost lead needs the reason")
        lead_sync.lead_close(lead, Stage.LOST, actor=actor, reason=reason, lost_reason=reason)
    elif state == "estimate_sent":
        if not lead.estimates.filter(status=Estimate.Status.SENT).exists():
            raise BookingError("no estimate has been sent: record and send the estimate first")
        lead_sync.lead_transition(lead, Stage.ESTIMATE_SENT, actor=actor, reason=reason or "estimate sent")
    elif state == "follow_up":
        if follow_up_at is None or follow_up_at <= now:
            raise BookingError("a follow-up needs a date in the future")
        owner = owner_or_manager(lead)
        if owner is None:
            raise BookingError("the lead has no owner and the business no manager to take the follow-up")
        next_action_set(
            lead,
            follow_up_title.strip() or "Follow up after the visit",
            follow_up_at,
            actor=actor,
            reason=reason or "dated follow-up after the visit",
            owner=owner,
        )
    else:
        raise BookingError(f"unknown next state {state!r} (one of {', '.join(NEXT_STATES)})")
    lead_sync.lead_refresh(lead)
    return lead


# --- the orchestrator's steps ----------------------------------------------------


def appointment_of(lead: Lead, data: dict[str, Any]) -> Appointment:
    appointment = (
        Appointment.objects.select_related("lead__business", "lead__contact", "assigned_to__user")
        .filter(lead=lead, public_id=data.get("appointment", ""))
        .first()
    )
    if appointment is None:
        raise MissingInformation("Check this lead's appointment", f"no appointment {data.get('appointment')!r}")
    return appointment


def booking_step(lead: Lead, data: dict[str, Any]) -> str:
    """After a booking: the technician's brief by email (once), and the
    reminders checked (a redelivery finds the same timer rows)."""
    appointment = appointment_of(lead, data)
    if appointment.status not in HOLDING:
        return f"skipped: {appointment.public_id} is {appointment.status}"
    reminders = reminders_schedule(appointment, now=timezone.now())
    return f"brief {brief_email(appointment)}; {len(reminders)} reminder(s) pending"


def cancellation_step(lead: Lead, data: dict[str, Any]) -> str:
    """After a cancellation: the owner's rebooking next action, and a notice to the technician."""
    appointment = appointment_of(lead, data)
    lead_sync.lead_refresh(lead)
    tech = appointment.assigned_to
    if tech is not None:
        member_notify(
            tech,
            "Visit canceled",
            f"{appointment.public_id} ({appointment_when(appointment)}) is canceled.",
            slack=False,
        )
    if not lead.is_open or lead.appointments.filter(status__in=HOLDING).exists():
        return "no rebooking needed"
    owner = owner_or_manager(lead)
    if owner is None:
        raise MissingInformation("Rebook the canceled visit", "the lead has no owner and the business no manager")
    task = next_action_set(
        lead,
        f"Rebook {lead_display_name(lead)}: the visit {appointment_when(appointment)} was canceled",
        timezone.now() + REBOOK_DUE,
        actor=ACTOR,
        reason=f"{appointment.public_id} canceled: {data.get('reason', '')}",
        owner=owner,
    )
    return f"rebooking task {task.public_id} for {owner}"


def held_step(lead: Lead, data: dict[str, Any]) -> str:
    """After a held visit: one next action for the owner, with a due time, to
    set the next state (estimate sent, won, lost with the reason, or a dated follow-up)."""
    appointment = appointment_of(lead, data)
    lead_sync.lead_refresh(lead)
    if lead.stage != Stage.APPOINTMENT_HELD:
        return f"skipped: the lead is already {lead.stage}"
    if not (lead.owner_id and lead.owner and lead.owner.is_active):
        raise MissingInformation(
            "Give this lead an owner to decide what follows the visit",
            f"{appointment.public_id} was held but the lead has no active owner",
        )
    due = max(appointment.ends_at, timezone.now()) + HELD_DECISION_DUE
    task = next_action_set(
        lead,
        "After the visit: send the estimate, mark won, close as lost with the reason, or set a dated follow-up",
        due,
        actor=ACTOR,
        reason=f"{appointment.public_id} held",
        owner=lead.owner,
    )
    return f"next-state task {task.public_id} for {lead.owner}"


def register() -> None:
    """The reminder timer's handler (called at startup by AgentsConfig; the
    no-show deadline's is agents.booking.no_show's own)."""
    timer_handler_register(REMINDER_TIMER, _reminder_timer)


@transaction.atomic
def appointment_record_external(
    lead: Lead,
    *,
    starts_at: datetime,
    ends_at: datetime,
    provider: str,
    external_id: str,
    actor: str,
    assigned_to: TeamMember | None = None,
    location: str = "",
    notes: str = "",
    rescheduled_from: Appointment | None = None,
    now: datetime | None = None,
) -> Appointment:
    """A booking made in an outside calendar (Calendly): the calendar decided
    the slot, so there is no capacity check here; the lead is booked and the
    same reminders, brief and nurture stop follow. No confirmation: the
    calendar sent its own. Idempotent on (business, provider, external_id)."""
    now = now or timezone.now()
    existing = Appointment.objects.filter(
        business_id=lead.business_id, provider=provider, external_id=external_id
    ).first()
    if existing is not None:
        return existing
    if ends_at <= starts_at:
        raise BookingError(f"the booking ends ({ends_at:%Y-%m-%d %H:%M}) before it starts")
    if rescheduled_from is not None:
        # The new booking may arrive before the old one's cancellation: free the old place now.
        appointment_release_rescheduled(rescheduled_from, actor=actor, now=now)
    _to_booked(lead, actor=actor, reason=f"booked in {provider} for {when_label(starts_at, ends_at, _zone(lead))}")
    appointment = appointment_record(
        lead=lead,
        starts_at=starts_at,
        ends_at=ends_at,
        actor=actor,
        provider=provider,
        external_id=external_id,
        assigned_to=assigned_to,
        location=location[:300],
        notes=notes,
        status=Appointment.Status.SCHEDULED,
        rescheduled_from=rescheduled_from,
    )
    _after_booking(lead, appointment, actor=actor, confirm=False, now=now)
    return appointment


@transaction.atomic
def appointment_release_rescheduled(appointment: Appointment, *, actor: str, now: datetime | None = None) -> bool:
    """The outside calendar moved this booking (its new one comes, or came, as
    a booking of its own): free the place and the reminders without
    touching the lead, which stays booked."""
    appt = appointment_locked(appointment)
    if appt.status not in HOLDING:
        return False
    Appointment.objects.filter(pk=appt.pk).update(status=Appointment.Status.CANCELED, outcome_at=now or timezone.now())
    reminders_cancel(appt, why="rescheduled")
    receipt_write(
        business=appt.lead.business,
        lead=appt.lead,
        subject=appt.public_id,
        actor=actor,
        action="appointment.rescheduled",
        before={"status": appt.status},
        after={"status": "canceled"},
        reason="moved in the outside calendar",
    )
    return True
