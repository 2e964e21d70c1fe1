from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import ProgrammingError, connection, transaction
from django.test import override_settings
from django.utils import timezone

from crm.models import Business, Receipt, ReceiptImmutable
from crm.services.receipt_checkpoints import line_digest, new_key_pair
from crm.services.receipts import (
    GENESIS_HASH,
    receipt_content_hash,
    receipt_link_hash,
    receipt_write,
    receipts_seal,
    receipts_verify,
)
from tests.factories import BusinessFactory
from tests.helpers.races import run_together


def _write(business: Business, n: int, *, actor: str = "test") -> list[Receipt]:
    written = [
        receipt_write(business=business, actor=actor, action="test.noted", subject=f"thing_{i}", reason=f"note {i}")
        for i in range(n)
    ]
    # What the after-commit seal does; the test's own transaction never commits.
    receipts_seal(business.pk)
    return list(Receipt.objects.filter(pk__in=[r.pk for r in written]).order_by("id"))


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
    altered.sealed = None
    forged_content = receipt_content_hash(altered)
    forged_hash = receipt_link_hash(str(altered.prev_hash), 2, forged_content)

    with _append_only_guard_off(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE crm_receipt SET reason = %s, content_hash = %s, hash = %s WHERE id = %s",
            [altered.reason, forged_content, forged_hash, altered.pk],
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

    def write(worker: int) -> None:
        for i in range(per_writer):
            receipt_write(business=business, actor=f"worker-{worker}", action="test.concurrent", subject=f"n_{i}")

    run_together([partial(write, n) for n in range(writers)])
    seqs = list(Receipt.objects.filter(business=business).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, writers * per_writer + 1))
    assert receipts_verify(business) is None


# Sealing: inserted unsealed, linked into the chain once


def test_a_receipt_is_inserted_unsealed_and_sealed_once(business: Business) -> None:
    receipt = receipt_write(business=business, actor="test", action="test.noted", subject="thing_1")
    stored = Receipt.objects.get(pk=receipt.pk)
    assert (stored.seq, stored.prev_hash, stored.hash) == (None, None, None)
    assert stored.content_hash == receipt_content_hash(stored)

    assert receipts_seal(business.pk) == 1
    assert receipts_seal(business.pk) == 0
    sealed = Receipt.objects.get(pk=receipt.pk)
    assert (sealed.seq, sealed.prev_hash) == (1, GENESIS_HASH)
    assert sealed.hash == receipt_link_hash(GENESIS_HASH, 1, str(sealed.content_hash))


@pytest.mark.parametrize(
    "sql",
    [
        # Sealing again, even to the same values.
        "UPDATE crm_receipt SET seq = seq, prev_hash = prev_hash, hash = hash WHERE id = %s",
        # Unsealing.
        "UPDATE crm_receipt SET seq = NULL, prev_hash = NULL, hash = NULL WHERE id = %s",
    ],
)
def test_the_trigger_refuses_a_second_seal_or_an_unseal(business: Business, sql: str) -> None:
    (receipt,) = _write(business, 1)

    refused = pytest.raises(ProgrammingError, match="append-only: UPDATE refused")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, [receipt.pk])


def test_the_trigger_refuses_a_seal_that_changes_the_content(business: Business) -> None:
    receipt = receipt_write(business=business, actor="test", action="test.noted", subject="thing_1")

    refused = pytest.raises(ProgrammingError, match="append-only: UPDATE refused")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE crm_receipt SET seq = 1, prev_hash = %s, hash = %s, actor = 'someone else' WHERE id = %s",
            [GENESIS_HASH, "f" * 64, receipt.pk],
        )


def test_an_unsealed_receipt_altered_behind_the_trigger_is_found(business: Business) -> None:
    _write(business, 2)
    pending = receipt_write(business=business, actor="test", action="test.noted", subject="thing_9")

    with _append_only_guard_off(), connection.cursor() as cursor:
        cursor.execute("UPDATE crm_receipt SET reason = 'nothing happened' WHERE id = %s", [pending.pk])

    broken = receipts_verify(business)
    assert broken is not None
    assert (broken.receipt, broken.seq) == (pending.public_id, None)
    assert "altered" in broken.problem


