"""The outbox and outbound webhooks.

An `OutboxEvent` is a moment in a lead's life (created, stage changed, paid…)
written in the same transaction as the change it announces, so an event
exists exactly when its change committed. After commit a sequencer numbers a
business's events (`seq`) in the order they became visible and hands them to
the outbox's consumers: outbound webhooks make one `WebhookDelivery` per
matching `WebhookSubscription`; each try of a delivery is a `WebhookAttempt`.
"""

from __future__ import annotations

from django.db import models

from crm.fields import EncryptedTextField
from crm.ids import PublicIdField
from crm.models.base import Business
from crm.models.leads import Lead


class EventType(models.TextChoices):
    """What an outbox event announces. A subscription names these, or `*`."""

    LEAD_CREATED = "lead.created"
    LEAD_STAGE_CHANGED = "lead.stage_changed"
    LEAD_OWNER_CHANGED = "lead.owner_changed"
    MESSAGE_RECEIVED = "message.received"
    APPOINTMENT_BOOKED = "appointment.booked"
    APPOINTMENT_HELD = "appointment.held"
    APPOINTMENT_NO_SHOW = "appointment.no_show"
    ESTIMATE_SENT = "estimate.sent"
    ESTIMATE_ACCEPTED = "estimate.accepted"
    ESTIMATE_DECLINED = "estimate.declined"
    PAYMENT_RECORDED = "payment.recorded"
    PAYMENT_MATCHED = "payment.matched"
    REFUND_RECORDED = "refund.recorded"


ALL_EVENTS = "*"


class OutboxEvent(models.Model):
    """One moment, as it will be told outside. `data` holds ids and the
    fields the moment is about, never a person's name, phone, email or words."""

    public_id = PublicIdField(prefix="oev")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    type = models.CharField(max_length=40, choices=EventType.choices)
    # The public id of the record the moment is about (lead, appointment, payment…).
    subject = models.CharField(max_length=64)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField()
    # The business's order of events as they became visible, given after commit
    # by the sequencer (crm.services.outbox); empty until then.
    seq = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(type__in=EventType.values), name="crm_outboxevent_type_valid"),
            models.UniqueConstraint(
                fields=["business", "seq"], condition=models.Q(seq__isnull=False), name="crm_outboxevent_unique_seq"
            ),
        ]
        indexes = [
            # What the sequencer takes: the events not numbered yet.
            models.Index(
                fields=["business", "id"], condition=models.Q(seq__isnull=True), name="crm_outboxevent_unseq_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.public_id}"


class WebhookSubscription(models.Model):
    """An agency's receiver: where a business's events go, which ones, and the
    secret they are signed with (Standard Webhooks)."""

    class Status(models.TextChoices):
        ACTIVE = "active"
        # Nothing is attempted; new deliveries wait, and go out in order on resume.
        PAUSED = "paused"

    public_id = PublicIdField(prefix="hook")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="webhook_subscriptions")
    url = models.URLField(max_length=1000)
    # Event type names, or ["*"] for every one.
    events = models.JSONField(default=list)
    # `whsec_` + base64: encrypted at rest and never shown back.
    secret = EncryptedTextField()
    description = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    pause_reason = models.CharField(max_length=300, blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    # Since when every attempt has failed (empty after a success): a day of it pauses the subscription.
    failing_since = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["business", "url"]
        constraints = [
            models.UniqueConstraint(fields=["business", "url"], name="crm_webhooksubscription_unique_url"),
            models.CheckConstraint(
                condition=models.Q(status__in=["active", "paused"]), name="crm_webhooksubscription_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.url

    def wants(self, event_type: str) -> bool:
        return ALL_EVENTS in self.events or event_type in self.events


# Tries per delivery (per replay): with the backoff in agents.webhooks.delivery
# they span more than a day, so a receiver down for a day pauses its
# subscription before its deliveries run out of tries.
WEBHOOK_MAX_ATTEMPTS = 9


class WebhookDelivery(models.Model):
    """One event for one subscription, from its first try to delivered, dead
    (out of tries) or dry_run (what would have been sent)."""

    MAX_ATTEMPTS = WEBHOOK_MAX_ATTEMPTS

    class Status(models.TextChoices):
        PENDING = "pending"  # to be tried at next_attempt_at
        HELD = "held"  # its subscription is paused: tried again on resume
        SENDING = "sending"  # claimed by a worker
        DELIVERED = "delivered"
        DEAD = "dead"
        DRY_RUN = "dry_run"

    public_id = PublicIdField(prefix="dlv")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    subscription = models.ForeignKey(WebhookSubscription, on_delete=models.PROTECT, related_name="deliveries")
    event = models.ForeignKey(OutboxEvent, on_delete=models.PROTECT, related_name="deliveries")
    # The event's lead and place in the business's order, kept here for the
    # claim's in-order rule (a later event of a lead waits for the earlier).
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    seq = models.BigIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # A replay raises it by MAX_ATTEMPTS.
    attempt_limit = models.PositiveIntegerField(default=WEBHOOK_MAX_ATTEMPTS)
    next_attempt_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(fields=["subscription", "event"], name="crm_webhookdelivery_unique_event"),
            models.CheckConstraint(
                condition=models.Q(status__in=["pending", "held", "sending", "delivered", "dead", "dry_run"]),
                name="crm_webhookdelivery_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(attempts__lte=models.F("attempt_limit")),
                name="crm_webhookdelivery_attempts_within_limit",
            ),
        ]
        indexes = [
            # The claim: pending deliveries by when they are due.
            models.Index(
                fields=["next_attempt_at"],
                condition=models.Q(status="pending"),
                name="crm_webhookdelivery_due_idx",
            ),
            # The in-order rule: a lead's unfinished deliveries per subscription.
            models.Index(
                fields=["subscription", "lead", "seq"],
                condition=models.Q(status__in=["pending", "held", "sending"]),
                name="crm_webhookdelivery_ord_idx",
            ),
            # The sweep's stale claims, and the in-flight count per subscription.
            models.Index(
                fields=["subscription", "claimed_at"],
                condition=models.Q(status="sending"),
                name="crm_webhookdelivery_fly_idx",
            ),
            models.Index(fields=["business", "-id"], name="crm_webhookdelivery_log_idx"),
        ]

    def __str__(self) -> str:
        return self.public_id


class WebhookAttempt(models.Model):
    """One try of a delivery: what was sent (headers) and what came back."""

    class Outcome(models.TextChoices):
        DELIVERED = "delivered"  # a 2xx answer
        FAILED = "failed"  # another answer, a timeout, a refused connection
        REFUSED = "refused"  # the target failed its address check: nothing was sent
        LOST = "lost"  # the worker stopped before it recorded an answer
        DRY_RUN = "dry_run"  # SEND_MODE=dry_run: recorded, not sent

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.PROTECT, related_name="attempt_log")
    number = models.PositiveIntegerField()
    at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    status_code = models.PositiveIntegerField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)
    response_excerpt = models.TextField(blank=True)
    request_headers = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="crm_webhookattempt_unique_number"),
            models.CheckConstraint(
                condition=models.Q(outcome__in=["delivered", "failed", "refused", "lost", "dry_run"]),
                name="crm_webhookattempt_outcome_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id} #{self.number}"
