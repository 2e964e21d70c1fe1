"""Per-lead clocks as rows: schedule, claim, run.

`timers_run_due` is what the `run_timers` command and the cluster's periodic
schedule call. Handlers are registered by kind at startup by the app that owns
the work (agents registers SLA checks, sequence steps, reminders), so crm
needs no import of agents.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from crm.models import Business, Lead, Timer
from crm.registry import Registry
from crm.services.insert_once import row_insert_once
from crm.services.receipts import receipt_write
from crm.services.units import unit_of_work
from crm.work_queue import pump

log = logging.getLogger(__name__)

TimerHandler = Callable[[Timer], None]


@dataclass(frozen=True)
class TimerKind:
    """How a kind of timer runs.

    `atomic`: the handler is one database transaction with no effect outside
    the database before commit (on_commit hooks are fine), so it runs inside
    the transaction that also marks its timer done (one commit per timer; the
    work and the done mark commit or roll back together). `own_job`: the
    handler calls the network (a Slack post, an email), so the timer loop
    leaves it to a job of its own (`timers_run_due(kinds=[...])`) and a slow
    provider never holds every lead's clock behind it."""

    handler: TimerHandler
    atomic: bool = False
    own_job: bool = False


TIMER_KINDS: Registry[TimerKind] = Registry("timer handler")

# A timer claimed longer ago than this by a process that died is claimable again.
STALE_CLAIM = timedelta(minutes=10)
# One run's bound: the loop stops claiming past this many timers or this much
# time, well inside its task's timeout, and the next run goes on.
RUN_LIMIT = 2000
RUN_BUDGET = timedelta(seconds=40)


def timer_handler_register(kind: str, handler: TimerHandler, *, atomic: bool = False, own_job: bool = False) -> None:
    """Say how timers of `kind` run (see TimerKind); once per kind, from an
    AppConfig.ready()."""
    TIMER_KINDS.register(kind, TimerKind(handler, atomic=atomic, own_job=own_job))


def _own_job_kinds() -> list[str]:
    return sorted(kind for kind, spec in TIMER_KINDS.items() if spec.own_job)


def timer_schedule(
    *,
    business: Business,
    kind: str,
    due_at: datetime,
    lead: Lead | None = None,
    payload: dict[str, Any] | None = None,
    dedupe_key: str | None = None,
) -> Timer:
    """Create a timer; with a dedupe_key, an existing one is returned instead."""
    timer = Timer(business=business, lead=lead, kind=kind, due_at=due_at, payload=payload or {}, dedupe_key=dedupe_key)
    if not dedupe_key:
        timer.save(force_insert=True)
        return timer
    # One round trip (see crm.services.insert_once) where get_or_create takes four.
    if row_insert_once(timer, key="dedupe_key"):
        return timer
    # The key was taken (now or by a concurrent writer that has committed).
    return Timer.objects.get(dedupe_key=dedupe_key)


@dataclass
class TimerRun:
    claimed: int = 0
    done: int = 0
    failed: int = 0


def _claim(now: datetime, batch: int, kinds: list[str] | None = None) -> list[Timer]:
    # SKIP LOCKED lets overlapping runs (the schedule and a manual run_timers)
    # take disjoint batches instead of waiting or double-running.
    with transaction.atomic():
        due_rows = (
            Timer.objects.select_for_update(skip_locked=True)
            .filter(Q(status=Timer.Status.PENDING) | Q(status=Timer.Status.RUNNING, claimed_at__lt=now - STALE_CLAIM))
            .filter(due_at__lte=now)
        )
        if kinds is not None:
            due_rows = due_rows.filter(kind__in=kinds)
        elif own_job := _own_job_kinds():
            due_rows = due_rows.exclude(kind__in=own_job)
        due = list(due_rows.order_by("due_at")[:batch])
        Timer.objects.filter(pk__in=[t.pk for t in due]).update(
            status=Timer.Status.RUNNING, claimed_at=now, attempts=F("attempts") + 1
        )
    for timer in due:
        timer.status, timer.claimed_at, timer.attempts = Timer.Status.RUNNING, now, timer.attempts + 1
    return due


