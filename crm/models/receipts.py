"""The receipt chain, and the erasable personal data its receipts commit to.

A receipt must outlive the person it mentions: its row is hashed into its
business's chain and can never change, yet a person may ask to be forgotten.
So personal values never enter the hashed row. `receipt_write` finds them
(`personal_paths` below: values under keys known to name, reach or quote a
person, and a reason that quotes one) and moves each into one
`ReceiptPersonalData` row per receipt, leaving in the hashed row a
placeholder that holds HMAC-SHA256(salt, value) with a random salt of that
receipt's own. The chain thus commits to the values (while they exist,
`receipts_verify` checks each against its digest, so they cannot be changed
unseen) without containing them: deleting the personal-data row erases them,
and the chain still verifies, since the hashed row is untouched and a digest
with a forgotten salt says nothing about the value. Readers are unaffected:
a queryset of receipts puts the values back in `before`, `after` and
`reason` as it loads them, and "[erased]" once they are gone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, NoReturn

from django.db import models

from crm.ids import PublicIdField
from crm.models.base import Business
from crm.models.leads import Lead

ERASED = "[erased]"
# "[personal:<64 hex digits>]": what the hashed row holds in place of a value.
PLACEHOLDER_RE = re.compile(r"^\[personal:([0-9a-f]{64})\]$")

# Keys whose value (whatever its shape) names, reaches or quotes a person.
PERSONAL_KEYS = frozenset(
    {
        "name",
        "first_name",
        "last_name",
        "display_name",
        "phone",
        "phones",
        "email",
        "emails",
        "point",
        "points",
        "from",
        "to",
        "from_number",
        "address",
        "postal_code",
        "location",
        "body",
        "text",
        "transcript",
        "title",
        "next_action",  # a task's title, copied on the lead ("First contact: reach Rosa Diaz")
        "hold_reason",
        "lost_reason",
        "recording_url",
        "ip",
        "remote_addr",
        "user_agent",
        "answers",
        "request_text",
        "notes",
        "note",
        "description",
        "evidence",
        "excerpt",
        # A model call's digests of the prompt and the answer: both quote the
        # person's messages, so a digest could confirm a guess of what they wrote.
        "prompt_digest",
        "answer_digest",
    }
)
# Actions whose reason is free text about a person (a queue summary quoting
# them, a payment's description): always personal.
FREE_TEXT_REASON_ACTIONS = frozenset({"approval.requested", "payment.received"})
# Other reasons are personal when they quote a value moved out of the same
# receipt, or contain an email address or a phone number.
_EMAIL_RE = re.compile(r"[^\s@]+@[^\s@]+\.[^\s@]+")
_PHONE_RE = re.compile(r"\+\d{8,15}\b|\(?\b\d{3}\)?[\s.-]?\d{3}[\s.-]\d{4}\b")


def placeholder(digest: str) -> str:
    return f"[personal:{digest}]"


def personal_paths(value: Any, path: tuple[str | int, ...] = ()) -> Iterable[tuple[tuple[str | int, ...], Any]]:
    """Each personal value inside a receipt's before/after, with its path."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in PERSONAL_KEYS and item not in (None, "", [], {}):
                yield (*path, key), item
            else:
                yield from personal_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from personal_paths(item, (*path, index))


def reason_is_personal(action: str, reason: str, moved: Iterable[Any]) -> bool:
    if not reason:
        return False
    if action in FREE_TEXT_REASON_ACTIONS or _EMAIL_RE.search(reason) or _PHONE_RE.search(reason):
        return True
    # Whole words only: the name "Pat" is not in "the path ended".
    return any(
        len(s) >= 3 and re.search(rf"(?<!\w){re.escape(s)}(?!\w)", reason, re.IGNORECASE) for s in _strings(moved)
    )


def _strings(values: Iterable[Any]) -> Iterable[str]:
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            yield from _strings(value.values())
        elif isinstance(value, list):
            yield from _strings(value)


