"""The orchestrator runs a step under its lead's row lock, taken before
anything else: a step then locks the person's contact after the lead, in
the order of crm/locks.py, and cannot deadlock with a booking that holds the
lead and then locks its contact."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection, transaction

from agents.events import lead_event
from agents.followup.sequences.engine import enrollments_stop
from crm.models import Lead, Stage
from crm.services import lead_sync
from crm.services.timers import timer_run
from devtools.polling import poll_until
from tests.factories import lead_create

pytestmark = pytest.mark.django_db(transaction=True)


def _row_lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype IN ('transactionid', 'tuple') AND NOT granted")
        return int(cursor.fetchone()[0])


def test_a_reply_step_and_a_booking_on_one_lead_both_finish(business, setter) -> None:
    """The reply step ends the person's paths (their contact locked) and
    then moves the lead to engaged (the lead locked): before the step took
    the lead's lock first, a booking holding the lead and waiting for the
    contact deadlocked with it."""
    lead = lead_create(business)
    lead_sync.lead_assign(lead, setter, actor="test", reason="owner")
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="test", reason="reached out")
    with transaction.atomic():
        timer = lead_event(lead, "reply", key="reply-1", data={})
    assert timer is not None
    holding = threading.Event()

    def booking() -> str:
        try:
            with transaction.atomic():
                Lead.objects.select_for_update(no_key=True).get(pk=lead.pk)
                holding.set()
                assert poll_until(_row_lock_waiters, timeout=20, interval=0.05), "the step never waited"
                enrollments_stop(lead=lead, reason="booking", actor="test")
                return "booked"
        finally:
            connection.close()

    def step() -> Any:
        try:
            assert holding.wait(timeout=20)
            return timer_run(timer.pk)
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        booked, ran = pool.submit(booking), pool.submit(step)
        outcomes = booked.result(timeout=60), ran.result(timeout=60)

    assert outcomes[0] == "booked"
    assert outcomes[1] == "done", outcomes[1]
    lead.refresh_from_db()
    assert lead.stage == Stage.ENGAGED
    timer.refresh_from_db()
    assert timer.status == "done", (timer.status, timer.error)
