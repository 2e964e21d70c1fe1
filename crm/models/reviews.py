"""Reviews: the request a customer gets after the job, and the reviews they leave.

A review request is asked once per job (or once per lead, for money that
came in without a job), and the database holds that: one row per business
and `key`, however many payment webhooks arrive at once. The same link goes
to every customer, whatever the thread's mood: asking only the happy ones
("review gating") breaks Google's policy and the FTC's rule on reviews.

A review is what a customer wrote where the business is reviewed (Google
Business Profile today), read back from that site, matched to a contact
where the name and date allow, and answered only by a reply a person
approved.
"""

from __future__ import annotations

from django.db import models

from crm.ids import PublicIdField
from crm.models.base import Business
from crm.models.comms import Message
from crm.models.contacts import Contact
from crm.models.leads import Lead
from crm.models.revenue import Job


class ReviewRequest(models.Model):
    class Status(models.TextChoices):
        SCHEDULED = "scheduled"  # waiting for its delay to pass
        SENT = "sent"  # handed to the send gate (the message says what became of it)
        SKIPPED = "skipped"  # a stop rule held: `skipped_reason` says which

    class Trigger(models.TextChoices):
        PAID = "paid"
        COMPLETED = "completed"

    public_id = PublicIdField(prefix="rvq")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, related_name="review_requests")
    contact = models.ForeignKey(Contact, on_delete=models.PROTECT, related_name="review_requests")
    job = models.ForeignKey(Job, on_delete=models.PROTECT, null=True, blank=True, related_name="review_requests")
    # What the request is for: the job's public id, or the lead's when money
    # came without a job. Public ids are unique across businesses, so the key
    # alone is: one request per job, whatever number of payment webhooks
    # arrive at once (the second inserts nothing).
    key = models.CharField(max_length=64, unique=True)
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.SCHEDULED)
    due_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    skipped_reason = models.CharField(max_length=200, blank=True)
    message = models.ForeignKey(Message, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # The review link goes out as our short redirect (/r/<token>), so a click is counted.
    token = models.CharField(max_length=32, unique=True)
    destination = models.URLField(max_length=500)
    clicks = models.PositiveIntegerField(default=0)
    first_clicked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(status="sent") | models.Q(sent_at__isnull=False),
                name="crm_reviewrequest_sent_has_time",
            ),
            models.CheckConstraint(
                condition=~models.Q(status="skipped") | ~models.Q(skipped_reason=""),
                name="crm_reviewrequest_skipped_has_reason",
            ),
        ]
        indexes = [
            # The reviews page's figures: a business's requests by the day they are due.
            models.Index(fields=["business", "due_at"], name="crm_reviewrequest_due_idx"),
        ]

    def __str__(self) -> str:
        return self.public_id


class Review(models.Model):
    class ReplyStatus(models.TextChoices):
        NONE = "", "no reply"
        PENDING_APPROVAL = "pending_approval", "waiting for approval"
        POSTED = "posted", "posted"
        FAILED = "failed", "not posted"

    public_id = PublicIdField(prefix="rvw")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    provider = models.CharField(max_length=16, default="google")
    # The provider's name for the review (Google: accounts/…/locations/…/reviews/…).
    external_id = models.CharField(max_length=300)
    location = models.CharField(max_length=200, blank=True)
    reviewer_name = models.CharField(max_length=200, blank=True)
    rating = models.PositiveSmallIntegerField(null=True, blank=True)
    comment = models.TextField(blank=True)
    posted_at = models.DateTimeField()
    edited_at = models.DateTimeField(null=True, blank=True)
    # Matched by name and date where possible (a review site gives no phone or email).
    contact = models.ForeignKey(Contact, on_delete=models.PROTECT, null=True, blank=True, related_name="reviews")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="reviews")
    review_request = models.ForeignKey(
        ReviewRequest, on_delete=models.PROTECT, null=True, blank=True, related_name="reviews"
    )
    reply_body = models.TextField(blank=True)
    reply_status = models.CharField(max_length=20, choices=ReplyStatus.choices, default="", blank=True)
    reply_posted_at = models.DateTimeField(null=True, blank=True)
    reply_error = models.CharField(max_length=300, blank=True)
    fetched_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-posted_at"]
        constraints = [
            # Read again at every pull: one row per review.
            models.UniqueConstraint(
                fields=["business", "provider", "external_id"], name="crm_review_unique_external_id"
            ),
            models.CheckConstraint(
                condition=models.Q(rating__isnull=True) | models.Q(rating__gte=1, rating__lte=5),
                name="crm_review_rating_1_to_5",
            ),
            models.CheckConstraint(
                condition=~models.Q(reply_status="posted") | models.Q(reply_posted_at__isnull=False),
                name="crm_review_posted_reply_has_time",
            ),
        ]
        indexes = [models.Index(fields=["business", "posted_at"], name="crm_review_posted_idx")]

    def __str__(self) -> str:
        return self.public_id
