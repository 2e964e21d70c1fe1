"""What our work queues share: the pump that claims and works items until
none is due or its time is up, the growing, jittered wait after a failure,
and taking back the claims a dead worker left behind.

The pump runs inbound events (agents/capture/processing.py), timers
(crm/services/timers.py), outbound webhooks (agents/webhooks/delivery.py) and
conversion uploads (agents/conversions/delivery.py); the last two also take
back lost claims and back off here. Outbound messages are the exception: one
dispatch task per message claims it, and the reconcile sweep
(agents/outbound/reconcile.py) asks the provider what happened to a lost
claim instead of retrying it — a text must never go out twice.

Work that leaves the database (a webhook delivery, a conversion upload, a
text) is a row, claimed by a conditional UPDATE that counts the attempt, so
two workers never take one item and a redelivered task finds it taken. A
worker that dies between claim and record leaves the row claimed; a sweep
takes such claims back after a bound (`stale_claims`). A failure waits
`Backoff.delay(n)` before the next try: exponential, capped, and jittered
so that items failing together (a receiver down for an hour) do not all come
back in the same second.

The claim itself stays with each queue: what a claim may take (a paused
subscription's deliveries, a lead's later event behind an earlier one)
differs, and is its own SQL.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from django.db import transaction
from django.db.models import Model, QuerySet

Row = TypeVar("Row", bound=Model)
Item = TypeVar("Item")


@dataclass
class PumpRun:
    """What one pump did: each outcome `work` returned, counted, and whether
    it stopped because nothing was due (`finished`) rather than out of time
    (then work may be left, and the caller starts another run)."""

    outcomes: Counter[str] = field(default_factory=Counter)
    finished: bool = False


def pump(
    claim: Callable[[], Item | None],
    work: Callable[[Item], object],
    *,
    seconds: float,
    refill: Callable[[], bool] = lambda: False,
) -> PumpRun:
    """Claim an item and work it, again and again, until `claim` finds none
    (and `refill`, asked then, makes none: an outbox numbering events
    committed since the run began) or `seconds` have passed. An item claimed
    is always worked, whatever the clock says: a claim left unworked would
    wait for the lost-claim sweep for nothing."""
    run = PumpRun()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        item = claim()
        if item is None:
            if refill():
                continue
            run.finished = True
            break
        run.outcomes[str(work(item))] += 1
    return run


@dataclass(frozen=True)
class Backoff:
    """The wait after the n-th failure: `first`, times `factor` for each one
    after it, at most `cap`, within ± `jitter` of that."""

    first: timedelta
    cap: timedelta
    factor: float = 4
    jitter: float = 0.1

    def delay(self, n: int, rng: Callable[[float, float], float] = random.uniform) -> timedelta:
        # In float seconds: a timedelta times factor ** 40 overflows.
        base = min(self.first.total_seconds() * float(self.factor) ** max(n - 1, 0), self.cap.total_seconds())
        return timedelta(seconds=base * rng(1 - self.jitter, 1 + self.jitter))


def stale_claims(
    rows: QuerySet[Row], *, claimed: str, now: datetime, after: timedelta, limit: int = 100
) -> QuerySet[Row]:
    """The rows of `rows` still in the `claimed` status longer than `after`
    since their claim (`claimed_at`), oldest first: claims whose worker died.
    The caller takes each back with a conditional UPDATE on the same
    `claimed_at`, so a slow (not dead) worker that records meanwhile wins."""
    return rows.filter(status=claimed, claimed_at__lt=now - after).order_by("claimed_at")[:limit]


def claims_take_back(
    rows: QuerySet[Row],
    *,
    claimed: str,
    now: datetime,
    after: timedelta,
    take_back: Callable[[Row], bool],
) -> int:
    """Give back each claim of `rows` older than `after` (`stale_claims`):
    `take_back(row)` moves it on (a conditional UPDATE on its `claimed_at`,
    and the attempt it lost recorded) in a transaction of its own, and says
    whether it moved; returns how many did."""
    taken = 0
    for row in stale_claims(rows, claimed=claimed, now=now, after=after):
        with transaction.atomic():
            taken += bool(take_back(row))
    return taken
