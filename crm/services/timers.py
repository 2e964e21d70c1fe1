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

log = logging.getLogger(__name__)

TimerHandler = Callable[[Timer], None]
_HANDLERS: dict[str, TimerHandler] = {}

# A timer claimed longer ago than this by a process that died is claimable again.
STALE_CLAIM = timedelta(minutes=10)


def timer_handler_register(kind: str, handler: TimerHandler) -> None:
    _HANDLERS[kind] = handler


def timer_schedule(
    *, business: Business, kind: str, due_at: datetime, lead: Lead | None = None,
    payload: dict[str, Any] | None = None, dedupe_key: str | None = None,
) -> Timer:  # fmt: skip
    """Create a timer; with a dedupe_key, an existing one is returned instead."""
    if dedupe_key:
        timer, _ = Timer.objects.get_or_create(
            dedupe_key=dedupe_key,
            defaults={"business": business, "lead": lead, "kind": kind, "due_at": due_at, "payload": payload or {}},
        )
        return timer
    return Timer.objects.create(business=business, lead=lead, kind=kind, due_at=due_at, payload=payload or {})


@dataclass
class TimerRun:
    claimed: int = 0
    done: int = 0
    failed: int = 0


def _claim(now: datetime, batch: int) -> list[Timer]:
    # SKIP LOCKED lets overlapping runs (the schedule and a manual run_timers)
    # take disjoint batches instead of waiting or double-running.
    with transaction.atomic():
        due = list(
            Timer.objects.select_for_update(skip_locked=True)
            .filter(Q(status=Timer.Status.PENDING) | Q(status=Timer.Status.RUNNING, claimed_at__lt=now - STALE_CLAIM))
            .filter(due_at__lte=now)
            .order_by("due_at")[:batch]
        )
        Timer.objects.filter(pk__in=[t.pk for t in due]).update(
            status=Timer.Status.RUNNING, claimed_at=now, attempts=F("attempts") + 1
        )
    for timer in due:
        timer.status, timer.claimed_at, timer.attempts = Timer.Status.RUNNING, now, timer.attempts + 1
    return due


def timers_run_due(*, now: datetime | None = None, batch: int = 500) -> TimerRun:
    """Run every timer due at `now`, batch by batch, until none is left.

    Each timer is claimed once; its handler runs outside the claim transaction
    and the outcome (done, or failed with the error) is written on the row.
    """
    now = now or timezone.now()
    result = TimerRun()
    while True:
        claimed = _claim(now, batch)
        if not claimed:
            return result
        result.claimed += len(claimed)
        for timer in claimed:
            handler = _HANDLERS.get(timer.kind)
            try:
                if handler is None:
                    raise LookupError(f"no handler registered for timer kind {timer.kind!r}")
                handler(timer)
            except Exception as exc:  # a failed timer stays visible with its error
                log.exception("timer %s failed", timer.public_id)
                Timer.objects.filter(pk=timer.pk, status=Timer.Status.RUNNING).update(
                    status=Timer.Status.FAILED, error=f"{type(exc).__name__}: {exc}"
                )
                result.failed += 1
            else:
                Timer.objects.filter(pk=timer.pk, status=Timer.Status.RUNNING).update(
                    status=Timer.Status.DONE, error=""
                )
                result.done += 1
