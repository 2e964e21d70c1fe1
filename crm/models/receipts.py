from __future__ import annotations

from typing import Any, NoReturn

from django.db import models

from crm.ids import PublicIdField
from crm.models.base import Business
from crm.models.leads import Lead


class ReceiptImmutable(Exception):
    """Raised on any attempt to change or remove a receipt."""


class ReceiptQuerySet(models.QuerySet["Receipt"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise ReceiptImmutable("receipts are append-only: update refused")

    def delete(self) -> NoReturn:
        raise ReceiptImmutable("receipts are append-only: delete refused")


class Receipt(models.Model):
    """The audit trail of every handoff and decision (invariant 10).

    Append-only three ways: this model refuses update and delete, a
    PostgreSQL trigger refuses UPDATE and DELETE (crm migration 0002), and each
    row carries the hash of the previous receipt of its business, so an edit
    made behind both is found by `verify_receipts`. Write through
    `crm.services.receipts.receipt_write`, never directly.
    """

    public_id = PublicIdField(prefix="rcpt")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    seq = models.PositiveBigIntegerField(help_text="Position in the business's chain, from 1")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="receipts")
    subject = models.CharField(max_length=40, help_text="Public id of the record acted on")
    actor = models.CharField(max_length=150, help_text="A username, or agent:<role>")
    action = models.CharField(max_length=64)
    reason = models.TextField(blank=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects = ReceiptQuerySet.as_manager()

    class Meta:
        ordering = ["business", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["business", "seq"], name="crm_receipt_unique_seq"),
        ]
        indexes = [
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
