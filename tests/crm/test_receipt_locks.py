"""Writing a receipt takes no lock that another transaction holds: two
transactions of one business, each writing receipts and locking rows in
either order, go ahead in parallel (on the business-wide chain lock they
queued, and deadlocked when they met in opposite orders)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from crm.models import Business, Lead, Receipt
from crm.services.receipts import receipt_write, receipts_verify
from tests.factories import BusinessFactory, lead_create

WAIT = 20  # seconds a thread waits for the other before the test fails


def _in_thread(target: Callable[[], None], errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _write(business: Business, subject: str, lead: Lead | None = None) -> None:
    receipt_write(business=business, actor="test", action="test.noted", subject=subject, lead=lead)


@pytest.fixture
def business(transactional_db: None) -> Business:
    return BusinessFactory.create(slug="acme")


def test_a_receipt_is_written_while_another_transaction_of_the_business_holds_its_own(business: Business) -> None:
    first_wrote, second_done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first() -> None:
        with transaction.atomic():
            _write(business, "first")
            first_wrote.set()
            assert second_done.wait(WAIT), "the second transaction never finished"

    def second() -> None:
        assert first_wrote.wait(WAIT)
        with transaction.atomic():
            with connection.cursor() as cursor:
                # Waiting on any lock the first holds fails this transaction.
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            _write(business, "second")
        second_done.set()

    threads = [_in_thread(first, errors), _in_thread(second, errors)]
    for thread in threads:
        thread.join(WAIT * 2)

    assert errors == []
    chain = Receipt.objects.filter(business=business).order_by("seq")
    # Sealed in the order they committed.
    assert list(chain.values_list("subject", "seq")) == [("second", 1), ("first", 2)]
    assert receipts_verify(business) is None


def test_a_row_locked_then_a_receipt_against_a_receipt_then_the_row_does_not_deadlock(business: Business) -> None:
    lead = lead_create(business)
    both_started = threading.Barrier(2, timeout=WAIT)
    errors: list[BaseException] = []

    def receipt_then_row() -> None:
        with transaction.atomic():
            _write(business, "receipt-first", lead)
            both_started.wait()
            Lead.objects.select_for_update(no_key=True).get(pk=lead.pk)

    def row_then_receipt() -> None:
        with transaction.atomic():
            Lead.objects.select_for_update(no_key=True).get(pk=lead.pk)
            both_started.wait()
            _write(business, "row-first", lead)

    threads = [_in_thread(receipt_then_row, errors), _in_thread(row_then_receipt, errors)]
    for thread in threads:
        thread.join(WAIT * 2)

    assert errors == []
    written = Receipt.objects.filter(lead=lead, action="test.noted")
    assert set(written.values_list("subject", flat=True)) == {"receipt-first", "row-first"}
    assert not Receipt.objects.filter(seq__isnull=True).exists()
    assert receipts_verify(business) is None


def test_one_transaction_is_sealed_once_after_commit_however_many_receipts_it_wrote(business: Business) -> None:
    other = BusinessFactory.create(slug="other")

    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        for n in range(3):
            _write(business, f"ours-{n}")
        _write(other, "theirs")
        assert Receipt.objects.filter(seq__isnull=True).count() == 4

    seals = [q["sql"] for q in queries.captured_queries if "leadops_receipts_seal" in q["sql"]]
    assert len(seals) == 2  # one per business
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('INSERT INTO "crm_receipt"')]
    assert len(inserts) == 4  # a receipt is one statement, no lock and no read of the chain
    statements = [q["sql"] for q in queries.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
    assert len(statements) == 4 + 1 + 2  # + the count above
    assert not Receipt.objects.filter(seq__isnull=True).exists()
    assert receipts_verify() is None


def test_a_rolled_back_transaction_leaves_no_receipt_and_no_gap(business: Business) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        _write(business, "undone")
        raise RuntimeError("the change failed")
    _write(business, "kept")

    chain = Receipt.objects.filter(business=business)
    assert list(chain.values_list("subject", "seq")) == [("kept", 1)]
    assert receipts_verify(business) is None
