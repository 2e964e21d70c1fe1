"""No-Show Recovery: a missed visit is never the end of the story, and never
an endless wait either.

`no_show_record` marks the appointment and moves the lead to `no_show` (in
the caller's transaction) and raises the `no_show` event. Its step
(`no_show_step`) then, once: tells the owner; offers the customer a rebooking
— the business's `no_show` sequence when it has one (one automated path per
person), else the approved `no_show_sms` through the send gate; makes
"call to rebook" the owner's next action; and sets a deadline. A rebooking
(`appointment_book` / a Calendly booking) moves the lead back to `booked`
and cancels the deadline. At the deadline a lead still in `no_show` ends in
a defined state: `unresponsive` when the person never answered, `lost` with
the reason when they answered but did not rebook.

No-shows are counted apart from held and canceled visits (`no_show_stats`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from agents.booking.services import (
    HOLDING,
    NO_SHOW_DEADLINE_TIMER,
    appointment_locked,
    appointment_of,
    appointment_outcome_record,
    appointment_when,
    lead_display_name,
    owner_or_manager,
)
from agents.events import MissingInformation, lead_event
from agents.followup.sequences.engine import enrollment_start, sequence_for
from agents.followup.sequences.preview import sequence_preview
from agents.notify import member_notify
from agents.outbound.gate import message_send
from agents.playbook.templates import TemplateError, playbook_context, template_for_automation, template_render
from crm.models import Appointment, Business, Lead, Sequence, Stage, Timer
from crm.services import lead_sync
from crm.services.next_action import next_action_set
from crm.services.receipts import receipt_write
from crm.services.timers import timer_handler_register, timer_schedule

ACTOR = "agent:no_show_recovery"
REBOOK_TEMPLATE = "no_show_sms"
# How long a no-show waits for a rebooking or a reply before it ends.
REBOOK_WAIT = timedelta(days=7)
OUTREACH_DUE = timedelta(hours=1)


@transaction.atomic
def no_show_record(appointment: Appointment, *, actor: str, now: datetime | None = None) -> Appointment:
    """Mark the visit a no-show (its reminders canceled) and move a lead left
    without a visit to `no_show`; the recovery runs as the `no_show` event's
    step. Marking an appointment that is already a no-show changes nothing."""
    now = now or timezone.now()
    appt = appointment_locked(appointment)
    if appt.status == Appointment.Status.NO_SHOW:
        return appt
    lead = appointment_outcome_record(appt, Appointment.Status.NO_SHOW, actor=actor, now=now, what="a no-show")
    if lead.stage == Stage.BOOKED and not lead.appointments.filter(status__in=HOLDING).exists():
        lead_sync.lead_transition(lead, Stage.NO_SHOW, actor=actor, reason=f"{appt.public_id}: no-show")
    lead_event(lead, "no_show", key=appt.public_id, data={"appointment": appt.public_id}, actor=actor)
    appt.refresh_from_db()
    return appt


def no_show_step(lead: Lead, data: dict[str, Any]) -> str:
    """The recovery, once per no-show (the orchestrator's claim), in one transaction."""
    appointment = appointment_of(lead, data)
    lead_sync.lead_refresh(lead)
    if lead.stage != Stage.NO_SHOW:
        return f"skipped: the lead is {lead.stage}"
    owner = owner_or_manager(lead)
    if owner is None:
        raise MissingInformation("Recover the no-show", "the lead has no owner and the business no manager")
    now = timezone.now()
    when, name = appointment_when(appointment), lead_display_name(lead)
    outcomes = [_rebooking_offer(lead, appointment, now=now)]
    task = next_action_set(
        lead,
        f"Call {name} to rebook the missed visit ({when})",
        now + OUTREACH_DUE,
        actor=ACTOR,
        reason=f"{appointment.public_id}: no-show",
        owner=owner,
    )
    outcomes.append(f"outreach task {task.public_id}")
    member_notify(
        owner,
        "No-show",
        f"{name} ({lead.public_id}) missed the visit {when} ({appointment.public_id}). "
        f"Rebooking: {outcomes[0]}. Your task: {task.title}.",
    )
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=appointment.public_id,
        actor=ACTOR,
        action="no_show.owner_notified",
        after={"owner": owner.user.get_username(), "rebooking": outcomes[0]},
    )
    deadline = timer_schedule(
        business=lead.business,
        lead=lead,
        kind=NO_SHOW_DEADLINE_TIMER,
        due_at=now + REBOOK_WAIT,
        payload={"appointment": appointment.pk},
        dedupe_key=f"{NO_SHOW_DEADLINE_TIMER}:{appointment.public_id}",
    )
    outcomes.append(f"ends {deadline.due_at:%Y-%m-%d} unless rebooked")
    return "; ".join(outcomes)