def _mark_done(timer: Timer) -> None:
    Timer.objects.filter(pk=timer.pk, status=Timer.Status.RUNNING).update(status=Timer.Status.DONE, error="")


def _run_claimed(timer: Timer, result: TimerRun) -> None:
    # One transaction per timer, never one per batch: a step holds its lead's
    # row lock and its business's receipt-chain lock until commit, and a batch
    # transaction would hold them across many leads (blocking live writers of
    # that chain, and taking lead locks after the chain lock, the reverse of
    # every other writer's order). A failure rolls back only its own timer.
    try:
        spec = TIMER_KINDS.get(timer.kind)
        if spec is None:
            raise LookupError(f"no handler registered for timer kind {timer.kind!r}")
        handler = spec.handler
        if spec.atomic:
            with unit_of_work():  # one INSERT for the step's receipts
                handler(timer)
                _mark_done(timer)
        else:
            handler(timer)
            _mark_done(timer)
    except Exception as exc:  # a failed timer stays visible with its error
        log.exception("timer %s failed", timer.public_id)
        Timer.objects.filter(pk=timer.pk, status=Timer.Status.RUNNING).update(
            status=Timer.Status.FAILED, error=f"{type(exc).__name__}: {exc}"
        )
        result.failed += 1
    else:
        result.done += 1


def timers_run_due(
    *,
    now: datetime | None = None,
    batch: int = 500,
    kinds: list[str] | None = None,
    limit: int = RUN_LIMIT,
    budget: timedelta = RUN_BUDGET,
) -> TimerRun:
    """Run the timers due at `now`, batch by batch, until none is left or the
    run has claimed `limit` of them or spent `budget` (what is left is the
    next run's).

    Each timer is claimed once; its handler runs outside the claim transaction
    and the outcome (done, or failed with the error) is written on the row.
    `kinds` limits the run to some timer kinds (their own job, tests); without
    it, the kinds registered `own_job=True` are left to their jobs.
    """
    now = now or timezone.now()
    result = TimerRun()

    def claim() -> list[Timer] | None:
        if result.claimed >= limit:
            return None
        claimed = _claim(now, min(batch, limit - result.claimed), kinds)
        result.claimed += len(claimed)
        return claimed or None

    def work(claimed: list[Timer]) -> None:
        for timer in claimed:
            _run_claimed(timer, result)

    pump(claim, work, seconds=budget.total_seconds())
    return result


def timer_run(timer_id: int, *, now: datetime | None = None) -> str:
    """Run one timer now if it is still pending (a task queue's fast path).

    The conditional update is the claim: a redelivered task, or a
    `run_timers` that got there first, finds nothing to claim and stops.
    """
    now = now or timezone.now()
    claimed = Timer.objects.filter(pk=timer_id, status=Timer.Status.PENDING).update(
        status=Timer.Status.RUNNING, claimed_at=now, attempts=F("attempts") + 1
    )
    if not claimed:
        return "already claimed"
    result = TimerRun(claimed=1)
    _run_claimed(Timer.objects.get(pk=timer_id), result)
    return "done" if result.done else "failed"


@transaction.atomic
def timer_retry(timer: Timer, *, actor: str) -> bool:
    """Put a failed timer back to pending so the next run picks it up."""
    retried = Timer.objects.filter(pk=timer.pk, status=Timer.Status.FAILED).update(
        status=Timer.Status.PENDING, due_at=timezone.now(), claimed_at=None
    )
    if retried:
        receipt_write(
            business=timer.business,
            lead=timer.lead,
            subject=timer.public_id,
            actor=actor,
            action="timer.retried",
            before={"status": "failed", "error": timer.error},
            after={"status": "pending"},
        )
    return bool(retried)