def has_placeholder(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith("[personal:") and PLACEHOLDER_RE.match(value) is not None
    if isinstance(value, dict):
        return any(has_placeholder(v) for v in value.values())
    if isinstance(value, list):
        return any(has_placeholder(v) for v in value)
    return False


def placeholders_in(value: Any) -> Iterable[str]:
    """The digests of the placeholders inside a stored value."""
    if isinstance(value, str):
        if match := PLACEHOLDER_RE.match(value):
            yield match.group(1)
    elif isinstance(value, dict):
        for item in value.values():
            yield from placeholders_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from placeholders_in(item)


def reveal(value: Any, values: dict[str, Any]) -> Any:
    """A stored value with each placeholder replaced by its personal value,
    or by "[erased]" once that value is gone."""
    if isinstance(value, str):
        match = PLACEHOLDER_RE.match(value)
        return values.get(match.group(1), ERASED) if match else value
    if isinstance(value, dict):
        return {k: reveal(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [reveal(v, values) for v in value]
    return value


class ReceiptImmutable(Exception):
    """Raised on any attempt to change or remove a receipt."""


class ReceiptQuerySet(models.QuerySet["Receipt"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise ReceiptImmutable("receipts are append-only: update refused")

    def delete(self) -> NoReturn:
        raise ReceiptImmutable("receipts are append-only: delete refused")

    def _fetch_all(self) -> None:
        loading = self._result_cache is None
        super()._fetch_all()
        # Model rows only (not values()), and not `.iterator()`, which the
        # verifier uses to read the rows exactly as they were hashed.
        if loading and self._result_cache and isinstance(self._result_cache[0], Receipt):
            receipts_reveal(self._result_cache)


def receipts_reveal(receipts: list[Receipt]) -> None:
    """Put each receipt's personal values back in place, in one query.

    The row as stored (and hashed) stays in `receipt.sealed`."""
    sealed = [r for r in receipts if r.sealed is None and _row_has_placeholder(r)]
    if not sealed:
        return
    found = dict(
        ReceiptPersonalData.objects.filter(receipt_id__in=[r.pk for r in sealed]).values_list("receipt_id", "values")
    )
    for receipt in sealed:
        values = found.get(receipt.pk) or {}
        receipt.sealed = (receipt.reason, receipt.before, receipt.after)
        receipt.reason = reveal(receipt.reason, values)
        receipt.before = reveal(receipt.before, values)
        receipt.after = reveal(receipt.after, values)


def _row_has_placeholder(receipt: Receipt) -> bool:
    return has_placeholder(receipt.reason) or has_placeholder(receipt.before) or has_placeholder(receipt.after)


class Receipt(models.Model):
    """The audit trail of every handoff and decision (invariant 10).

    Append-only three ways: this model refuses update and delete, PostgreSQL
    triggers refuse UPDATE, DELETE and TRUNCATE (crm migrations 0002, 0018
    and 0021: the one UPDATE let through is the sealer's, which sets `seq`,
    `prev_hash` and `hash` once), and each sealed row carries the hash of the
    previous receipt of its business, so an edit made behind all of them is
    found by `verify_receipts`. Personal values live in `ReceiptPersonalData` (see the
    module docstring). Write through `crm.services.receipts.receipt_write`,
    never directly.
    """

    public_id = PublicIdField(prefix="rcpt")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    # Set once, by the sealer, after the transaction that inserted the row
    # committed (crm.services.receipts); NULL until then.
    seq = models.PositiveBigIntegerField(null=True, blank=True, help_text="Position in the business's chain, from 1")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="receipts")
    subject = models.CharField(max_length=40, help_text="Public id of the record acted on")
    actor = models.CharField(max_length=150, help_text="A username, or agent:<role>")
    action = models.CharField(max_length=64)
    reason = models.TextField(blank=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64, null=True, blank=True)
    hash = models.CharField(max_length=64, null=True, blank=True)
    # sha256 of the row's content, computed when it was inserted; the link
    # is sha256(prev_hash:seq:content_hash). NULL only on receipts sealed
    # before 0021, whose hash covers their content and link directly.
    content_hash = models.CharField(max_length=64, null=True, blank=True)

    objects = ReceiptQuerySet.as_manager()

    # (reason, before, after) as stored, when the attributes show revealed values.
    sealed: tuple[str, Any, Any] | None = None

    class Meta:
        # Insertion order; `seq` is the chain's order, known once sealed.
        ordering = ["business", "id"]
        constraints = [
            models.UniqueConstraint(fields=["business", "seq"], name="crm_receipt_unique_seq"),
            # Sealed all at once or not at all.
            models.CheckConstraint(
                condition=models.Q(seq__isnull=True, prev_hash__isnull=True, hash__isnull=True)
                | models.Q(seq__isnull=False, prev_hash__isnull=False, hash__isnull=False),
                name="crm_receipt_sealed_whole",
            ),
            # Only a receipt sealed under the first scheme has no content hash.
            models.CheckConstraint(
                condition=models.Q(content_hash__isnull=False) | models.Q(seq__isnull=False),
                name="crm_receipt_content_hashed",
            ),
        ]
        indexes = [
            # What the sealer reads: a business's unsealed receipts, oldest first.
            models.Index(
                fields=["business", "id"], condition=models.Q(seq__isnull=True), name="crm_receipt_unsealed_idx"
            ),
            models.Index(fields=["lead", "at"], name="crm_receipt_lead_idx"),
            # "Has this already been recorded for that record?" (idempotent roles).
            models.Index(fields=["business", "subject"], name="crm_receipt_subject_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ReceiptImmutable("receipts are append-only: update refused")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReceiptImmutable("receipts are append-only: delete refused")


class ReceiptPersonalData(models.Model):
    """The personal values of one receipt, keyed by their digest in the hashed
    row. Erasable: deleting the row forgets the values (and the salt that
    would let anyone test a guess against a digest)."""

    receipt = models.OneToOneField(Receipt, on_delete=models.PROTECT, primary_key=True, related_name="personal")
    salt = models.CharField(max_length=64, help_text="Hex; the HMAC key of this receipt's digests")
    values = models.JSONField(help_text="digest → value")

    class Meta:
        verbose_name_plural = "receipt personal data"

    def __str__(self) -> str:
        return f"personal data of receipt {self.receipt_id}"


class ReceiptCheckpoint(models.Model):
    """One exported checkpoint of a business's chain, as it was signed and
    sent: the exporter's memory of the line each next one chains to. The
    proof is the exported copy (verify_receipts reads that); a row here that
    someone deletes or rewrites only breaks the next line's link, which the
    verifier then refuses."""

    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    seq = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)
    exported_at = models.DateTimeField()
    prev = models.CharField(max_length=64, blank=True)  # the digest of the business's previous line
    signature = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True)  # sha256 of this signed line

    class Meta:
        indexes = [models.Index(fields=["business", "-id"], name="crm_receiptcheckpoint_head_idx")]

    def __str__(self) -> str:
        return f"{self.business_id} checkpoint at seq {self.seq}"
