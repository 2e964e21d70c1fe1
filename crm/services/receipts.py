"""The Audit role: writing and verifying the receipt chain.

What is hashed is the row as stored, in which each personal value is a
placeholder holding its salted digest (see `crm.models.receipts`); the values
themselves sit in an erasable `ReceiptPersonalData` row, which verification
checks against those digests while it exists.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from crm.models import Business, Lead, Receipt, ReceiptPersonalData
from crm.models.receipts import personal_paths, placeholder, placeholders_in, reason_is_personal

GENESIS_HASH = "0" * 64
# Namespace of the advisory lock that serializes one business's chain.
_CHAIN_LOCK_NAMESPACE = 4207


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


def receipt_hash(receipt: Receipt) -> str:
    # A receipt read through a queryset shows its personal values; the chain
    # hashes the row as stored.
    reason, before, after = receipt.sealed or (receipt.reason, receipt.before, receipt.after)
    payload = {
        "id": receipt.public_id,
        "business": receipt.business_id,
        "seq": receipt.seq,
        "lead": receipt.lead_id,
        "subject": receipt.subject,
        "actor": receipt.actor,
        "action": receipt.action,
        "reason": reason,
        "before": before,
        "after": after,
        "at": receipt.at.isoformat(),
        "prev": receipt.prev_hash,
    }
    return hashlib.sha256(_canonical(payload).encode()).hexdigest()


def receipt_chain_lock(business_id: int) -> None:
    """Take the business's receipt-chain lock now, in the caller's transaction.

    `receipt_write` takes it at the first receipt and holds it until commit.
    A writer that locks a row first and writes its receipt after waits for
    the chain while holding that row, and deadlocks with a writer that holds
    the chain and wants the row (an approval decision on the same estimate).
    Paths that lock a row they will write a receipt about call this first, so
    the order is always chain, then rows. Re-entrant: the advisory lock is
    the same one, stacked within the transaction.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_CHAIN_LOCK_NAMESPACE, business_id])


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
    """Append one receipt to the business's chain.

    Joins the caller's transaction (so the receipt and the change it records
    commit or roll back together) and holds a transaction-scoped advisory lock
    per business, so concurrent writers extend the chain one at a time.
    Personal values go to the receipt's `ReceiptPersonalData` row; the
    returned receipt holds the row as stored, placeholders and all.
    """
    # Sealed before the lock: it is pure computation.
    sealed_reason, sealed_before, sealed_after, salt, values = _seal(
        action, reason, _jsonable(before), _jsonable(after), _names_at_hand(lead)
    )
    # No savepoint of its own: a receipt that fails to write must fail the
    # change it records, so the caller's transaction rolls back as a whole.
    with transaction.atomic(savepoint=False):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_CHAIN_LOCK_NAMESPACE, business.pk])
        last = Receipt.objects.filter(business=business).order_by("-seq").values("seq", "hash").first()
        receipt = Receipt(
            business=business,
            seq=(last["seq"] + 1) if last else 1,
            lead=lead,
            subject=subject,
            actor=actor,
            action=action,
            reason=sealed_reason,
            before=sealed_before,
            after=sealed_after,
            at=timezone.now(),
            prev_hash=last["hash"] if last else GENESIS_HASH,
        )
        receipt.hash = receipt_hash(receipt)
        if values:
            _insert_with_personal_data(receipt, salt, values)
        else:
            receipt.save(force_insert=True)
        return receipt


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
    seq: int
    problem: str

    def __str__(self) -> str:
        return f"business {self.business}: receipt {self.receipt} (seq {self.seq}): {self.problem}"


def receipts_verify(business: Business | None = None) -> ChainBreak | None:
    """Walk each business's chain in order; return the first broken link
    (a personal value that no longer matches its digest is one)."""
    businesses = [business] if business else list(Business.objects.order_by("pk"))
    for biz in businesses:
        rows = Receipt.objects.filter(business=biz).order_by("seq").iterator(chunk_size=_CHUNK)
        broken = _verify_chain(biz, _with_personal_data(rows))
        if broken:
            return broken
    return None


_CHUNK = 2000


def _with_personal_data(receipts: Iterator[Receipt]) -> Iterator[tuple[Receipt, ReceiptPersonalData | None]]:
    """Each receipt with its personal-data row, one query per chunk."""
    while chunk := list(islice(receipts, _CHUNK)):
        found = {p.receipt_id: p for p in ReceiptPersonalData.objects.filter(receipt_id__in=[r.pk for r in chunk])}
        for receipt in chunk:
            yield receipt, found.get(receipt.pk)


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
        if receipt_hash(receipt) != receipt.hash:
            return brk("content does not match its hash: the receipt was altered")
        if problem := _personal_problem(receipt, personal):
            return brk(problem)
        expected_prev, expected_seq = receipt.hash, expected_seq + 1
    return None
