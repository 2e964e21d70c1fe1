"""A capture takes its locks in the documented order (crm/locks.py: lead
rows before contact rows), so it cannot deadlock with a follow-up step or a
booking that holds a lead and then locks its contact."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from agents.capture.base import Capture
from agents.capture.identity import capture_apply
from agents.followup.sequences.engine import enrollments_stop
from crm.models import Contact, Lead
from devtools.polling import poll_until

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = "+12125550147"


def _both(calls: list[Callable[[], Any]]) -> list[Any]:
    def run(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


def _row_lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype IN ('transactionid', 'tuple') AND NOT granted")
        return int(cursor.fetchone()[0])


def _booking_meets(business: Any, lead: Lead, later: Capture) -> Any:
    """The booking path (the lead locked, then the person's paths ended under
    their contact's lock) while a capture of the same person arrives: both
    must finish. Returns the capture's outcome."""
    holding = threading.Event()

    def booking() -> str:
        with transaction.atomic():
            Lead.objects.select_for_update(no_key=True).get(pk=lead.pk)
            holding.set()
            assert poll_until(_row_lock_waiters, timeout=20, interval=0.05), "the capture never waited"
            enrollments_stop(lead=lead, reason="booking", actor="test")
            return "booked"

    def capture() -> Any:
        assert holding.wait(timeout=20)
        return capture_apply(business=business, capture=later)

    booked, applied = _both([booking, capture])
    assert booked == "booked", booked
    assert not isinstance(applied, Exception), applied
    return applied


def _first(business: Any) -> Lead:
    return capture_apply(
        business=business, capture=Capture(channel="form", occurred_at=timezone.now(), phones=[PHONE])
    ).lead


def test_a_capture_that_fills_in_a_name_waits_for_the_lead_before_it_writes_the_contact(business) -> None:
    """A capture that brings the person's name used to write the contact
    first and then wait for the lead: each held what the other wanted, and
    PostgreSQL killed one as a deadlock."""
    lead = _first(business)
    later = Capture(channel="form", occurred_at=timezone.now(), phones=[PHONE], first_name="Rosa")
    applied = _booking_meets(business, lead, later)
    assert applied.lead.pk == lead.pk
    assert Contact.objects.get(pk=lead.contact_id).first_name == "Rosa"
