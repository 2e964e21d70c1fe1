"""The Audit role: writing and verifying the receipt chain."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from crm.models import Business, Lead, Receipt

GENESIS_HASH = "0" * 64
# Namespace of the advisory lock that serializes one business's chain.
_CHAIN_LOCK_NAMESPACE = 4207


def _jsonable(value: Any) -> Any:
    """What a JSONField gives back after a round trip, so the hash computed
    now equals the hash recomputed from the stored row later."""
    return json.loads(json.dumps(value or {}, cls=DjangoJSONEncoder))


def receipt_hash(receipt: Receipt) -> str:
    payload = {
        "id": receipt.public_id,
        "business": receipt.business_id,
        "seq": receipt.seq,
        "lead": receipt.lead_id,
        "subject": receipt.subject,
        "actor": receipt.actor,
        "action": receipt.action,
        "reason": receipt.reason,
        "before": receipt.before,
        "after": receipt.after,
        "at": receipt.at.isoformat(),
        "prev": receipt.prev_hash,
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


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
    """
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
            reason=reason,
            before=_jsonable(before),
            after=_jsonable(after),
            at=timezone.now(),
            prev_hash=last["hash"] if last else GENESIS_HASH,
        )
        receipt.hash = receipt_hash(receipt)
        receipt.save(force_insert=True)
        return receipt


@dataclass(frozen=True)
class ChainBreak:
    business: str
    receipt: str
    seq: int
    problem: str

    def __str__(self) -> str:
        return f"business {self.business}: receipt {self.receipt} (seq {self.seq}): {self.problem}"


def receipts_verify(business: Business | None = None) -> ChainBreak | None:
    """Walk each business's chain in order; return the first broken link."""
    businesses = [business] if business else list(Business.objects.order_by("pk"))
    for biz in businesses:
        broken = _verify_chain(biz, Receipt.objects.filter(business=biz).order_by("seq").iterator(chunk_size=2000))
        if broken:
            return broken
    return None


def _verify_chain(business: Business, receipts: Iterator[Receipt]) -> ChainBreak | None:
    expected_prev, expected_seq = GENESIS_HASH, 1
    for receipt in receipts:

        def brk(problem: str, r: Receipt = receipt) -> ChainBreak:
            return ChainBreak(business.slug, r.public_id, r.seq, problem)

        if receipt.seq != expected_seq:
            return brk(f"expected seq {expected_seq}: a receipt before it was removed")
        if receipt.prev_hash != expected_prev:
            return brk("prev_hash does not match the previous receipt: the chain was rewritten")
        if receipt_hash(receipt) != receipt.hash:
            return brk("content does not match its hash: the receipt was altered")
        expected_prev, expected_seq = receipt.hash, expected_seq + 1
    return None