def test_the_periodic_sealer_seals_what_every_business_left_unsealed(
    business: Business, other_business: Business
) -> None:
    from agents.tasks import seal_receipts

    for biz in (business, other_business, business):
        receipt_write(business=biz, actor="test", action="test.noted", subject="thing")

    assert seal_receipts() == {"receipts_sealed": 3}
    assert not Receipt.objects.filter(seq__isnull=True).exists()
    assert list(Receipt.objects.filter(business=business).order_by("seq").values_list("seq", flat=True)) == [1, 2]
    assert receipts_verify() is None


def test_receipts_sealed_under_the_first_scheme_still_verify_and_the_chain_goes_on(business: Business) -> None:
    """A database migrated from before 0021 holds receipts hashed the old way
    (content and link in one digest, no content_hash)."""
    import hashlib
    import json

    old = Receipt(business=business, seq=1, subject="thing_0", actor="test", action="test.noted", reason="old")
    old.at, old.prev_hash = timezone.now(), GENESIS_HASH
    payload = {
        "id": old.public_id,
        "business": business.pk,
        "seq": 1,
        "lead": None,
        "subject": "thing_0",
        "actor": "test",
        "action": "test.noted",
        "reason": "old",
        "before": {},
        "after": {},
        "at": old.at.isoformat(),
        "prev": GENESIS_HASH,
    }
    old.hash = hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    old.save(force_insert=True)

    (new,) = _write(business, 1)

    assert (new.seq, new.prev_hash) == (2, old.hash)
    assert receipts_verify(business) is None
    with _append_only_guard_off(), connection.cursor() as cursor:
        cursor.execute("UPDATE crm_receipt SET reason = 'rewritten' WHERE id = %s", [old.pk])
    broken = receipts_verify(business)
    assert broken is not None and broken.receipt == old.public_id and "altered" in broken.problem


# Checkpoints exported outside the database, signed and chained

KEY, PUBLIC = new_key_pair()


@pytest.fixture(autouse=True)
def checkpoint_key(settings: Any) -> None:
    settings.RECEIPT_CHECKPOINT_KEY = KEY


