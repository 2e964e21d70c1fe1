from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone
from django_q.models import Schedule

from agents.schedules import schedules_ensure
from crm.models import Business, Receipt, Timer
from crm.services.receipts import receipt_write, receipts_verify
from crm.services.timers import (
    STALE_CLAIM,
    TIMER_KINDS,
    TimerKind,
    timer_handler_register,
    timer_schedule,
    timers_run_due,
)
from tests.factories import BusinessFactory
from tests.helpers.races import run_together


class _Recorder:
    """A timer handler that remembers, thread-safely, which timers it ran."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ran: list[int] = []

    def __call__(self, timer: Timer) -> None:
        with self._lock:
            self.ran.append(timer.pk)


class _ProcessDied(BaseException):
    """Escapes the runner's error handling, as a killed worker would."""


@pytest.fixture
def recorder() -> _Recorder:
    handler = _Recorder()
    timer_handler_register("test.record", handler)
    return handler


def _fail(timer: Timer) -> None:
    raise RuntimeError("provider down")


def _die(timer: Timer) -> None:
    raise _ProcessDied


def test_due_timers_run_and_future_ones_stay_pending(business: Business, recorder: _Recorder) -> None:
    now = timezone.now()
    due = [timer_schedule(business=business, kind="test.record", due_at=now - timedelta(minutes=m)) for m in (5, 0)]
    future = timer_schedule(business=business, kind="test.record", due_at=now + timedelta(seconds=1))

    result = timers_run_due(now=now)

    assert (result.claimed, result.done, result.failed) == (2, 2, 0)
    assert sorted(recorder.ran) == sorted(t.pk for t in due)
    assert set(Timer.objects.filter(pk__in=[t.pk for t in due]).values_list("status", "attempts", "error")) == {
        ("done", 1, "")
    }
    assert Timer.objects.get(pk=future.pk).status == Timer.Status.PENDING


def test_a_timer_without_a_handler_is_marked_failed_with_the_error(business: Business) -> None:
    timer = timer_schedule(business=business, kind="test.unhandled", due_at=timezone.now())

    result = timers_run_due()

    timer.refresh_from_db()
    assert (result.claimed, result.done, result.failed) == (1, 0, 1)
    assert timer.status == Timer.Status.FAILED
    assert timer.error == "LookupError: no handler registered for timer kind 'test.unhandled'"


def test_a_handler_that_raises_marks_its_timer_failed_and_the_others_still_run(
    business: Business, recorder: _Recorder
) -> None:
    timer_handler_register("test.fail", _fail)
    now = timezone.now()
    failing = timer_schedule(business=business, kind="test.fail", due_at=now - timedelta(minutes=1))
    fine = timer_schedule(business=business, kind="test.record", due_at=now)

    result = timers_run_due(now=now)

    failing.refresh_from_db()
    assert (result.claimed, result.done, result.failed) == (2, 1, 1)
    assert (failing.status, failing.error) == (Timer.Status.FAILED, "RuntimeError: provider down")
    assert recorder.ran == [fine.pk]
    assert Timer.objects.get(pk=fine.pk).status == Timer.Status.DONE


def test_a_failed_timer_is_not_retried_by_the_next_run(business: Business) -> None:
    timer_handler_register("test.fail", _fail)
    timer = timer_schedule(business=business, kind="test.fail", due_at=timezone.now())
    timers_run_due()

    result = timers_run_due()

    assert result.claimed == 0
    assert Timer.objects.get(pk=timer.pk).attempts == 1


def test_a_timer_left_running_by_a_dead_run_is_claimed_again_once_stale(
    business: Business, recorder: _Recorder
) -> None:
    now = timezone.now()
    timer = timer_schedule(business=business, kind="test.die", due_at=now - STALE_CLAIM * 2)
    with TIMER_KINDS.registered("test.die", TimerKind(_die)), pytest.raises(_ProcessDied):
        timers_run_due(now=now - STALE_CLAIM * 2)
    assert Timer.objects.get(pk=timer.pk).status == Timer.Status.RUNNING
    assert timers_run_due(now=now - STALE_CLAIM).claimed == 0

    timer_handler_register("test.die", recorder)  # the process that takes over, with a handler that works
    result = timers_run_due(now=now)

    timer.refresh_from_db()
    assert (result.claimed, result.done) == (1, 1)
    assert (timer.status, timer.attempts) == (Timer.Status.DONE, 2)
    assert recorder.ran == [timer.pk]


