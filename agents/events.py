"""What happens to a lead, as the roles that notice it say so: the names of
lead events, `lead_event` to record one, and what a step raises or opens
when it cannot go on.

This module is what every step module and every noticing role imports; it
imports only `crm` and the queue, never a step. The table of event -> step
is the orchestrator's (agents/orchestrator.py), which imports the steps and
runs them; nothing imports the orchestrator back except the task entry
points (inbound processing reaches it through the unit runner it registers).

An event is stored as a Timer row due now, keyed by (event, key), so the same
event noticed twice is one row; a django-q2 task runs its step after commit,
and `run_timers` runs any the queue lost. Inside a unit of work that collects
new leads (`inline_steps_collected`, entered by the orchestrator's
`inbound_unit_run` around an inbound event's handler) a new lead's event is
handed to that unit instead, with no timer, and the orchestrator runs its
step explicitly when the handler returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from agents.queue import task_enqueue
from crm.context import unit, unit_entered
from crm.models import Lead, Task, Timer
from crm.selectors import business_manager
from crm.services.records import task_ensure
from crm.services.timers import timer_schedule

ACTOR = "agent:orchestrator"
TIMER_KIND = "orchestrate"

# Every lead event, once: the orchestrator's table must have a step for each
# (checked when it is imported), and `lead_event` refuses any other name.
EVENTS = frozenset(
    {
        "lead.new",
        "touch.added",
        "qualification.answered",
        "missed_call",
        "sla.due",
        "reply",
        "booking",
        "cancellation",
        "no_show",
        "appointment.held",
        "estimate.sent",
        "estimate.accepted",
        "estimate.declined",
        "job.completed",
        "payment",
        "refund",
        "opt_out",
        "complaint",
        "hold.set",
        "hold.released",
    }
)

# The steps a unit of work runs itself, at its end, in its own transaction:
# a new lead's first step, which follows its capture at once and needs
# nothing from outside the database.
INLINE_EVENTS = frozenset({"lead.new"})

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
    owner = lead.owner if lead.owner_id and lead.owner and lead.owner.is_active else None
    return task_ensure(
        lead=lead,
        title=title,
        due_at=timezone.now(),
        actor=actor,
        kind="exception",
        owner=owner or business_manager(lead.business_id),
        reason=reason,
    )


@dataclass
class InlineStep:
    """A new lead's event handed to the unit of work that opened the lead."""

    lead: Lead
    event: str
    key: str
    data: dict[str, Any]
    actor: str


@contextmanager
def inline_steps_collected() -> Iterator[list[InlineStep] | None]:
    """Collect the block's INLINE_EVENTS instead of scheduling them; yields
    the list, or None inside an outer collection (which gets them)."""
    with unit_entered() as work:
        if work.new_leads is not None:
            yield None
            return
        pending: list[InlineStep] = []
        work.new_leads = pending
        try:
            yield pending
        finally:
            work.new_leads = None


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
    an inline collection (then there is no timer: None)."""
    if event not in EVENTS:
        raise ValueError(f"unknown lead event {event!r}")
    work = unit()
    inline = work.new_leads if work is not None else None
    if inline is not None and event in INLINE_EVENTS and due_at is None:
        inline.append(InlineStep(lead, event, key, dict(data or {}), actor))
        return None
    timer = timer_schedule(
        business=lead.business,
        lead=lead,
        kind=TIMER_KIND,
        due_at=due_at or timezone.now(),
        payload={"event": event, "data": data or {}, "actor": actor},
        dedupe_key=f"evt:{event}:{key}"[:200],
    )
    if timer.status == Timer.Status.PENDING and due_at is None:
        # A lost enqueue leaves the timer pending and due: run_timers takes it.
        # The timer row records the outcome: no result row per step (failures are kept).
        task_enqueue("agents.tasks.orchestrate", timer.pk, group="orchestrator", save=False)
    return timer