def _checkpoint_file(tmp_path: Path) -> Path:
    path = tmp_path / "checkpoints.jsonl"
    call_command("export_receipt_checkpoint", "--to", str(path), stdout=StringIO())
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _rewrite(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_without_a_signing_key_nothing_is_exported(business: Business, settings: Any, tmp_path: Path) -> None:
    _write(business, 1)
    settings.RECEIPT_CHECKPOINT_KEY = ""
    with pytest.raises(CommandError, match="no RECEIPT_CHECKPOINT_KEY"):
        _checkpoint_file(tmp_path)
    assert not (tmp_path / "checkpoints.jsonl").exists()


def test_each_checkpoint_is_signed_and_names_the_one_before_it(business: Business, tmp_path: Path) -> None:
    _write(business, 2)
    path = _checkpoint_file(tmp_path)
    _write(business, 1)
    call_command("export_receipt_checkpoint", "--to", str(path), stdout=StringIO())
    first, second = _lines(path)
    assert first["prev"] == "" and second["prev"] == line_digest(first) and (first["seq"], second["seq"]) == (2, 3)
    # Printed lines are signed but remembered nowhere: the next export still follows the file.
    call_command("export_receipt_checkpoint", stdout=StringIO())
    call_command("export_receipt_checkpoint", "--to", str(path), stdout=StringIO())
    assert _lines(path)[2]["prev"] == line_digest(second)
    call_command("verify_receipts", "--checkpoint", str(path), stdout=StringIO())


def test_a_checkpoint_rebased_without_the_key_is_refused_whatever_the_last_line_says(
    business: Business, tmp_path: Path
) -> None:
    """Someone who can rewrite the database and the file cut the chain, then
    wrote a last line for the shorter head: without the key it signs nothing."""
    *_, last = _write(business, 3)
    path = _checkpoint_file(tmp_path)
    with _append_only_guard_off(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM crm_receipt WHERE id = %s", [last.pk])
    lines = _lines(path)
    forged = {**lines[-1], "seq": 2, "hash": Receipt.objects.get(business=business, seq=2).hash}
    _rewrite(path, [*lines, {**forged, "prev": line_digest(lines[-1])}])
    with pytest.raises(CommandError, match=r"line 2 of .* is not signed by the checkpoint key"):
        call_command("verify_receipts", "--checkpoint", str(path), stdout=StringIO())

    # Signed with a key of their own: refused all the same.
    other, _ = new_key_pair()
    with override_settings(RECEIPT_CHECKPOINT_KEY=other):
        call_command("export_receipt_checkpoint", "--to", str(tmp_path / "theirs.jsonl"), stdout=StringIO())
    _rewrite(path, [*lines, *_lines(tmp_path / "theirs.jsonl")])
    with pytest.raises(CommandError, match=r"line 2 of .* is not signed by the checkpoint key"):
        call_command("verify_receipts", "--checkpoint", str(path), stdout=StringIO())


def test_a_checkpoint_dropped_from_the_middle_breaks_the_chain_of_checkpoints(
    business: Business, tmp_path: Path
) -> None:
    path = tmp_path / "checkpoints.jsonl"
    for _ in range(3):
        _write(business, 1)
        call_command("export_receipt_checkpoint", "--to", str(path), stdout=StringIO())
    first, _second, third = _lines(path)
    _rewrite(path, [first, third])
    with pytest.raises(CommandError, match=r"line 2 of .* does not follow business acme's checkpoint on line 1"):
        call_command("verify_receipts", "--checkpoint", str(path), stdout=StringIO())


def test_a_verifier_elsewhere_needs_only_the_public_key(business: Business, settings: Any, tmp_path: Path) -> None:
    _write(business, 1)
    path = _checkpoint_file(tmp_path)
    settings.RECEIPT_CHECKPOINT_KEY = ""
    with pytest.raises(CommandError, match="no key to check the signatures with"):
        call_command("verify_receipts", "--checkpoint", str(path), stdout=StringIO())
    call_command("verify_receipts", "--checkpoint", str(path), "--public-key", PUBLIC, stdout=StringIO())
    settings.RECEIPT_CHECKPOINT_PUBLIC_KEY = PUBLIC
    call_command("verify_receipts", "--checkpoint", str(path), stdout=StringIO())


def test_an_exported_checkpoint_holds_each_business_head(
    business: Business, other_business: Business, tmp_path: Path
) -> None:
    *_, head = _write(business, 3)
    _write(other_business, 1)
    receipt_write(business=business, actor="test", action="test.noted", subject="pending")  # sealed by the export

    lines = [json.loads(line) for line in _checkpoint_file(tmp_path).read_text().splitlines()]

    ours = next(line for line in lines if line["business"] == "acme")
    assert (ours["seq"], ours["hash"]) == (4, Receipt.objects.get(business=business, seq=4).hash)
    assert {line["business"] for line in lines} == {"acme", "other"}
    assert head.seq == 3


def test_a_chain_that_grew_after_its_checkpoint_verifies_against_it(business: Business, tmp_path: Path) -> None:
    _write(business, 2)
    path = _checkpoint_file(tmp_path)
    _write(business, 2)
    out = StringIO()

    call_command("verify_receipts", "--checkpoint", str(path), stdout=out)

    assert f"and holds the 1 checkpoints of {path}" in out.getvalue()


def test_a_tail_cut_below_the_checkpoint_is_found(business: Business, tmp_path: Path) -> None:
    *_, last = _write(business, 3)
    path = _checkpoint_file(tmp_path)
    call_command("verify_receipts", stdout=StringIO())  # the chain alone cannot tell

    with _append_only_guard_off(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM crm_receipt WHERE id = %s", [last.pk])
    call_command("verify_receipts", stdout=StringIO())  # still whole on its own

    with pytest.raises(CommandError, match=r"ends before seq 3.*cut off"):
        call_command("verify_receipts", "--checkpoint", str(path), stdout=StringIO())


def test_a_chain_rewritten_through_the_checkpoint_is_found(business: Business, tmp_path: Path) -> None:
    _, _, last = _write(business, 3)
    path = _checkpoint_file(tmp_path)
    # Rewritten consistently: content, content hash and link, so the chain
    # alone verifies.
    last.reason, last.sealed = "nothing happened", None
    content = receipt_content_hash(last)
    with _append_only_guard_off(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE crm_receipt SET reason = %s, content_hash = %s, hash = %s WHERE id = %s",
            [last.reason, content, receipt_link_hash(str(last.prev_hash), 3, content), last.pk],
        )
    assert receipts_verify(business) is None

    with pytest.raises(CommandError, match=r"seq 3 no longer has the hash.*rewritten"):
        call_command("verify_receipts", "--checkpoint", str(path), stdout=StringIO())


def test_a_checkpoint_file_that_is_not_one_is_a_clear_error(business: Business, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"business": "acme", "seq": 1}\n')

    with pytest.raises(CommandError, match=r"line 1 of .* is not a checkpoint"):
        call_command("verify_receipts", "--checkpoint", str(path), stdout=StringIO())


def test_a_checkpoint_goes_by_email(business: Business, settings: Any, mailoutbox: list[Any]) -> None:
    _write(business, 1)
    settings.RECEIPT_CHECKPOINT_TO = "mailto:ops@example.com"
    from agents.tasks import export_receipt_checkpoint

    assert export_receipt_checkpoint() == {"checkpoints_exported": 1}

    (mail,) = mailoutbox
    assert mail.to == ["ops@example.com"]
    assert '"business": "acme", "seq": 1' in mail.body


def test_a_checkpoint_goes_to_a_url_and_a_refusal_is_a_clear_error(business: Business) -> None:
    _write(business, 1)
    received: list[bytes] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204 if len(received) == 1 else 503)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/checkpoints"
    try:
        call_command("export_receipt_checkpoint", "--to", url, stdout=StringIO())
        with pytest.raises(CommandError, match=r"checkpoint POST to .* failed"):
            call_command("export_receipt_checkpoint", "--to", url, stdout=StringIO())
    finally:
        server.shutdown()

    assert json.loads(received[0].decode().splitlines()[0])["business"] == "acme"


@pytest.mark.django_db(transaction=True)
def test_a_unit_of_work_writes_its_receipts_in_one_insert_without_those_of_a_rolled_back_savepoint() -> None:
    from crm.models import ReceiptPersonalData
    from crm.services.receipts import receipt_written, receipts_batched

    business = BusinessFactory.create()
    inserts: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip().startswith(("INSERT", "WITH")) and '"crm_receipt"' in sql:
            inserts.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record), transaction.atomic(), receipts_batched():
        kept = receipt_write(
            business=business, actor="t", action="t.kept", subject="thing_1", after={"name": "Rosa Diaz"}
        )
        with pytest.raises(RuntimeError), transaction.atomic():  # a change that fails takes its receipt with it
            receipt_write(business=business, actor="t", action="t.dropped", subject="thing_2")
            raise RuntimeError("the change failed")
        receipt_write(business=business, actor="t", action="t.last", subject="thing_3", reason="done")
        # Not in the table yet, but the unit sees its own claim.
        assert kept.pk is None and not inserts
        assert receipt_written(subject="thing_1", action="t.kept")
        assert not receipt_written(subject="thing_2", action="t.dropped")

    assert len(inserts) == 1  # both receipts and the personal values, one statement
    stored = list(Receipt.objects.filter(business=business).order_by("id"))
    assert [r.action for r in stored] == ["t.kept", "t.last"] and stored[0].pk == kept.pk
    assert stored[0].after == {"name": "Rosa Diaz"}  # read back from its personal-data row
    assert ReceiptPersonalData.objects.filter(receipt=stored[0]).exists()
    assert not ReceiptPersonalData.objects.filter(receipt=stored[1]).exists()
    # Sealed after commit, in the order written, and the chain verifies.
    assert [r.seq for r in stored] == [1, 2] and receipts_verify(business) is None


@pytest.mark.django_db(transaction=True)
def test_a_unit_of_work_that_fails_writes_none_of_its_receipts() -> None:
    from crm.services.receipts import receipts_batched

    business = BusinessFactory.create()
    with pytest.raises(RuntimeError), transaction.atomic(), receipts_batched():
        receipt_write(business=business, actor="t", action="t.noted", subject="thing_1")
        raise RuntimeError("the unit failed")
    assert not Receipt.objects.filter(business=business).exists()
