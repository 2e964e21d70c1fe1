"""The Lead Orchestrator: one table of event -> next step.

Every role that notices something about a lead (capture, a reply, a booking,
a payment…) calls `lead_event`. The event is stored as a Timer row due now,
keyed by (event, key), so the same event noticed twice is one row; a django-q2
task runs its step after commit, and `run_timers` runs any the queue lost. The
timer's conditional claim makes each step run once however the task is
redelivered.

A step decides and delegates: stage and owner change only through CRM Sync
(`crm.services.lead_sync`), messages only through the send gate. When the
record lacks what a step needs, the step stops and hands a person an exception
task instead of guessing (`exception_task`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.queue import task_enqueue
from crm.models import Lead, Task, Timer
from crm.selectors import business_manager
from crm.services.lead_sync import lead_current, lead_refresh
from crm.services.receipts import receipt_write
from crm.services.records import task_create
from crm.services.timers import timer_handler_register, timer_run, timer_schedule, timers_run_due

log = logging.getLogger(__name__)

ACTOR = "agent:orchestrator"
TIMER_KIND = "orchestrate"

Step = Callable[[Lead, dict[str, Any]], str]


# The exception task for a lead nobody can be reached at: capture opens it,
# and the new-lead step stops on it (one task, found again by its title).
UNREACHABLE_TITLE = "Find a way to reach this lead (no valid phone, email or handle)"


class MissingInformation(Exception):
    """Raised by a step that cannot go on without something a person must supply."""

    def __init__(self, title: str, reason: str) -> None:
        super().__init__(reason)
        self.title, self.reason = title, reason


def exception_task(lead: Lead, title: str, reason: str, *, actor: str = ACTOR) -> Task:
    """One open exception task per lead and title, owned by the lead's owner or the manager."""
    existing = lead.tasks.filter(kind="exception", status=Task.Status.OPEN, title=title).first()
    if existing is not None:
        return existing
    owner = lead.owner if lead.owner_id and lead.owner and lead.owner.is_active else None
    return task_create(
        lead=lead, title=title, due_at=timezone.now(), actor=actor, kind="exception",
        owner=owner or business_manager(lead.business_id), reason=reason,
    )  # fmt: skip


def next_action_ensure(lead: Lead, title: str, due_at: datetime, **kwargs: Any) -> Task | None:
    from agents.routing.next_action import next_action_ensure as ensure

    lead_refresh(lead)
    return ensure(lead, title, due_at, **kwargs)


def _steps() -> dict[str, Step]:
    # Imported here: the step modules import this one for `exception_task`.
    from agents.booking import no_show
    from agents.booking import services as booking
    from agents.followup import estimates, replies, sequences
    from agents.revenue import jobs as revenue_jobs
    from agents.revenue import payments as revenue_payments
    from agents.routing import steps as routing

    return {
        "lead.new": routing.new_lead,
        "touch.added": routing.touch_added,
        "qualification.answered": routing.qualification_answered,
        "missed_call": routing.missed_call,
        "sla.due": routing.sla_due,
        "reply": replies.reply_step,
        "booking": booking.booking_step,
        "cancellation": booking.cancellation_step,
        "no_show": no_show.no_show_step,
        "appointment.held": booking.held_step,
        "estimate.sent": estimates.estimate_sent_step,
        "estimate.accepted": estimates.estimate_accepted_step,
        "estimate.declined": estimates.estimate_declined_step,
        "job.completed": revenue_jobs.job_completed_step,
        "payment": revenue_payments.payment_step,
        "refund": revenue_payments.refund_step,
        "opt_out": replies.opt_out_step,
        "complaint": replies.complaint_step,
        "hold.set": sequences.hold_set_step,
        "hold.released": sequences.hold_released_step,
    }


EVENTS = (
    "lead.new", "touch.added", "qualification.answered", "missed_call", "sla.due", "reply", "booking",
    "cancellation", "no_show", "appointment.held", "estimate.sent", "estimate.accepted", "estimate.declined",
    "job.completed", "payment", "refund", "opt_out", "complaint", "hold.set", "hold.released",
)  # fmt: skip
STEPS: dict[str, Step] = {}


def steps() -> dict[str, Step]:
    if not STEPS:
        STEPS.update(_steps())
    return STEPS


# The steps a unit of work runs itself, at its end, in its own transaction
# (see `lead_steps_inline`): a new lead's first step, which follows its
# capture at once and needs nothing from outside the database.
INLINE_EVENTS = frozenset({"lead.new"})


