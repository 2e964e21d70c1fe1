"""A sequence's steps: reading them, when each is due, the text a message step
sends, and performing one.

- A step has a delay (`after: 15m`, `2h`, `1d`; measured from the step before,
  the first from the start), a clock (`Sequence.StepClock`: `business` counts
  only the business's open hours and days), a channel (`Sequence.StepChannel`)
  and an approved template or a task title. `sequence_steps` refuses a step it
  cannot read (`SequenceError`).
- Performing a step (`step_perform`): a task for a person; a channel with a
  runner in `CHANNEL_RUNNERS` (voice) is that runner's; any other channel is a
  message through the gate (`message_step`). A message step without an
  approved text the record can fill goes to a person as a task
  (`step_to_person`), never a guess.
- A step's one key (`step_key`) is both its timer's dedupe key and its
  message's idempotency key, so a step sends at most once.

Nothing here starts, advances or ends an enrollment: that is the engine's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db.models import Q
from django.urls import reverse

from agents.outbound.gate import message_send
from agents.outbound.local_hours import business_minutes_after
from agents.playbook.templates import (
    STEP_PLACEHOLDERS,
    TemplateError,
    placeholders_of,
    playbook_context,
    template_for_automation,
    template_render,
    text_render,
)
from crm.models import DAYS, Appointment, Enrollment, Lead, Message, Provider, Sequence, Source, Task
from crm.registry import Registry
from crm.selectors import business_manager
from crm.services.records import task_create, task_ensure

ACTOR = "agent:sequence_engine"

# Statuses of a message the provider accepted (or, in dry
# run, would have been asked to). Queued, sending and unknown are not yet
# known to have gone anywhere, and a sweep may still fail them.
PROVIDER_ACCEPTED = (Message.Status.DRY_RUN, Message.Status.SENT, Message.Status.DELIVERED)

# How a channel's step is performed when the engine does not do it itself
# (voice), registered at startup by the module that owns the channel.
StepRunner = Callable[[Enrollment, Lead, "Step", datetime], str]
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
    clock: str = Sequence.StepClock.ABSOLUTE


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
                clock=str(raw.get("clock", Sequence.StepClock.ABSOLUTE)),
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
    minutes = amount * Sequence.STEP_DELAY_MINUTES[unit]
    hours = sequence.business.business_hours or {}
    if step.clock != Sequence.StepClock.BUSINESS or not hours:
        return previous + timedelta(minutes=minutes)
    zone = ZoneInfo(sequence.business.timezone)
    if unit != "d":
        return business_minutes_after(previous, minutes, hours, zone)
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


def step_key(enrollment: Enrollment, index: int) -> str:
    """The step's timer dedupe key and its message's idempotency key."""
    return f"seq:{enrollment.public_id}:{index}"


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


# --- performing a step -------------------------------------------------------------------------


def step_owner(lead: Lead) -> Any:
    """Who a step's task goes to: the lead's active owner, else the manager."""
    return lead.owner if lead.owner is not None and lead.owner.is_active else business_manager(lead.business_id)


def step_perform(enrollment: Enrollment, lead: Lead, step: Step, now: datetime) -> str:
    """Do what the step says, in the caller's transaction (the engine's
    `step_run`, under its locks); returns what happened."""
    if step.channel == Sequence.StepChannel.TASK:
        task = task_create(
            lead=lead,
            title=step.title or f"Follow up ({enrollment.sequence.key})",
            due_at=now,
            actor=TRIGGER_ROLES.get(enrollment.sequence.trigger, ACTOR),
            kind="follow_up",
            owner=step_owner(lead),
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
        idempotency_key=step_key(enrollment, step.index),
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
        owner=step_owner(lead),
        reason=f"no approved text to send automatically: {problem}",
    )


def sent_on_path(lead: Lead, channel: str) -> Q:
    """Automated messages of this channel the provider accepted (or, in dry run, would have been handed)."""
    return Q(lead=lead, direction="out", channel=channel, automated=True, status__in=PROVIDER_ACCEPTED)
