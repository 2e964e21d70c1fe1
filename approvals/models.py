from __future__ import annotations

from django.conf import settings
from django.db import models

from crm.ids import PublicIdField
from crm.models import Business, ContactPoint, Estimate, Lead, Message

APPROVAL_KINDS = [
    "message_draft",
    "opt_out_question",
    "complaint",
    "merge_contacts",
    "high_value_estimate",
    "out_of_playbook",
    "exception",
    "review_reply",
]


class ApprovalRequest(models.Model):
    """A proposal that a person must decide (invariant 9).

    The proposer is either a person (`proposed_by_user`) or an automated role
    (`proposed_by`, e.g. "agent:sms_assistant"); the database refuses a
    decision by the same person who proposed. Whoever edits the payload
    becomes its proposer, so the same refusal covers the editor.

    The records a request concerns are pinned when it is proposed (`lead`,
    `message`, `estimate`, `contact_point`, read from the proposer's payload)
    and a decision acts on those alone. A trigger (approvals migration 0004)
    refuses a pinned record of another business and any later change of the
    business or of a pin.
    """

    class Kind(models.TextChoices):
        MESSAGE_DRAFT = "message_draft"
        OPT_OUT_QUESTION = "opt_out_question"
        COMPLAINT = "complaint"
        MERGE_CONTACTS = "merge_contacts"
        HIGH_VALUE_ESTIMATE = "high_value_estimate"
        OUT_OF_PLAYBOOK = "out_of_playbook"
        EXCEPTION = "exception"
        # A public reply to a customer's review (agents/reviews/replies.py).
        REVIEW_REPLY = "review_reply"

    class Status(models.TextChoices):
        PENDING = "pending"
        APPROVED = "approved"
        REJECTED = "rejected"
        EXPIRED = "expired"

    public_id = PublicIdField(prefix="apr")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="approvals")
    message = models.ForeignKey(
        Message,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The draft to send (message_draft) or the text a person wrote (opt_out_question, complaint)",
    )
    estimate = models.ForeignKey(
        Estimate,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The estimate waiting to be sent (high_value_estimate)",
    )
    contact_point = models.ForeignKey(
        ContactPoint,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The number whose consent the decision changes (opt_out_question)",
    )
    kind = models.CharField(max_length=32, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    summary = models.CharField(max_length=300)
    # What would happen on approval: the draft text, the merge, the estimate…
    # After an edit it is the editor's proposal, which another person decides.
    payload = models.JSONField(default=dict, blank=True)
    # The first proposer's payload, kept once a person edited it (null while
    # unedited), so both stay on record.
    original_payload = models.JSONField(null=True, blank=True)
    proposed_by = models.CharField(max_length=150)
    proposed_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # The person who first proposed it, kept through edits (the editor
    # becomes `proposed_by_user`): the decision is told to them. None for a
    # role's proposal (a model's draft), whose lead's owner is told instead.
    first_proposed_by_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=APPROVAL_KINDS), name="approvals_approvalrequest_kind_valid"
            ),
            models.CheckConstraint(
                condition=~models.Q(decided_by=models.F("proposed_by_user")),
                name="approvals_approvalrequest_not_self_approved",
            ),
            models.CheckConstraint(
                condition=models.Q(status="pending", decided_at__isnull=True)
                | (~models.Q(status="pending") & models.Q(decided_at__isnull=False)),
                name="approvals_approvalrequest_decided_has_time",
            ),
            # A person approves or rejects; a request expires by the clock alone.
            models.CheckConstraint(
                condition=models.Q(status__in=["approved", "rejected"], decided_by__isnull=False)
                | models.Q(status__in=["pending", "expired"], decided_by__isnull=True),
                name="approvals_approvalrequest_decider_matches_status",
            ),
        ]
        indexes = [
            models.Index(fields=["business", "status"], name="approvals_status_idx"),
            # `approvals_expire` looks only at pending requests with a deadline.
            models.Index(
                fields=["expires_at"],
                condition=models.Q(status="pending", expires_at__isnull=False),
                name="approvals_pending_expiry_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.public_id}"
