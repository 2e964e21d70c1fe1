"""The pieces every work queue shares (agents/work_queue.py): the jittered,
capped backoff, and the claims a dead worker left behind."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.conversions.delivery import NOT_YET
from agents.conversions.delivery import RETRY as UPLOAD_RETRY
from agents.webhooks.delivery import RETRY as DELIVERY_RETRY
from agents.work_queue import Backoff, stale_claims
from crm.models import Business, Timer
from crm.services.timers import timer_schedule

LOW, HIGH = (lambda a, b: a), (lambda a, b: b)


def test_the_wait_grows_by_its_factor_up_to_the_cap_within_the_jitter():
    backoff = Backoff(first=timedelta(seconds=30), cap=timedelta(hours=1), factor=4, jitter=0.1)
    middle = lambda a, b: 1.0  # noqa: E731 - no jitter: the base itself
    assert [backoff.delay(n, middle) for n in (1, 2, 3)] == [timedelta(seconds=s) for s in (30, 120, 480)]
    assert backoff.delay(40, middle) == timedelta(hours=1), "capped, however many failures"
    assert backoff.delay(0, middle) == timedelta(seconds=30), "a first failure counted as zero waits the first"
    assert (backoff.delay(2, LOW), backoff.delay(2, HIGH)) == (timedelta(seconds=108), timedelta(seconds=132))
    waits = {backoff.delay(3) for _ in range(50)}
    assert len(waits) > 1 and all(timedelta(seconds=432) <= w <= timedelta(seconds=528) for w in waits)


def test_the_queues_keep_their_own_bounds():
    """The webhooks' and conversions' schedules, as each queue's docs state them."""
    flat = lambda a, b: 1.0  # noqa: E731
    assert DELIVERY_RETRY.delay(1, flat) == timedelta(seconds=30)
    assert DELIVERY_RETRY.delay(99, flat) == timedelta(hours=10)
    assert UPLOAD_RETRY.delay(1, flat) == timedelta(minutes=1) and UPLOAD_RETRY.delay(99, flat) == timedelta(hours=12)
    assert NOT_YET.delay(2, flat) == timedelta(hours=2) and NOT_YET.delay(99, flat) == timedelta(days=1)


@pytest.mark.django_db
def test_only_claims_older_than_the_bound_are_stale_oldest_first(business: Business):
    now = timezone.now()

    def claimed(minutes_ago: int | None, status: str = Timer.Status.RUNNING) -> Timer:
        timer = timer_schedule(business=business, kind="test.queue", due_at=now)
        at = None if minutes_ago is None else now - timedelta(minutes=minutes_ago)
        Timer.objects.filter(pk=timer.pk).update(status=status, claimed_at=at)
        return timer

    old, older, fresh = claimed(5), claimed(9), claimed(1)
    claimed(30, status=Timer.Status.DONE)  # finished: not a claim
    claimed(None, status=Timer.Status.PENDING)  # never claimed
    found = stale_claims(Timer.objects.all(), claimed=Timer.Status.RUNNING, now=now, after=timedelta(minutes=2))
    assert list(found) == [older, old]
    assert fresh not in found
    assert len(stale_claims(Timer.objects.all(), claimed="running", now=now, after=timedelta(minutes=2), limit=1)) == 1