def no_show_outreach_preview(lead: Lead, *, now: datetime | None = None) -> str:
    """What marking a visit a no-show would send the person, in words, read
    from the same sources `_rebooking_offer` sends from (the business's
    no_show path's first step, else the approved rebooking text). Reads only."""
    sequence = sequence_for(lead.business_id, "no_show")
    if sequence is not None:
        steps = [p for p in sequence_preview(lead, sequence, now) if p.channel in ("sms", "email", "instagram")]
        if not steps:
            return "the no-show path starts; it sends no text (its steps are tasks and calls)"
        first = steps[0]
        return f"the no-show path starts; its first {first.channel} says: “{first.body}”"
    try:
        template = template_for_automation(lead.business, REBOOK_TEMPLATE, channel="sms")
    except TemplateError:
        return "no text goes out (no approved rebooking text): a task asks the owner to reach them"
    return f"one text goes out: “{template_render(template, playbook_context(lead))}”"


def _rebooking_offer(lead: Lead, appointment: Appointment, *, now: datetime) -> str:
    """The business's no_show sequence when it has one (its steps carry the
    offer); else the approved rebooking text once, through the gate."""
    if Sequence.objects.filter(business_id=lead.business_id, trigger="no_show", is_active=True).exists():
        enrollment = enrollment_start(lead, "no_show", actor=ACTOR)
        return f"no_show sequence ({enrollment.status})" if enrollment is not None else "no_show sequence not started"
    try:
        template = template_for_automation(lead.business, REBOOK_TEMPLATE, channel="sms")
        body = template_render(template, playbook_context(lead))
    except TemplateError as exc:
        return f"no automated offer ({exc}): the outreach task carries it"
    message = message_send(
        lead=lead,
        channel="sms",
        body=body,
        actor=ACTOR,
        automated=True,
        template_key=template.key,
        idempotency_key=f"no_show.rebook:{appointment.public_id}",
        now=now,
    )
    return f"rebooking text {message.public_id} {message.status}" + (
        f" ({message.block_reason})" if message.block_reason else ""
    )


@transaction.atomic
def no_show_deadline(appointment: Appointment, *, now: datetime | None = None) -> str:
    """The end of the wait: a lead still in `no_show` closes as `unresponsive`
    (no answer since the no-show) or `lost` with the reason (answered, did not
    rebook). A rebooked, closed or held lead is left alone."""
    lead = (
        Lead.objects.select_for_update(of=("self",), no_key=True).select_related("business").get(pk=appointment.lead_id)
    )
    if lead.stage != Stage.NO_SHOW:
        return f"skipped: the lead is {lead.stage}"
    if lead.hold:
        receipt_write(
            business=lead.business,
            lead=lead,
            subject=appointment.public_id,
            actor=ACTOR,
            action="no_show.deadline_skipped",
            reason="the lead is on hold: a person decides",
        )
        return "skipped: on hold"
    since = appointment.outcome_at or appointment.starts_at
    answered = lead.messages.filter(direction="in", created_at__gte=since).exists()
    days = REBOOK_WAIT.days
    if answered:
        reason = f"no-show {appointment.public_id}: answered but did not rebook within {days} days"
        lead_sync.lead_close(lead, Stage.LOST, actor=ACTOR, reason=reason, lost_reason=reason)
        return "lost"
    lead_sync.lead_close(
        lead,
        Stage.UNRESPONSIVE,
        actor=ACTOR,
        reason=f"no-show {appointment.public_id}: no answer and no rebooking within {days} days",
    )
    return "unresponsive"


def deadline_timer(timer: Timer) -> None:
    appointment = Appointment.objects.get(pk=timer.payload["appointment"])
    no_show_deadline(appointment)


@dataclass(frozen=True)
class NoShowStats:
    no_shows: int
    rebooked: int
    held_after_rebooking: int
    waiting: int
    lost: int
    unresponsive: int


def no_show_stats(business: Business, *, since: datetime | None = None, until: datetime | None = None) -> NoShowStats:
    """No-shows counted on their own (never as held or canceled visits), with
    what became of them: rebooked, held after a rebooking, still waiting, or
    ended lost or unresponsive. One query."""
    missed = Appointment.objects.filter(business=business, status=Appointment.Status.NO_SHOW)
    if since is not None:
        missed = missed.filter(outcome_at__gte=since)
    if until is not None:
        missed = missed.filter(outcome_at__lt=until)
    # A rebooking: another visit of the lead, booked after the missed one and set later than it.
    later = Appointment.objects.filter(
        lead=OuterRef("lead"), created_at__gte=OuterRef("created_at"), starts_at__gt=OuterRef("starts_at")
    ).exclude(pk=OuterRef("pk"))
    counts = missed.annotate(
        has_rebooking=Exists(later), has_held_rebooking=Exists(later.filter(status=Appointment.Status.HELD))
    ).aggregate(
        no_shows=Count("pk"),
        rebooked=Count("pk", filter=Q(has_rebooking=True)),
        held_after_rebooking=Count("pk", filter=Q(has_held_rebooking=True)),
        waiting=Count("pk", filter=Q(lead__stage=Stage.NO_SHOW)),
        lost=Count("pk", filter=Q(lead__stage=Stage.LOST)),
        unresponsive=Count("pk", filter=Q(lead__stage=Stage.UNRESPONSIVE)),
    )
    return NoShowStats(**counts)


def register() -> None:
    """The no-show deadline's timer handler (called at startup by AgentsConfig)."""
    timer_handler_register(NO_SHOW_DEADLINE_TIMER, deadline_timer)
