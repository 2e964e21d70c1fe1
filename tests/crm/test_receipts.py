from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import ProgrammingError, connection, transaction

from crm.models import Business, Receipt, ReceiptImmutable
from crm.services.receipts import GENESIS_HASH, receipt_hash, receipt_write, receipts_verify
from tests.factories import BusinessFactory


def _write(business: Business, n: int, *, actor: str = "test") -> list[Receipt]:
    return [
        receipt_write(business=business, actor=actor, action="test.noted", subject=f"thing_{i}", reason=f"note {i}")
        for i in range(n)
    ]


@contextmanager
def _append_only_guard_off() -> Iterator[None]:
    """Play an attacker with database access: switch the trigger off, then back on.

    ALTER TABLE is transactional, so inside the test's transaction this is
    undone with everything else even if the test fails midway. PostgreSQL
    refuses ALTER TABLE while deferred foreign-key checks of rows written in
    this transaction are pending, so those checks are run first.
    """
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE crm_receipt DISABLE TRIGGER crm_receipt_append_only")
        try:
            yield
        finally:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute("ALTER TABLE crm_receipt ENABLE TRIGGER crm_receipt_append_only")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")


# The model refuses change


def test_saving_an_existing_receipt_again_is_refused(business: Business) -> None:
    (receipt,) = _write(business, 1)
    receipt.reason = "rewritten"

    with pytest.raises(ReceiptImmutable):
        receipt.save()

    assert Receipt.objects.get(pk=receipt.pk).reason == "note 0"


def test_updating_receipts_through_a_queryset_is_refused(business: Business) -> None:
    _write(business, 2)

    with pytest.raises(ReceiptImmutable):
        Receipt.objects.filter(business=business).update(reason="rewritten")

    assert not Receipt.objects.filter(reason="rewritten").exists()


def test_deleting_receipts_through_a_queryset_is_refused(business: Business) -> None:
    _write(business, 2)

    with pytest.raises(ReceiptImmutable):
        Receipt.objects.filter(business=business).delete()

    assert Receipt.objects.filter(business=business).count() == 2


def test_deleting_one_receipt_is_refused(business: Business) -> None:
    (receipt,) = _write(business, 1)

    with pytest.raises(ReceiptImmutable):
        receipt.delete()

    assert Receipt.objects.filter(pk=receipt.pk).exists()


# The database refuses change


@pytest.mark.parametrize(
    ("operation", "sql"),
    [
        ("UPDATE", "UPDATE crm_receipt SET reason = 'rewritten' WHERE id = %s"),
        ("DELETE", "DELETE FROM crm_receipt WHERE id = %s"),
    ],
)
def test_raw_sql_that_changes_a_receipt_is_refused_by_the_trigger(business: Business, operation: str, sql: str) -> None:
    (receipt,) = _write(business, 1)

    refusal = pytest.raises(ProgrammingError, match=f"crm_receipt is append-only: {operation} refused")
    with refusal as refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, [receipt.pk])

    assert isinstance(refused.value.__cause__, psycopg.errors.InsufficientPrivilege)
    assert Receipt.objects.get(pk=receipt.pk).reason == "note 0"


# The hash chain


def test_each_business_has_its_own_chain_from_seq_one(business: Business, other_business: Business) -> None:
    ours = _write(business, 3)
    theirs = _write(other_business, 2)

    assert [r.seq for r in ours] == [1, 2, 3]
    assert [r.seq for r in theirs] == [1, 2]
    assert ours[0].prev_hash == theirs[0].prev_hash == GENESIS_HASH
    assert [r.prev_hash for r in ours[1:]] == [r.hash for r in ours[:-1]]


def test_an_intact_chain_verifies(business: Business, other_business: Business) -> None:
    _write(business, 3)
    _write(other_business, 2)

    assert receipts_verify() is None
    assert receipts_verify(business) is None


def test_a_receipt_altered_behind_the_trigger_is_found_by_its_id(business: Business) -> None:
    _, altered, _ = _write(business, 3)

    with _append_only_guard_off(), connection.cursor() as cursor:
        cursor.execute("UPDATE crm_receipt SET reason = 'nothing happened' WHERE id = %s", [altered.pk])

    broken = receipts_verify()
    assert broken is not None
    assert (broken.business, broken.receipt, broken.seq) == (business.slug, altered.public_id, 2)
    assert "altered" in broken.problem
    assert altered.public_id in str(broken)


def test_a_receipt_deleted_from_the_middle_is_found_as_a_seq_gap(business: Business) -> None:
    _, deleted, last = _write(business, 3)

    with _append_only_guard_off(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM crm_receipt WHERE id = %s", [deleted.pk])

    broken = receipts_verify(business)
    assert broken is not None
    assert (broken.receipt, broken.seq) == (last.public_id, 3)
    assert "expected seq 2" in broken.problem


def test_a_receipt_altered_and_rehashed_breaks_the_link_to_the_next_one(business: Business) -> None:
    _, altered, last = _write(business, 3)
    altered.reason = "nothing happened"
    forged_hash = receipt_hash(altered)

    with _append_only_guard_off(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE crm_receipt SET reason = %s, hash = %s WHERE id = %s", [altered.reason, forged_hash, altered.pk]
        )

    broken = receipts_verify(business)
    assert broken is not None
    assert (broken.receipt, broken.seq) == (last.public_id, 3)
    assert "prev_hash does not match" in broken.problem


# The verify_receipts command


def test_the_command_reports_a_whole_chain(business: Business, other_business: Business) -> None:
    _write(business, 3)
    _write(other_business, 2)
    out = StringIO()

    call_command("verify_receipts", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0] == "receipt chain is whole: 5 receipts in 2 businesses"
    head = Receipt.objects.filter(business=business).order_by("-seq").first()
    assert f"  acme: head seq 3 hash {head.hash}" in lines
    assert any(line.startswith("  other: head seq 2 hash ") for line in lines)


def test_the_command_checks_one_business_on_request(business: Business, other_business: Business) -> None:
    _write(business, 3)
    _write(other_business, 2)
    out = StringIO()

    call_command("verify_receipts", "--business", "other", stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0] == "receipt chain is whole: 2 receipts in 1 businesses"
    assert [line.split(" hash ")[0] for line in lines[1:]] == ["  other: head seq 2"]


def test_the_command_fails_naming_the_broken_receipt(business: Business) -> None:
    _, altered, _ = _write(business, 3)
    with _append_only_guard_off(), connection.cursor() as cursor:
        cursor.execute("UPDATE crm_receipt SET actor = 'someone else' WHERE id = %s", [altered.pk])

    with pytest.raises(CommandError, match=altered.public_id):
        call_command("verify_receipts", stdout=StringIO())


def test_the_command_refuses_an_unknown_business(business: Business) -> None:
    with pytest.raises(CommandError, match="no business"):
        call_command("verify_receipts", "--business", "nobody", stdout=StringIO())


# Concurrency


def test_concurrent_writers_extend_one_chain_without_gaps(transactional_db: None) -> None:
    business = BusinessFactory.create(slug="busy")
    writers, per_writer = 8, 25
    start = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(worker: int) -> None:
        try:
            start.wait(timeout=10)
            for i in range(per_writer):
                receipt_write(business=business, actor=f"worker-{worker}", action="test.concurrent", subject=f"n_{i}")
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    seqs = list(Receipt.objects.filter(business=business).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, writers * per_writer + 1))
    assert receipts_verify(business) is None
