"""What our work queues share: the growing, jittered wait after a failure,
and finding the claims a dead worker left behind.

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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from django.db.models import Model, QuerySet

Row = TypeVar("Row", bound=Model)


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
