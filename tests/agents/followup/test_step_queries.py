"""A sequence step's database work is bounded: `run_timers` running one due
SMS step (locks, exit checks, the template, the full send gate, the message,
the next step's timer, both receipts, the timer's done mark) stays within a
fixed number of queries, so a reload or a per-step lookup cannot creep back
in unnoticed (scripts/bench_run_timers.py measures what that is worth)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agents.followup.no_reply import no_reply_start
from agents.followup.sequences.engine import STEP_TIMER
from crm.models import Lead, Receipt, Timer
from crm.services.receipts import receipts_verify
from tests.helpers.followup import NOON_NY, make_lead, run_at

pytestmark = pytest.mark.django_db

T1 = NOON_NY + timedelta(minutes=15)
# One step's transaction, its BEGIN/COMMIT included (a SAVEPOINT/RELEASE
# here, inside the test's transaction): 42 queries before the benchmark work.
STEP_QUERIES = 23
# Claiming a batch (SAVEPOINT, SELECT … SKIP LOCKED, UPDATE, RELEASE) and the
# run's last, empty claim (SAVEPOINT, SELECT, RELEASE).
CLAIM_QUERIES, EMPTY_CLAIM_QUERIES = 4, 3


def test_one_sms_step_runs_within_its_query_budget(lead: Lead, django_assert_max_num_queries: Any) -> None:
    enrollment = no_reply_start(lead, now=NOON_NY)
    assert enrollment is not None
    receipts_before = Receipt.objects.filter(business=lead.business).count()

    with django_assert_max_num_queries(STEP_QUERIES + CLAIM_QUERIES + EMPTY_CLAIM_QUERIES):
        run = run_at(T1)

    assert (run.claimed, run.done, run.failed) == (1, 1, 0)
    message = lead.messages.get(direction="out")
    assert (message.channel, message.status, message.idempotency_key) == (
        "sms",
        "dry_run",
        f"seq:{enrollment.public_id}:0",
    )
    assert message.from_number == "+13125550100"  # the gate pinned the sender
    enrollment.refresh_from_db()
    assert enrollment.next_step_index == 1
    step_timers = dict(Timer.objects.filter(kind=STEP_TIMER, lead=lead).values_list("dedupe_key", "status"))
    assert step_timers == {f"seq:{enrollment.public_id}:0": "done", f"seq:{enrollment.public_id}:1": "pending"}
    actions = list(
        Receipt.objects.filter(business=lead.business).order_by("id").values_list("action", flat=True)[receipts_before:]
    )
    assert actions == ["message.dry_run", "enrollment.step_ran"]
    assert receipts_verify(lead.business) is None


def test_several_steps_cost_the_same_per_step(
    business: Any, owner: Any, manager: Any, playbook: Any, django_assert_max_num_queries: Any
) -> None:
    leads = [make_lead(business, owner, phone=f"+1212555{n:04d}", email=f"p{n}@example.com") for n in range(3)]
    for lead in leads:
        assert no_reply_start(lead, now=NOON_NY) is not None

    # One claim for the batch, then each step's own work: no cost grows with the batch.
    with django_assert_max_num_queries(3 * STEP_QUERIES + CLAIM_QUERIES + EMPTY_CLAIM_QUERIES):
        run = run_at(T1)

    assert (run.claimed, run.done, run.failed) == (3, 3, 0)
    assert sorted(Lead.objects.filter(messages__direction="out").values_list("pk", flat=True)) == sorted(
        lead.pk for lead in leads
    )