def test_a_timer_with_a_dedupe_key_is_scheduled_once(business: Business) -> None:
    due = timezone.now() + timedelta(minutes=5)
    first = timer_schedule(business=business, kind="test.record", due_at=due, dedupe_key="sla:lead_1")
    again = timer_schedule(
        business=business, kind="test.record", due_at=due + timedelta(hours=1), dedupe_key="sla:lead_1"
    )

    assert again.pk == first.pk
    assert Timer.objects.filter(dedupe_key="sla:lead_1").count() == 1


def test_overlapping_runs_never_run_a_timer_twice(transactional_db: None, recorder: _Recorder) -> None:
    business = BusinessFactory.create(slug="overlap")
    now = timezone.now()
    timers = [
        timer_schedule(business=business, kind="test.record", due_at=now - timedelta(seconds=i)) for i in range(120)
    ]
    # Small batches make the two runs interleave their claims.
    run_together([lambda: timers_run_due(now=now, batch=3)] * 2)
    assert Counter(recorder.ran) == Counter({t.pk: 1 for t in timers})
    assert set(Timer.objects.values_list("status", "attempts")) == {("done", 1)}


def test_the_run_timers_command_prints_its_counts(business: Business, recorder: _Recorder) -> None:
    now = timezone.now()
    timer_schedule(business=business, kind="test.record", due_at=now)
    timer_schedule(business=business, kind="test.unhandled", due_at=now)
    timer_schedule(business=business, kind="test.record", due_at=now + timedelta(hours=1))
    out = StringIO()

    call_command("run_timers", stdout=out)

    assert out.getvalue().strip() == "timers: 2 claimed, 1 done, 1 failed"


@pytest.mark.django_db
def test_the_timer_schedule_exists_once_after_migrations_and_stays_one() -> None:
    assert Schedule.objects.filter(name="leadops.timers").count() == 1

    schedules_ensure()
    schedules_ensure()

    schedule = Schedule.objects.get(name="leadops.timers")
    assert (schedule.func, schedule.schedule_type, schedule.minutes) == ("agents.tasks.run_timers", "I", 1)


def _note_then_fail(timer: Timer) -> None:
    receipt_write(business=timer.business, actor="test", action="test.noted", subject=timer.public_id)
    raise RuntimeError("failed after writing")


def _note(timer: Timer) -> None:
    receipt_write(business=timer.business, actor="test", action="test.noted", subject=timer.public_id)


def test_an_atomic_handler_commits_with_its_done_mark_and_a_failing_one_leaves_nothing(business: Business) -> None:
    timer_handler_register("test.atomic_fail", _note_then_fail, atomic=True)
    timer_handler_register("test.atomic_note", _note, atomic=True)
    now = timezone.now()
    failing = timer_schedule(business=business, kind="test.atomic_fail", due_at=now - timedelta(minutes=1))
    fine = timer_schedule(business=business, kind="test.atomic_note", due_at=now)

    result = timers_run_due(now=now)

    failing.refresh_from_db()
    assert (result.claimed, result.done, result.failed) == (2, 1, 1)
    assert (failing.status, failing.error) == (Timer.Status.FAILED, "RuntimeError: failed after writing")
    assert Timer.objects.get(pk=fine.pk).status == Timer.Status.DONE
    # The failing handler's write rolled back with it; the other's stayed, and the chain is whole.
    assert list(Receipt.objects.filter(action="test.noted").values_list("subject", flat=True)) == [fine.public_id]
    assert receipts_verify(business) is None


def test_an_atomic_handler_killed_midway_leaves_its_timer_running_and_its_work_undone(business: Business) -> None:
    def die_after_writing(timer: Timer) -> None:
        _note(timer)
        raise _ProcessDied

    timer_handler_register("test.atomic_die", die_after_writing, atomic=True)
    timer = timer_schedule(business=business, kind="test.atomic_die", due_at=timezone.now())

    with pytest.raises(_ProcessDied):
        timers_run_due()

    assert Timer.objects.get(pk=timer.pk).status == Timer.Status.RUNNING  # claimable again once stale
    assert not Receipt.objects.filter(action="test.noted").exists()


def test_concurrent_schedules_of_one_key_make_one_timer(transactional_db: None) -> None:
    business = BusinessFactory.create(slug="same-key")
    due = timezone.now() + timedelta(minutes=5)

    def schedule() -> int:
        with transaction.atomic():
            return timer_schedule(business=business, kind="test.record", due_at=due, dedupe_key="sla:lead_x").pk

    got = run_together([schedule] * 4)
    assert Timer.objects.filter(dedupe_key="sla:lead_x").count() == 1
    assert got == [Timer.objects.get(dedupe_key="sla:lead_x").pk] * 4
