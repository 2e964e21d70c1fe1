"""The pieces every work queue shares (crm/work_queue.py): the jittered,
capped backoff, and the claims a dead worker left behind."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.conversions.delivery import NOT_YET
from agents.conversions.delivery import RETRY as UPLOAD_RETRY
from agents.webhooks.delivery import RETRY as DELIVERY_RETRY
from crm.models import Business, Timer
from crm.services.timers import timer_schedule
from crm.work_queue import Backoff, claims_take_back, pump, stale_claims

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


@pytest.mark.django_db
def test_a_stale_claim_is_taken_back_once_and_a_late_worker_keeps_its_own(business: Business):
    now = timezone.now()
    stale = timer_schedule(business=business, kind="test.queue", due_at=now)
    late = timer_schedule(business=business, kind="test.queue", due_at=now)
    Timer.objects.filter(pk__in=[stale.pk, late.pk]).update(status="running", claimed_at=now - timedelta(minutes=9))

    def take_back(timer: Timer) -> bool:
        if timer.pk == late.pk:
            # The slow (not dead) worker recorded its outcome meanwhile: a new claimed_at.
            Timer.objects.filter(pk=late.pk).update(status="done", claimed_at=now)
        moved = Timer.objects.filter(pk=timer.pk, status="running", claimed_at=timer.claimed_at).update(
            status="pending", claimed_at=None
        )
        return bool(moved)

    taken = claims_take_back(
        Timer.objects.all(), claimed="running", now=now, after=timedelta(minutes=2), take_back=take_back
    )
    assert taken == 1
    assert Timer.objects.get(pk=stale.pk).status == "pending" and Timer.objects.get(pk=late.pk).status == "done"
    assert (
        claims_take_back(
            Timer.objects.all(), claimed="running", now=now, after=timedelta(minutes=2), take_back=take_back
        )
        == 0
    ), "nothing is taken back twice"


def test_the_pump_works_every_item_it_claims_then_stops_when_none_is_due():
    items = [1, 2, 3]
    worked: list[int] = []

    def work(item: int) -> str:
        worked.append(item)
        return "even" if item % 2 == 0 else "odd"

    run = pump(lambda: items.pop(0) if items else None, work, seconds=60)
    assert worked == [1, 2, 3] and run.finished
    assert run.outcomes == {"odd": 2, "even": 1}


def test_the_pump_asks_for_a_refill_before_it_stops():
    batches = [[1, 2], [3]]
    items: list[int] = []

    def refill() -> bool:
        if not batches:
            return False
        items.extend(batches.pop(0))
        return True

    run = pump(lambda: items.pop(0) if items else None, str, seconds=60, refill=refill)
    assert run.finished and sum(run.outcomes.values()) == 3 and not batches


def test_the_pump_out_of_time_says_work_may_be_left():
    claims = iter(range(10**9))
    run = pump(lambda: next(claims), str, seconds=0.05)
    assert not run.finished, "stopped by the clock, not by an empty queue"


def test_a_poison_item_stops_the_pump_with_its_error_and_the_claims_before_it_are_worked():
    items = [1, 2, 3]
    worked: list[int] = []

    def work(item: int) -> None:
        if item == 2:
            raise ValueError("poison")
        worked.append(item)

    with pytest.raises(ValueError, match="poison"):
        pump(lambda: items.pop(0) if items else None, work, seconds=60)
    # The queue's own work function decides what a failure means (the inbound
    # events' records it on the row and retries it later); the pump never
    # swallows one.
    assert worked == [1] and items == [3]
