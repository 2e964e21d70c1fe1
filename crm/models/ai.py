"""Language-model calls as rows: one per call made (or refused by the
business's monthly cap), and one counter per business and month that the
cap is claimed against.

A call row holds what it cost and the digests of what was sent and answered,
never the text itself: the prompt quotes the person's messages, and the
digests are erased with the person (crm.services.forget).
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.utils import timezone

from crm.ids import PublicIdField
from crm.models.base import Business
from crm.models.comms import Call, Message
from crm.models.leads import Lead


class ModelCall(models.Model):
    """One call to a language model on behalf of a business (or one the
    business's monthly cap refused: `status=refused`, nothing was sent)."""

    class Status(models.TextChoices):
        OK = "ok"  # answered, and the answer was usable
        FAILED = "failed"  # timeout, rate limit, provider error or a malformed answer: the rules answered
        REFUSED = "refused"  # the monthly cap was reached: no call was made, the rules answered

    public_id = PublicIdField(prefix="aic")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # The inbound message the call read (and drafted an answer to).
    message = models.ForeignKey(Message, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # The recorded call whose audio the call transcribed (purpose `transcription`).
    call = models.ForeignKey(Call, on_delete=models.PROTECT, null=True, blank=True, related_name="model_calls")
    purpose = models.CharField(max_length=32)
    provider = models.CharField(max_length=16)
    model = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=Status.choices)
    # Why a call failed or was refused: timeout, rate_limited, provider_error,
    # malformed, over_cap (empty when ok).
    error = models.CharField(max_length=32, blank=True)
    detail = models.CharField(max_length=300, blank=True)
    # SHA-256 of the request body and of the answer's text, as sent and received.
    prompt_digest = models.CharField(max_length=64, blank=True)
    answer_digest = models.CharField(max_length=64, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    # An estimate from the operator's prices per million tokens. Six places:
    # a call costs fractions of a cent, which two would round to nothing.
    cost_amount = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal("0"))
    currency = models.CharField(max_length=3, default="USD")
    duration_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=["ok", "failed", "refused"]), name="crm_modelcall_status_valid"
            ),
            models.CheckConstraint(condition=models.Q(cost_amount__gte=0), name="crm_modelcall_cost_not_negative"),
        ]
        indexes = [models.Index(fields=["business", "created_at"], name="crm_modelcall_business_idx")]

    def __str__(self) -> str:
        return self.public_id


class ModelCallQuota(models.Model):
    """How many model calls a business has made in one calendar month of its
    own zone (`month` is that month's first day). Claimed one call at a time
    by a single conditional upsert (agents.ai.calls), so concurrent workers
    never take the business past its `ai_monthly_calls`."""

    business = models.ForeignKey(Business, on_delete=models.CASCADE, related_name="+")
    month = models.DateField()
    used = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["business", "month"], name="crm_modelcallquota_unique_business_month"),
            models.CheckConstraint(condition=models.Q(month__day=1), name="crm_modelcallquota_month_is_first_day"),
        ]

    def __str__(self) -> str:
        return f"{self.business_id} {self.month:%Y-%m}: {self.used}"