@dataclass
class _Inline:
    lead: Lead
    event: str
    key: str
    data: dict[str, Any]
    actor: str


_INLINE: ContextVar[list[_Inline] | None] = ContextVar("lead_steps_inline", default=None)


@contextmanager
def lead_steps_inline() -> Iterator[None]:
    """Run the block's new-lead steps at its end, in its transaction.

    A new lead's step (fit, owner, acknowledgement, next action, SLA clock)
    would otherwise be a timer row, a task, a claim and a second transaction
    right behind the capture that opened the lead: here it runs on the lead
    the capture holds (inserted in this transaction, so no one else can see
    or lock it, and the step runs exactly once). Enter it inside the unit's
    `atomic()`. The step runs in a savepoint: a step that fails is rolled
    back alone and scheduled as an ordinary timer (retried, and visible with
    its error), while the capture commits.
    """
    if _INLINE.get() is not None:
        yield
        return
    pending: list[_Inline] = []
    token = _INLINE.set(pending)
    try:
        yield
    finally:
        _INLINE.reset(token)
    for item in pending:
        try:
            # The lead was inserted in this transaction: it is the unit's own.
            with transaction.atomic(), lead_current(item.lead):
                _step_run(item.lead, item.event, item.data, run={"run": "inline"})
        except Exception:
            log.exception("lead %s: inline step %s failed; scheduled as a timer", item.lead.public_id, item.event)
            item.lead.refresh_from_db()
            lead_event(item.lead, item.event, key=item.key, data=item.data, actor=item.actor)


def lead_event(
    lead: Lead,
    event: str,
    *,
    key: str,
    data: dict[str, Any] | None = None,
    actor: str = ACTOR,
    due_at: datetime | None = None,
) -> Timer | None:
    """Record that `event` happened to `lead` (once per key) and run its step
    after commit, or at the end of the unit of work for INLINE_EVENTS inside
    `lead_steps_inline` (then there is no timer: None)."""
    if event not in steps():
        raise ValueError(f"unknown lead event {event!r}")
    inline = _INLINE.get()
    if inline is not None and event in INLINE_EVENTS and due_at is None:
        inline.append(_Inline(lead, event, key, dict(data or {}), actor))
        return None
    timer = timer_schedule(
        business=lead.business, lead=lead, kind=TIMER_KIND, due_at=due_at or timezone.now(),
        payload={"event": event, "data": data or {}, "actor": actor}, dedupe_key=f"evt:{event}:{key}"[:200],
    )  # fmt: skip
    if timer.status == Timer.Status.PENDING and due_at is None:
        # A lost enqueue leaves the timer pending and due: run_timers takes it.
        # The timer row records the outcome: no result row per step (failures are kept).
        task_enqueue("agents.tasks.orchestrate", timer.pk, group="orchestrator", save=False)
    return timer


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
    lead = Lead.objects.select_related("business", "contact", "owner__user").get(pk=timer.lead_id)
    _step_run(lead, event, dict(timer.payload.get("data") or {}), run={"timer": timer.public_id})


def _step_run(lead: Lead, event: str, data: dict[str, Any], *, run: dict[str, Any]) -> None:
    """Run `event`'s step on `lead` and write its receipt; `run` says how
    it was run (its timer, or inline), for the receipt."""
    step = steps()[event]
    try:
        outcome = step(lead, data)
    except MissingInformation as stop:
        task = exception_task(lead, stop.title, stop.reason)
        # Invariant 3 holds on the stop path too: the person's decision is the next action.
        next_action_ensure(lead, stop.title, timezone.now(), actor=ACTOR, reason=stop.reason, owner=task.owner)
        outcome = f"stopped: {stop.reason}"
        receipt_write(
            business=lead.business, lead=lead, subject=lead.public_id, actor=ACTOR, action="orchestrator.stopped",
            reason=stop.reason, after={"event": event, "task": task.public_id, **run},
        )  # fmt: skip
        return
    receipt_write(
        business=lead.business, lead=lead, subject=lead.public_id, actor=ACTOR, action="orchestrator.step",
        reason=event, after={"event": event, "outcome": outcome, **run},
    )  # fmt: skip


def register() -> None:
    # A step's outside effects (sends, mail, Slack) all wait for commit, so the
    # step and its timer's done mark can be one transaction.
    timer_handler_register(TIMER_KIND, _run_step, atomic=True)
