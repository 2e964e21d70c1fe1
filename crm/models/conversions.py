"""Conversions: the moments of a lead told back to the ad platform that
brought it (Google Ads click conversions, Meta's Conversions API for CRM).

A `ConversionAccount` is where a business's conversions go on one platform
and what each moment is called there. A `ConversionUpload` is one moment of
one lead for one account, from the outbox event that announced it to sent,
failed, skipped or dry_run; its `key` is the idempotency key (one upload per
lead, platform and kind; a restatement per refund or later payment). Each
try is a `ConversionAttempt` with the platform's answer.
"""

from __future__ import annotations

from django.db import models

from crm.fields import EncryptedTextField
from crm.ids import PublicIdField
from crm.models.base import Business
from crm.models.leads import Lead, LeadTouch
from crm.models.webhooks import OutboxEvent


class ConversionPlatform(models.TextChoices):
    GOOGLE = "google", "Google Ads"
    META = "meta", "Meta"


class ConversionKind(models.TextChoices):
    """The moments a business may map to a platform's conversion action or event name."""

    QUALIFIED = "qualified"
    BOOKED = "booked"
    APPOINTMENT_HELD = "appointment_held"
    WON = "won"
    PAID = "paid"
    # A later change of the paid value (a refund, another payment): Google's
    # conversion adjustment of the `paid` upload it names.
    RESTATEMENT = "restatement"


# The kinds a business file maps (a restatement goes to the `paid` action).
MAPPED_KINDS = (
    ConversionKind.QUALIFIED,
    ConversionKind.BOOKED,
    ConversionKind.APPOINTMENT_HELD,
    ConversionKind.WON,
    ConversionKind.PAID,
)


class ConversionAccount(models.Model):
    """A business's account on one platform: settings in `config` (no
    secrets), credentials in `secrets` (a JSON object, encrypted at rest and
    never shown back; a credential missing there is read from the
    environment)."""

    public_id = PublicIdField(prefix="cva")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="conversion_accounts")
    platform = models.CharField(max_length=16, choices=ConversionPlatform.choices)
    # google: api (data_manager | google_ads; none: google_ads), customer_id, login_customer_id, timezone,
    # enhanced_conversions, actions {kind: resource name};
    # meta: dataset_id, events {kind: event name}.
    config = models.JSONField(default=dict, blank=True)
    secrets = EncryptedTextField(blank=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["business", "platform"]
        constraints = [
            models.UniqueConstraint(fields=["business", "platform"], name="crm_conversionaccount_unique_platform"),
            models.CheckConstraint(
                condition=models.Q(platform__in=ConversionPlatform.values), name="crm_conversionaccount_platform_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_platform_display()} ({self.public_id})"

    def mapped(self, kind: str) -> str:
        """The action (Google) or event name (Meta) a kind is sent as; "" when it is not sent."""
        names = self.config.get("actions" if self.platform == ConversionPlatform.GOOGLE else "events") or {}
        return str(names.get(kind) or "")


# Tries of an upload that fail for a passing reason (a timeout, a 5xx, a
# refused request) before it is failed for a person; a "not yet" answer from
# Google (the click is not processed yet) waits for the click's window instead.
CONVERSION_MAX_ERRORS = 8


class ConversionUpload(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"  # to be tried at next_attempt_at
        SENDING = "sending"  # claimed by a worker
        SENT = "sent"  # the platform took it
        FAILED = "failed"  # the platform refused it, or out of tries: a person looks
        SKIPPED = "skipped"  # not sendable (too old for Meta, nothing to match on…): the reason says why
        DRY_RUN = "dry_run"  # CONVERSIONS_MODE=dry_run: what would have been sent

    FINAL = (Status.SENT, Status.FAILED, Status.SKIPPED, Status.DRY_RUN)

    public_id = PublicIdField(prefix="cvu")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    account = models.ForeignKey(ConversionAccount, on_delete=models.PROTECT, related_name="uploads")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, related_name="conversion_uploads")
    platform = models.CharField(max_length=16, choices=ConversionPlatform.choices)
    kind = models.CharField(max_length=20, choices=ConversionKind.choices)
    # The idempotency key: `<platform>:<lead>:<kind>`, or for a restatement
    # `<platform>:<lead>:restatement:<event>`. Google gets `order_id` from it.
    key = models.CharField(max_length=200, unique=True)
    # The outbox event that announced the moment.
    event = models.ForeignKey(OutboxEvent, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # A restatement: the paid upload whose value it changes (sent after it).
    restates = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="restatements")
    # The touch that carries the click (gclid/gbraid/wbraid) or Meta's lead id.
    touch = models.ForeignKey(LeadTouch, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # The conversion action's resource name (Google) or the event name (Meta), as mapped when it was made.
    action = models.CharField(max_length=300)
    # When the moment happened (the conversion's time).
    occurred_at = models.DateTimeField()
    # Google's "not yet" answers are tried again until the click's window ends.
    window_ends_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)  # every try
    errors = models.PositiveIntegerField(default=0)  # tries that failed for a passing reason
    # A replay raises it by CONVERSION_MAX_ERRORS.
    error_limit = models.PositiveIntegerField(default=CONVERSION_MAX_ERRORS)
    next_attempt_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # What was (or in dry run would have been) sent, as last built; money in it
    # as the platform takes it.
    payload = models.JSONField(default=dict, blank=True)
    value_amount = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    # The platform's last answer, and its code and message when it refused.
    response = models.JSONField(default=dict, blank=True)
    last_code = models.CharField(max_length=120, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]
        constraints = [
            # Each moment once per lead on each account, whatever replays the outbox.
            models.UniqueConstraint(
                fields=["account", "lead", "kind"],
                condition=~models.Q(kind="restatement"),
                name="crm_conversionupload_one_per_kind",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["pending", "sending", "sent", "failed", "skipped", "dry_run"]),
                name="crm_conversionupload_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=ConversionKind.values), name="crm_conversionupload_kind_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(errors__lte=models.F("error_limit")), name="crm_conversionupload_errors_within_limit"
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"], condition=models.Q(status="pending"), name="crm_conversionupload_due_idx"
            ),
            models.Index(
                fields=["claimed_at"], condition=models.Q(status="sending"), name="crm_conversionupload_fly_idx"
            ),
            models.Index(fields=["business", "status", "-id"], name="crm_conversionupload_page_idx"),
        ]

    def __str__(self) -> str:
        return self.public_id


class ConversionAttempt(models.Model):
    """One try of an upload: what the platform answered."""

    class Outcome(models.TextChoices):
        SENT = "sent"
        NOT_YET = "not_yet"  # Google has not processed the click (or conversion) yet: tried again later
        RETRY = "retry"  # a passing failure (timeout, 5xx, quota, a refused request): tried again
        FAILED = "failed"  # refused for good
        SKIPPED = "skipped"
        LOST = "lost"  # the worker stopped before it recorded an answer
        DRY_RUN = "dry_run"

    upload = models.ForeignKey(ConversionUpload, on_delete=models.PROTECT, related_name="attempt_log")
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    code = models.CharField(max_length=120, blank=True)
    message = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    response = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["upload", "number"]
        constraints = [
            models.UniqueConstraint(fields=["upload", "number"], name="crm_conversionattempt_unique_number"),
            models.CheckConstraint(
                condition=models.Q(outcome__in=["sent", "not_yet", "retry", "failed", "skipped", "lost", "dry_run"]),
                name="crm_conversionattempt_outcome_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.upload_id} #{self.number}"
