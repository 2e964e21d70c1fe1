"""Bookings, estimates, jobs, invoices, payments and refunds: separate records,
separate events. A booking is not revenue; revenue is payments net of refunds."""

from __future__ import annotations

from django.db import models

from crm.ids import PublicIdField
from crm.models.base import Business, Money
from crm.models.contacts import Contact, InboundEvent
from crm.models.leads import Lead
from crm.models.team import Availability, TeamMember


def _nonnegative(model: str) -> models.CheckConstraint:
    return models.CheckConstraint(condition=models.Q(amount__gte=0), name=f"crm_{model}_amount_nonnegative")


class Appointment(models.Model):
    class Status(models.TextChoices):
        SCHEDULED = "scheduled"
        CONFIRMED = "confirmed"
        CANCELED = "canceled"
        NO_SHOW = "no_show"
        HELD = "held"

    public_id = PublicIdField(prefix="appt")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, related_name="appointments")
    assigned_to = models.ForeignKey(
        TeamMember, on_delete=models.PROTECT, null=True, blank=True, related_name="appointments"
    )
    availability = models.ForeignKey(
        Availability, on_delete=models.PROTECT, null=True, blank=True, related_name="appointments"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.SCHEDULED)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    location = models.CharField(max_length=300, blank=True)
    notes = models.TextField(blank=True)
    # The technician brief: quoted from the record when the appointment is booked.
    brief = models.TextField(blank=True)
    rescheduled_from = models.ForeignKey(
        "self", on_delete=models.PROTECT, null=True, blank=True, related_name="rescheduled_to"
    )
    outcome_at = models.DateTimeField(null=True, blank=True)
    provider = models.CharField(max_length=16, blank=True)
    external_id = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["starts_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")), name="crm_appointment_ends_after_start"
            ),
            # A provider's id (or a typed reference) names something within one business.
            models.UniqueConstraint(
                fields=["business", "provider", "external_id"], name="crm_appointment_unique_external_id"
            ),
        ]
        indexes = [
            # Reports ask per lead for an appointment in a status (held, no-show).
            models.Index(fields=["lead", "status"], name="crm_appointment_lead_idx"),
            # Upcoming or unresolved ones: the brief's today, QA's "no outcome".
            models.Index(
                fields=["business", "starts_at"],
                condition=models.Q(status__in=["scheduled", "confirmed"]),
                name="crm_appointment_open_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class Estimate(Money):
    class Status(models.TextChoices):
        DRAFT = "draft"
        PENDING_APPROVAL = "pending_approval"
        SENT = "sent"
        ACCEPTED = "accepted"
        DECLINED = "declined"
        EXPIRED = "expired"

    public_id = PublicIdField(prefix="est")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, related_name="estimates")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DRAFT)
    description = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [_nonnegative("estimate")]
        indexes = [models.Index(fields=["lead", "status"], name="crm_estimate_lead_status_idx")]

    def __str__(self) -> str:
        return self.public_id


class Job(models.Model):
    class Status(models.TextChoices):
        SCHEDULED = "scheduled"
        IN_PROGRESS = "in_progress"
        COMPLETED = "completed"
        CANCELED = "canceled"

    public_id = PublicIdField(prefix="job")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, related_name="jobs")
    estimate = models.ForeignKey(Estimate, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs")
    technician = models.ForeignKey(TeamMember, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.SCHEDULED)
    scheduled_for = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(status="completed") | models.Q(completed_at__isnull=False),
                name="crm_job_completed_has_time",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class Invoice(Money):
    class Status(models.TextChoices):
        DRAFT = "draft"
        ISSUED = "issued"
        PAID = "paid"
        VOID = "void"

    public_id = PublicIdField(prefix="inv")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, related_name="invoices")
    job = models.ForeignKey(Job, on_delete=models.PROTECT, null=True, blank=True, related_name="invoices")
    number = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    issued_at = models.DateTimeField(null=True, blank=True)
    due_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [_nonnegative("invoice")]

    def __str__(self) -> str:
        return self.public_id


class Payment(Money):
    class MatchStatus(models.TextChoices):
        MATCHED = "matched"
        UNMATCHED = "unmatched"
        AMBIGUOUS = "ambiguous"

    public_id = PublicIdField(prefix="pay")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="payments")
    contact = models.ForeignKey(Contact, on_delete=models.PROTECT, null=True, blank=True, related_name="payments")
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, null=True, blank=True, related_name="payments")
    job = models.ForeignKey(Job, on_delete=models.PROTECT, null=True, blank=True, related_name="payments")
    # Payment Matching's proposals when it could not link the payment itself.
    match_candidates = models.JSONField(default=list, blank=True)
    inbound_event = models.ForeignKey(InboundEvent, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    provider = models.CharField(max_length=16, default="manual")
    external_id = models.CharField(max_length=200, null=True, blank=True)
    match_status = models.CharField(max_length=16, choices=MatchStatus.choices, default=MatchStatus.UNMATCHED)
    received_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["received_at"]
        constraints = [
            _nonnegative("payment"),
            # A provider's id (or a typed reference) names something within one business.
            models.UniqueConstraint(
                fields=["business", "provider", "external_id"], name="crm_payment_unique_external_id"
            ),
            models.CheckConstraint(
                condition=~models.Q(match_status="matched") | models.Q(lead__isnull=False),
                name="crm_payment_matched_has_lead",
            ),
        ]
        indexes = [
            # The brief's money line: a business's payments by day.
            models.Index(fields=["business", "received_at"], name="crm_payment_received_idx"),
            # The brief and Pipeline QA: payments waiting for a person to match them.
            models.Index(
                fields=["business", "received_at"],
                condition=models.Q(match_status__in=["unmatched", "ambiguous"]),
                name="crm_payment_unmatched_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class Refund(Money):
    public_id = PublicIdField(prefix="rfnd")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    payment = models.ForeignKey(Payment, on_delete=models.PROTECT, related_name="refunds")
    inbound_event = models.ForeignKey(InboundEvent, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    provider = models.CharField(max_length=16, default="manual")
    external_id = models.CharField(max_length=200, null=True, blank=True)
    reason = models.CharField(max_length=300, blank=True)
    refunded_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["refunded_at"]
        constraints = [
            _nonnegative("refund"),
            # A provider's id (or a typed reference) names something within one business.
            models.UniqueConstraint(
                fields=["business", "provider", "external_id"], name="crm_refund_unique_external_id"
            ),
        ]

    def __str__(self) -> str:
        return self.public_id
