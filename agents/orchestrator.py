"""The Lead Orchestrator: one table of event -> next step, and the runner.

Every role that notices something about a lead (capture, a reply, a booking,
a payment…) records it with `agents.events.lead_event`; this module runs the
step the table names for it, once: a timer's conditional claim makes each
step run once however its task is redelivered, and a new lead's first step
runs inline at the end of its capture's own unit of work
(`inbound_unit_run`, which capture's processing runs each handler in).

A step decides and delegates: stage and owner change only through CRM Sync
(`crm.services.lead_sync`), messages only through the send gate. When the
record lacks what a step needs, the step raises `MissingInformation` and a
person gets an exception task instead of a guess.

Imports point one way: this module imports the step modules; they import
`agents.events`, never this module.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.booking import no_show
from agents.booking import services as booking
from agents.events import (
    ACTOR,
    EVENTS,
    TIMER_KIND,
    InlineStep,
    MissingInformation,
    exception_task,
    inline_steps_collected,
    lead_event,
)
from agents.followup import estimates, replies
from agents.followup.sequences import engine as sequence_engine
from agents.revenue import payments as revenue_payments
from agents.reviews import requests as review_requests
from agents.routing import steps as routing
from crm.models import Lead, Timer
from crm.services.inbound_handlers import unit_runner_register
from crm.services.lead_sync import lead_current, lead_for_update, lead_refresh
from crm.services.next_action import next_action_ensure
from crm.services.receipts import receipt_write
from crm.services.timers import timer_handler_register, timer_run, timers_run_due
from crm.services.units import unit_of_work

log = logging.getLogger(__name__)

Step = Callable[[Lead, dict[str, Any]], str]

STEPS: dict[str, Step] = {
    "lead.new": routing.new_lead_step,
    "touch.added": routing.touch_added_step,
    "qualification.answered": routing.qualification_answered_step,
    "missed_call": routing.missed_call_step,
    "sla.due": routing.sla_due_step,
    "reply": replies.reply_step,
    "booking": booking.booking_step,
    "cancellation": booking.cancellation_step,
    "no_show": no_show.no_show_step,
    "appointment.held": booking.held_step,
    "estimate.sent": estimates.estimate_sent_step,
    "estimate.accepted": estimates.estimate_accepted_step,
    "estimate.declined": estimates.estimate_declined_step,
    "job.completed": review_requests.job_completed_step,
    "payment": review_requests.payment_step,
    "refund": revenue_payments.refund_step,
    "opt_out": replies.opt_out_step,
    "complaint": replies.complaint_step,
    "hold.set": sequence_engine.hold_set_step,
    "hold.released": sequence_engine.hold_released_step,
}
if set(STEPS) != EVENTS:
    # A named event without a step would fail at run time, long after it was recorded.
    raise RuntimeError(
        f"lead events without a step: {sorted(EVENTS - set(STEPS))}; "
        f"steps without an event: {sorted(set(STEPS) - EVENTS)}"
    )


def inbound_unit_run(work: Callable[[], str]) -> str:
    """How an inbound event's handler runs (registered with capture's
    processing): one unit of work and, at its end, still in its transaction,
    the first step of every lead the handler opened.

    A new lead's step (fit, owner, acknowledgement, next action, SLA clock)
    would otherwise be a timer row, a task, a claim and a second transaction
    right behind the capture that opened the lead: here it runs on the lead
    the capture holds (inserted in this transaction, so no one else can see
    or lock it, and the step runs exactly once). The step runs in a
    savepoint: a step that fails is rolled back alone and scheduled as an
    ordinary timer (retried, and visible with its error), while the capture
    commits.
    """
    with unit_of_work():
        with inline_steps_collected() as opened:
            outcome = work()
        new_lead_steps_run(opened or [])
    return outcome


def new_lead_steps_run(opened: list[InlineStep]) -> None:
    """Run each new lead's first step now, on the lead its capture holds."""
    for item in opened:
        try:
            # The lead was inserted in this transaction: it is the unit's own.
            with transaction.atomic(), lead_current(item.lead):
                _step_run(item.lead, item.event, item.data, run={"run": "inline"})
        except Exception:
            log.exception("lead %s: inline step %s failed; scheduled as a timer", item.lead.public_id, item.event)
            item.lead.refresh_from_db()
            lead_event(item.lead, item.event, key=item.key, data=item.data, actor=item.actor)


def orchestrate(timer_id: int) -> str:
    """The django-q2 task body: run one event's step unless already claimed."""
    return timer_run(timer_id)


def orchestrate_pending(*, now: datetime | None = None) -> int:
    """Run every pending event step now, in order (tests, and `run_timers`)."""
    total = 0
    while True:
        run = timers_run_due(now=now, kinds=[TIMER_KIND])
        total += run.claimed
        if not run.claimed:
            return total


@transaction.atomic
def _run_step(timer: Timer) -> None:
    event = str(timer.payload["event"])
    if timer.lead_id is None:
        raise LookupError(f"{timer.public_id}: an orchestrator event without a lead")
    # The step runs under its lead's row lock, taken before anything else
    # (and in the same statement that reads it): the step may then lock the
    # person's contact, after the lead, as crm.locks orders them. A step
    # that locked the contact first (ending the person's paths) and the lead
    # second deadlocked with a booking holding the lead and waiting for the contact.
    lead = lead_for_update(timer.lead_id)
    _step_run(lead, event, dict(timer.payload.get("data") or {}), run={"timer": timer.public_id})


def _step_run(lead: Lead, event: str, data: dict[str, Any], *, run: dict[str, Any]) -> None:
    """Run `event`'s step on `lead` and write its receipt; `run` says how
    it was run (its timer, or inline), for the receipt."""
    try:
        outcome = STEPS[event](lead, data)
    except MissingInformation as stop:
        task = exception_task(lead, stop.title, stop.reason)
        # Invariant 3 holds on the stop path too: the person's decision is the next action.
        lead_refresh(lead)
        next_action_ensure(lead, stop.title, timezone.now(), actor=ACTOR, reason=stop.reason, owner=task.owner)
        outcome = f"stopped: {stop.reason}"
        receipt_write(
            business=lead.business,
            lead=lead,
            subject=lead.public_id,
            actor=ACTOR,
            action="orchestrator.stopped",
            reason=stop.reason,
            after={"event": event, "task": task.public_id, **run},
        )
        return
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=lead.public_id,
        actor=ACTOR,
        action="orchestrator.step",
        reason=event,
        after={"event": event, "outcome": outcome, **run},
    )


def register() -> None:
    # A step's outside effects (sends, mail, Slack) all wait for commit, so the
    # step and its timer's done mark can be one transaction.
    timer_handler_register(TIMER_KIND, _run_step, atomic=True)
    unit_runner_register(inbound_unit_run)  # an inbound event's handler, then its new leads' first step
