"""The Audit role: writing, sealing and verifying the receipt chain.

A receipt is written in the transaction whose change it records, as one
INSERT: no lock, no read of the chain. It is sealed after that transaction
commits: `receipts_seal` (one SQL function, `leadops_receipts_seal` in
crm.db_triggers) links the business's unsealed receipts into its chain, in
the order they committed, under a lock only sealers take. So no request or
task transaction waits on a business-wide lock, and two leads of one
business are processed in parallel. The chain is a hash chain: each sealed
receipt's `hash` is sha256("<prev_hash>:<seq>:<content_hash>"), and its
`content_hash` the sha256 of its content as stored. A periodic sealer
(`receipts_seal` over every business) catches receipts whose after-commit
seal was lost (a killed process). A chain cannot show on its own that its
newest receipts were cut off: `receipt_checkpoints` are exported outside
the database (crm.services.receipt_checkpoints) and `verify_receipts
--checkpoint` checks the chain against the last one.

What is hashed is the row as stored, in which each personal value is a
placeholder holding its salted digest (see `crm.models.receipts`); the values
themselves sit in an erasable `ReceiptPersonalData` row, which verification
checks against those digests while it exists.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from crm.context import unit, unit_entered
from crm.models import Business, Lead, OutboxEvent, Receipt, ReceiptPersonalData
from crm.models.receipts import personal_paths, placeholder, placeholders_in, reason_is_personal
from crm.services.outbox import (
    events_batched,
    events_cte,
    events_insert,
    events_surviving,
    events_written,
    listening_sql,
)

logger = logging.getLogger(__name__)

GENESIS_HASH = "0" * 64
# Receipts one call of the sealer links at most, per business: after a commit
# that is a handful; the periodic sealer catches up a backlog run by run.
SEAL_BATCH = 1000


def _jsonable(value: Any) -> Any:
    """What a JSONField gives back after a round trip, so the hash computed
    now equals the hash recomputed from the stored row later."""
    return json.loads(json.dumps(value or {}, cls=DjangoJSONEncoder))


def personal_digest(salt: str, value: Any) -> str:
    """HMAC-SHA256 of a value's canonical JSON, keyed by the receipt's salt."""
    return hmac.new(bytes.fromhex(salt), _canonical(value).encode(), hashlib.sha256).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _seal(
    action: str, reason: str, before: dict[str, Any], after: dict[str, Any], names: list[str]
) -> tuple[str, dict[str, Any], dict[str, Any], str, dict[str, Any]]:
    """Move the personal values out: (reason, before, after) as stored, the
    salt, and the values by digest (empty when there were none)."""
    salt = secrets.token_hex(16)
    values: dict[str, Any] = {}

    def out(value: Any) -> str:
        digest = personal_digest(salt, value)
        values[digest] = value
        return placeholder(digest)

    sealed = []
    for part in (before, after):
        for path, value in list(personal_paths(part)):
            node: Any = part
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = out(value)
        sealed.append(part)
    if reason_is_personal(action, reason, [*values.values(), *names]):
        reason = out(reason)
    return reason, sealed[0], sealed[1], salt, values


def _names_at_hand(lead: Lead | None) -> list[str]:
    """The lead's person's names, when the caller has already loaded the
    contact (a reason typed about them then stays out of the hashed row);
    never a query of its own on the hot paths that write receipts."""
    if lead is None or not Lead.contact.is_cached(lead):
        return []
    return [n for n in (lead.contact.first_name, lead.contact.last_name) if n]


def _stored(receipt: Receipt) -> tuple[str, Any, Any]:
    # A receipt read through a queryset shows its personal values; the chain
    # hashes the row as stored.
    return receipt.sealed or (receipt.reason, receipt.before, receipt.after)


def _content(receipt: Receipt) -> dict[str, Any]:
    reason, before, after = _stored(receipt)
    return {
        "id": receipt.public_id,
        "business": receipt.business_id,
        "lead": receipt.lead_id,
        "subject": receipt.subject,
        "actor": receipt.actor,
        "action": receipt.action,
        "reason": reason,
        "before": before,
        "after": after,
        "at": receipt.at.isoformat(),
    }


def receipt_content_hash(receipt: Receipt) -> str:
    """sha256 of what the receipt says, as stored (not where it sits in the chain)."""
    return hashlib.sha256(_canonical(_content(receipt)).encode()).hexdigest()


def receipt_link_hash(prev_hash: str, seq: int, content_hash: str) -> str:
    """The link the sealer computes in SQL (crm.db_triggers.RECEIPT_SEAL_FUNCTION)."""
    return hashlib.sha256(f"{prev_hash}:{seq}:{content_hash}".encode()).hexdigest()


def _first_scheme_hash(receipt: Receipt) -> str:
    """How receipts sealed before migration 0021 were hashed: content and
    link in one digest, computed in the writing transaction."""
    payload = {**_content(receipt), "seq": receipt.seq, "prev": receipt.prev_hash}
    return hashlib.sha256(_canonical(payload).encode()).hexdigest()


def receipt_write(
    *,
    business: Business,
    actor: str,
    action: str,
    subject: str,
    reason: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    lead: Lead | None = None,
) -> Receipt:
    """Record one handoff or decision: one INSERT, sealed after commit.

    Joins the caller's transaction (so the receipt and the change it records
    commit or roll back together) and takes no lock: the receipt enters the
    business's chain when `receipts_seal` runs after the commit. Personal
    values go to the receipt's `ReceiptPersonalData` row; the returned
    receipt holds the row as stored, placeholders and all.
    """
    sealed_reason, sealed_before, sealed_after, salt, values = _seal(
        action, reason, _jsonable(before), _jsonable(after), _names_at_hand(lead)
    )
    receipt = Receipt(
        business=business,
        lead=lead,
        subject=subject,
        actor=actor,
        action=action,
        reason=sealed_reason,
        before=sealed_before,
        after=sealed_after,
        at=timezone.now(),
    )
    receipt.content_hash = receipt_content_hash(receipt)
    batch = _batch()
    if batch is not None and connection.in_atomic_block:
        pending = _Pending(receipt, salt, values)
        batch.append(pending)
        # Registered where the receipt is written, so Django's savepoint
        # bookkeeping drops it with a rolled-back savepoint (and its change).
        transaction.on_commit(pending, robust=True)
        _seal_after_commit(business.pk)
        return receipt
    # No savepoint of its own: a receipt that fails to write must fail the
    # change it records, so the caller's transaction rolls back as a whole.
    with transaction.atomic(savepoint=False):
        if values:
            _insert_with_personal_data(receipt, salt, values)
        else:
            receipt.save(force_insert=True)
        _seal_after_commit(business.pk)
    return receipt


@dataclass(frozen=True)
class _SealAfterCommit:
    """The after-commit call that seals a business's new receipts; one per
    transaction and business, however many receipts the transaction wrote."""

    business_id: int

    def __call__(self) -> None:
        receipts_seal(self.business_id)


def _seal_after_commit(business_id: int) -> None:
    # `run_on_commit` lists the callbacks of the open transaction (Django
    # empties it on commit and rollback): one seal per business is enough.
    if any(isinstance(e[1], _SealAfterCommit) and e[1].business_id == business_id for e in connection.run_on_commit):
        return
    # Robust: a seal that fails (the database went away after the commit)
    # must not fail the request that committed; the periodic sealer seals it.
    transaction.on_commit(_SealAfterCommit(business_id), robust=True)


@dataclass(eq=False)
class _Pending:
    """A receipt written in a `receipts_batched` block, not inserted yet.
    Called after commit it does nothing: it sits in the transaction's
    on-commit list only to be dropped with a rolled-back savepoint."""

    receipt: Receipt
    salt: str
    values: dict[str, Any]

    def __call__(self) -> None:
        """Nothing to do after commit: the receipt was inserted before it."""


@contextmanager
def receipts_batched() -> Iterator[None]:
    """Write every receipt of the block in one INSERT at its end.

    For a unit of work that is one transaction (a task's handler): enter it
    inside that transaction's `atomic()`. A receipt is still part of the
    transaction whose change it records (inserted before the commit, rolled
    back with it); one written in a savepoint that rolls back is dropped
    with its change. Inside the block a receipt has no pk until the end, and
    a read of receipts does not see the block's: ask `receipt_written`.
    Nested blocks are one block, written by the outermost. The block's
    outbox events (crm.services.outbox) are written in the same INSERT.
    """
    with unit_entered() as work:
        if work.receipts is not None:
            yield
            return
        batch: list[_Pending] = []
        work.receipts = batch
        try:
            # The unit's outbox events ride in the same statement: a unit of work
            # that announces what it changed costs no statement more for it.
            with events_batched() as events:
                yield
                receipts, announced = _surviving(batch), events_surviving(events)
                if receipts:
                    _insert_many(receipts, announced)
                else:
                    events_insert(announced)
        finally:
            work.receipts = None


def _batch() -> list[_Pending] | None:
    work = unit()
    return work.receipts if work is not None else None


def _surviving(batch: list[_Pending]) -> list[_Pending]:
    """The block's receipts whose savepoints were not rolled back."""
    alive = {id(entry[1]) for entry in connection.run_on_commit}
    return [p for p in batch if id(p) in alive]


def receipt_written(*, subject: str, action: str) -> bool:
    """Whether a receipt of `action` about `subject` exists, the current
    `receipts_batched` block's own included (a claim checked twice in one
    unit of work)."""
    batch = _batch() or []
    if any(p.receipt.subject == subject and p.receipt.action == action for p in _surviving(batch)):
        return True
    return Receipt.objects.filter(subject=subject, action=action).exists()


def _insert_many(pending: list[_Pending], events: list[OutboxEvent] | None = None) -> None:
    """The receipts and their personal-data rows in one statement (a
    data-modifying CTE), in the order they were written; with `events`, the
    unit's outbox events too (crm.services.outbox)."""
    if not pending:
        return
    meta, quote = Receipt._meta, connection.ops.quote_name
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    row = f"({', '.join(['%s'] * len(fields))})"
    params: list[Any] = []
    for p in pending:
        params += [f.get_db_prep_save(f.pre_save(p.receipt, add=True), connection) for f in fields]
    personal = [p for p in pending if p.values]
    # Names from the models' metadata, every value a parameter.
    sql = (
        f"WITH r AS (INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)})"  # noqa: S608
        f" VALUES {', '.join([row] * len(pending))} RETURNING id, public_id)"
    )
    if personal:
        values_field = ReceiptPersonalData._meta.get_field("values")
        sql += (
            f', p AS (INSERT INTO {quote(ReceiptPersonalData._meta.db_table)} (receipt_id, salt, "values")'  # noqa: S608
            f" SELECT r.id, v.salt, v.vals FROM r JOIN (VALUES {', '.join(['(%s, %s, %s::jsonb)'] * len(personal))})"
            " AS v(public_id, salt, vals) ON v.public_id = r.public_id)"
        )
        for p in personal:
            params += [p.receipt.public_id, p.salt, values_field.get_db_prep_save(p.values, connection)]
    listening = "false"
    if events:
        insert, event_params = events_cte(events)
        listening, listening_params = listening_sql(events)
        sql += f", {insert}"
        params += [*event_params, *listening_params]
    sql += f" SELECT id, public_id, {listening} FROM r"  # noqa: S608 (the expression's values are parameters)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    ids = {public_id: pk for pk, public_id, _ in rows}
    if events:
        events_written(listening=any(row[2] for row in rows))
    for p in pending:
        p.receipt.pk = ids[p.receipt.public_id]
        p.receipt._state.adding, p.receipt._state.db = False, connection.alias


def receipts_seal(business_id: int | None = None, *, limit: int = SEAL_BATCH) -> int:
    """Link unsealed receipts into their chains (one business's, or every
    business's that has any), at most `limit` per business; returns how many.

    Call it outside any domain transaction: it takes the business's seal
    lock, which is held until the transaction it runs in ends.
    """
    if business_id is None:
        business_ids: Iterable[int] = (
            Receipt.objects.filter(seq__isnull=True).order_by().values_list("business_id", flat=True).distinct()
        )
    else:
        business_ids = [business_id]
    sealed = 0
    with connection.cursor() as cursor:
        for pk in list(business_ids):
            cursor.execute("SELECT leadops_receipts_seal(%s, %s)", [pk, limit])
            sealed += cursor.fetchone()[0]
    return sealed


def _insert_with_personal_data(receipt: Receipt, salt: str, values: dict[str, Any]) -> None:
    """The receipt and its personal-data row in one round trip (a data-
    modifying CTE), so that moving the values out costs hot paths no query.
    Writes through no `save()` and sends no signals; Receipt has neither."""
    meta, quote = Receipt._meta, connection.ops.quote_name
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    columns = ", ".join(quote(f.column) for f in fields)
    # Names from the models' metadata, every value a parameter.
    sql = (
        f"WITH r AS (INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"  # noqa: S608
        f" RETURNING id), p AS (INSERT INTO {quote(ReceiptPersonalData._meta.db_table)}"
        ' (receipt_id, salt, "values") SELECT id, %s, %s FROM r) SELECT id FROM r'
    )
    params = [f.get_db_prep_save(f.pre_save(receipt, add=True), connection) for f in fields]
    params += [salt, ReceiptPersonalData._meta.get_field("values").get_db_prep_save(values, connection)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        receipt.pk = cursor.fetchone()[0]
    receipt._state.adding, receipt._state.db = False, connection.alias


def receipt_personal_data_erase(receipt_ids: list[int]) -> int:
    """Forget the personal values of these receipts (their rows stay, and
    still verify); returns how many receipts had any."""
    deleted, _ = ReceiptPersonalData.objects.filter(receipt_id__in=receipt_ids).delete()
    return deleted


@dataclass(frozen=True)
class ChainBreak:
    business: str
    receipt: str
    seq: int | None
    problem: str

    def __str__(self) -> str:
        where = f"seq {self.seq}" if self.seq is not None else "unsealed"
        return f"business {self.business}: receipt {self.receipt} ({where}): {self.problem}"


def receipts_verify(business: Business | None = None) -> ChainBreak | None:
    """Walk each business's chain in order, then its unsealed receipts;
    return the first broken link (a personal value that no longer matches
    its digest is one)."""
    businesses = [business] if business else list(Business.objects.order_by("pk"))
    for biz in businesses:
        receipts = Receipt.objects.filter(business=biz)
        sealed = receipts.filter(seq__isnull=False).order_by("seq").iterator(chunk_size=_CHUNK)
        broken = _verify_chain(biz, _with_personal_data(sealed))
        if broken:
            return broken
        unsealed = receipts.filter(seq__isnull=True).order_by("id").iterator(chunk_size=_CHUNK)
        for receipt, personal in _with_personal_data(unsealed):
            if problem := _content_problem(receipt) or _personal_problem(receipt, personal):
                return ChainBreak(biz.slug, receipt.public_id, None, problem)
    return None


_CHUNK = 2000


def _with_personal_data(receipts: Iterator[Receipt]) -> Iterator[tuple[Receipt, ReceiptPersonalData | None]]:
    """Each receipt with its personal-data row, one query per chunk."""
    while chunk := list(islice(receipts, _CHUNK)):
        found = {p.receipt_id: p for p in ReceiptPersonalData.objects.filter(receipt_id__in=[r.pk for r in chunk])}
        for receipt in chunk:
            yield receipt, found.get(receipt.pk)


def _content_problem(receipt: Receipt) -> str | None:
    if receipt.content_hash is None and receipt.seq is not None:
        # Sealed under the first scheme: its hash covers content and link.
        if _first_scheme_hash(receipt) != receipt.hash:
            return "content does not match its hash: the receipt was altered"
        return None
    if receipt_content_hash(receipt) != receipt.content_hash:
        return "content does not match its hash: the receipt was altered"
    return None


def _personal_problem(receipt: Receipt, personal: ReceiptPersonalData | None) -> str | None:
    """Values that no longer match the digests their receipt was hashed with.
    A missing row is an erasure, not a break: the digests alone say nothing."""
    if personal is None:
        return None
    digests = {*placeholders_in(receipt.reason), *placeholders_in(receipt.before), *placeholders_in(receipt.after)}
    values = personal.values if isinstance(personal.values, dict) else {}
    for digest, value in values.items():
        if digest not in digests:
            return "its personal data holds a value the receipt never committed to"
        if not hmac.compare_digest(personal_digest(personal.salt, value), digest):
            return "its personal data does not match the digest in the receipt: a value was altered"
    if digests - values.keys():
        return "its personal data lacks a value the receipt committed to"
    return None


def _verify_chain(
    business: Business, receipts: Iterator[tuple[Receipt, ReceiptPersonalData | None]]
) -> ChainBreak | None:
    expected_prev, expected_seq = GENESIS_HASH, 1
    for receipt, personal in receipts:

        def brk(problem: str, r: Receipt = receipt) -> ChainBreak:
            return ChainBreak(business.slug, r.public_id, r.seq, problem)

        if receipt.seq != expected_seq:
            return brk(f"expected seq {expected_seq}: a receipt before it was removed")
        if receipt.prev_hash != expected_prev:
            return brk("prev_hash does not match the previous receipt: the chain was rewritten")
        if problem := _content_problem(receipt):
            return brk(problem)
        # (Its prev_hash and seq are the expected ones, checked above.)
        if (
            receipt.content_hash is not None
            and receipt_link_hash(expected_prev, expected_seq, receipt.content_hash) != receipt.hash
        ):
            return brk("hash does not match its link: the chain was rewritten")
        if problem := _personal_problem(receipt, personal):
            return brk(problem)
        expected_prev, expected_seq = receipt.hash or "", expected_seq + 1
    return None


# Checkpoints: each business's sealed head, exported outside the database.


@dataclass(frozen=True)
class Checkpoint:
    business: str
    seq: int
    hash: str

    def as_dict(self) -> dict[str, Any]:
        return {"business": self.business, "seq": self.seq, "hash": self.hash}


def receipt_checkpoints() -> list[Checkpoint]:
    """Each business's newest sealed receipt (businesses with none are left out)."""
    heads = (
        Receipt.objects.filter(seq__isnull=False)
        .order_by("business_id", "-seq")
        .distinct("business_id")
        .values_list("business__slug", "seq", "hash")
    )
    return [Checkpoint(slug, seq or 0, digest or "") for slug, seq, digest in heads]  # sealed: never None


def checkpoint_verify(checkpoint: Checkpoint) -> str | None:
    """What is wrong with the chain as this checkpoint saw it, or None: the
    receipt at its seq must still be there with the same hash. With the
    chain itself whole (`receipts_verify`), every receipt up to it is then
    the one that was exported."""
    business = Business.objects.filter(slug=checkpoint.business).first()
    if business is None:
        return f"business {checkpoint.business}: in the checkpoint, but not in the database"
    found = Receipt.objects.filter(business=business, seq=checkpoint.seq).values_list("hash", flat=True).first()
    if found is None:
        return (
            f"business {checkpoint.business}: the chain ends before seq {checkpoint.seq}, "
            "which the checkpoint saw: its newest receipts were cut off"
        )
    if found != checkpoint.hash:
        return (
            f"business {checkpoint.business}: the receipt at seq {checkpoint.seq} no longer has the hash "
            "the checkpoint saw: the chain was rewritten"
        )
    return None
