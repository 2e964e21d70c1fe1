"""Overlapping `run_timers` runs and redelivered step tasks on PostgreSQL, with
real threads (each its own connection): every step runs at most once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import pytest

from agents.followup.sequences.engine import STEP_TIMER, enrollment_start, enrollments_stop, step_run
from crm.models import Enrollment, Message, Receipt, Task, Timer
from tests.helpers.followup import NOON_NY, make_lead, run_at
from tests.helpers.races import run_together

pytestmark = pytest.mark.django_db(transaction=True)

T1 = NOON_NY + timedelta(minutes=15)
T2 = T1 + timedelta(days=1)


def race(calls: list[Callable[[], Any]]) -> list[Any]:
    return run_together(calls, timeout=30)


@pytest.fixture
def enrolled(business, owner, manager, playbook) -> list[Enrollment]:
    enrollments = []
    for n in range(12):
        lead = make_lead(business, owner, phone=f"+1212555{n:04d}", email=f"lead{n}@example.com")
        enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
        assert enrollment is not None
        enrollments.append(enrollment)
    return enrollments


def test_four_overlapping_runs_send_each_step_once(enrolled: list[Enrollment]) -> None:
    results = race([lambda: run_at(T1) for _ in range(4)])

    assert sum(r.claimed for r in results) == len(enrolled)
    keys = Counter(Message.objects.filter(direction="out").values_list("idempotency_key", flat=True))
    assert keys == Counter({f"seq:{e.public_id}:0": 1 for e in enrolled})
    assert set(Timer.objects.filter(kind=STEP_TIMER, dedupe_key__endswith=":0").values_list("status", "attempts")) == {
        ("done", 1)
    }

    race([lambda: run_at(T2) for _ in range(4)])
    assert Task.objects.filter(kind="follow_up", title="Call the lead").count() == len(enrolled)
    ran = Counter(Receipt.objects.filter(action="enrollment.step_ran").values_list("subject", flat=True))
    assert ran == Counter({e.public_id: 2 for e in enrolled})


def test_redelivered_step_tasks_racing_each_other_run_the_step_once(enrolled: list[Enrollment]) -> None:
    enrollment = enrolled[0]
    outcomes = race([lambda: step_run(enrollment.pk, 0, now=T1) for _ in range(4)])

    assert sorted(o.split()[0] for o in outcomes) == ["dry_run", "skipped", "skipped", "skipped"]
    assert Message.objects.filter(enrollment=enrollment).count() == 1


def test_a_stop_racing_the_step_leaves_either_nothing_sent_or_the_step_done_and_then_stopped(
    enrolled: list[Enrollment],
) -> None:
    for enrollment in enrolled:
        race(
            [
                partial(step_run, enrollment.pk, 0, now=T1),
                partial(enrollments_stop, lead=enrollment.lead, reason="reply", actor="test", now=T1),
            ]
        )
        enrollment.refresh_from_db()
        assert (enrollment.status, enrollment.stop_reason) == ("stopped", "reply")
        sent = Message.objects.filter(enrollment=enrollment)
        assert sent.count() <= 1
        # Whichever won, the path's next step is off the clock.
        assert not Timer.objects.filter(
            dedupe_key__startswith=f"seq:{enrollment.public_id}:", status="pending"
        ).exists()
