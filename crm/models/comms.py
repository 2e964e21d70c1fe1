from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from crm.ids import PublicIdField
from crm.models.base import Business
from crm.models.contacts import Contact, ContactPoint, InboundEvent
from crm.models.leads import Lead, Task

MESSAGE_STATUSES = [
    "received",
    "draft",
    "pending_approval",
    "deferred",
    "blocked",
    "dry_run",
    "queued",
    "sending",
    "sent",
    "delivered",
    "undelivered",
    "failed",
    "unknown",
]
BLOCK_REASONS = [
    "hold",
    "stopped",
    "no_consent",
    "revoked",
    "quiet_hours",
    "daily_cap",
    "other_path_active",
    "rejected",
    "number_not_allowed",
    "outside_window",
    "expired",
    # Twilio Lookup says the number cannot take texts (a landline, toll-free).
    "cannot_text",
    # Deferred, not blocked: a state's cap on marketing texts in 24 hours.
    "state_cap",
]
# What an inbound message asks for (agents/ai/intents.py reads it: the rules,
# or a language model when one is configured).
INTENTS = [
    "booking_request",
    "question",
    "price_question",
    "reschedule",
    "complaint",
    "revocation",
    "wrong_number",
    "spam",
    "other",
]
# Provider hand-offs per message: every claim (queued → sending) spends a
# dispatch attempt, every reconciliation that cannot settle the outcome a
# reconcile attempt; past either cap the message is failed for a person.
MAX_DISPATCH_ATTEMPTS = 4
MAX_RECONCILE_ATTEMPTS = 5


class Message(models.Model):
    """One message in or out. An outbound row exists, with its idempotency key,
    before the provider is called (invariant 7)."""

    class Status(models.TextChoices):
        RECEIVED = "received"
        DRAFT = "draft"
        PENDING_APPROVAL = "pending_approval"
        DEFERRED = "deferred"
        BLOCKED = "blocked"
        DRY_RUN = "dry_run"
        QUEUED = "queued"
        SENDING = "sending"
        SENT = "sent"
        DELIVERED = "delivered"
        UNDELIVERED = "undelivered"
        FAILED = "failed"
        UNKNOWN = "unknown"

    class BlockReason(models.TextChoices):
        HOLD = "hold"
        STOPPED = "stopped"
        NO_CONSENT = "no_consent"
        REVOKED = "revoked"
        QUIET_HOURS = "quiet_hours"
        DAILY_CAP = "daily_cap"
        OTHER_PATH_ACTIVE = "other_path_active"
        REJECTED = "rejected"  # a person rejected the draft
        # The recipient's number is outside the business's countries or of a type
        # that must not be texted or called (premium-rate, landline for SMS…).
        NUMBER_NOT_ALLOWED = "number_not_allowed"
        # An Instagram DM more than 24 hours after the person's last DM to the
        # business: Meta's messaging window is closed, and Meta refuses it too.
        OUTSIDE_WINDOW = "outside_window"
        # Held for a person's approval, and nobody decided before its deadline.
        EXPIRED = "expired"
        # Twilio Lookup says the number cannot take texts (a landline, toll-free).
        CANNOT_TEXT = "cannot_text"
        # Why a deferred message waits (with QUIET_HOURS): a state's cap on
        # marketing texts and calls per 24 hours (agents/outbound/state_rules.py).
        STATE_CAP = "state_cap"

    # A message that left us, or is leaving: the person has it, or will. The
    # daily cap counts these, and so does "a newer message went out".
    WENT_OUT = (
        Status.DRY_RUN,
        Status.QUEUED,
        Status.SENDING,
        Status.SENT,
        Status.DELIVERED,
        Status.UNKNOWN,
    )
    MAX_DISPATCH_ATTEMPTS = MAX_DISPATCH_ATTEMPTS
    MAX_RECONCILE_ATTEMPTS = MAX_RECONCILE_ATTEMPTS

    public_id = PublicIdField(prefix="msg")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="messages")
    contact = models.ForeignKey(Contact, on_delete=models.PROTECT, null=True, blank=True, related_name="messages")
    contact_point = models.ForeignKey(ContactPoint, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    inbound_event = models.ForeignKey(InboundEvent, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    direction = models.CharField(max_length=3, choices=[("in", "in"), ("out", "out")])
    channel = models.CharField(max_length=16, default="sms")
    status = models.CharField(max_length=20, choices=Status.choices)
    # Why the gate blocked the message or, while it is deferred, why it waits.
    block_reason = models.CharField(max_length=20, choices=BlockReason.choices, blank=True)
    deferred_until = models.DateTimeField(null=True, blank=True)
    body = models.TextField(blank=True)
    template_key = models.CharField(max_length=64, blank=True)
    from_number = models.CharField(max_length=64, blank=True)
    to = models.CharField(max_length=254, blank=True)
    provider_sid = models.CharField(max_length=255, null=True, blank=True, unique=True)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    error_code = models.CharField(max_length=32, blank=True)
    attempts = models.PositiveIntegerField(default=0)  # claims by a dispatching worker
    reconcile_attempts = models.PositiveIntegerField(default=0)
    # When the message last became ready for a worker (a backoff's end for a
    # throttled one), and when a worker last claimed it: the sweeps' clocks.
    queued_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    subject = models.CharField(max_length=200, blank=True)
    actor = models.CharField(max_length=150, blank=True, help_text="Who asked for this send")
    # An automated path's send (sequence step, acknowledgement) rather than a
    # person's; the gate applies caps and the one-path rule to these only.
    automated = models.BooleanField(default=False)
    enrollment = models.ForeignKey(
        "crm.Enrollment", on_delete=models.PROTECT, null=True, blank=True, related_name="messages"
    )
    sent_at = models.DateTimeField(null=True, blank=True)
    # An inbound message's intent, how sure the reader was (0 to 1) and which
    # reader said so (`rules`, or `model` when a language model read it).
    intent = models.CharField(max_length=20, blank=True)
    intent_confidence = models.FloatField(null=True, blank=True)
    intent_source = models.CharField(max_length=8, blank=True)
    # An inbound message that reads as an emergency (water, gas, no heat,
    # sparks, "right now"): its conversation goes first in the inbox while it
    # waits (agents.ai.urgency).
    urgent = models.BooleanField(default=False)
    # Why a drafted message waits for a person (a model's draft: the claims
    # the playbook does not back, the facts it relies on), shown in the thread.
    draft_reason = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["idempotency_key"], name="crm_message_unique_idempotency_key"),
            models.CheckConstraint(
                condition=models.Q(direction="in") | models.Q(idempotency_key__isnull=False),
                name="crm_message_outbound_has_idempotency_key",
            ),
            models.CheckConstraint(condition=models.Q(status__in=MESSAGE_STATUSES), name="crm_message_status_valid"),
            models.CheckConstraint(
                condition=models.Q(block_reason="") | models.Q(block_reason__in=BLOCK_REASONS),
                name="crm_message_block_reason_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(attempts__lte=MAX_DISPATCH_ATTEMPTS), name="crm_message_attempts_capped"
            ),
            models.CheckConstraint(
                condition=models.Q(intent="") | models.Q(intent__in=INTENTS), name="crm_message_intent_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(intent_confidence__isnull=True)
                | models.Q(intent_confidence__gte=0, intent_confidence__lte=1),
                name="crm_message_intent_confidence_range",
            ),
            models.CheckConstraint(
                condition=models.Q(reconcile_attempts__lte=MAX_RECONCILE_ATTEMPTS),
                name="crm_message_reconcile_attempts_capped",
            ),
        ]
        indexes = [
            models.Index(fields=["lead", "created_at"], name="crm_message_lead_idx"),
            # "Anything in (or out) since?": the brief's fresh replies, the
            # trace's stop rule, Pipeline QA's undelivered sends.
            models.Index(fields=["lead", "direction", "created_at"], name="crm_message_lead_direction_idx"),
            # The exception report's blocked sends by reason, last 7 days.
            models.Index(
                fields=["business", "created_at"], condition=models.Q(status="blocked"), name="crm_message_blocked_idx"
            ),
            # The message sweep's work: rows in flight between the gate and the provider.
            models.Index(
                fields=["status", "created_at"],
                condition=models.Q(status__in=["queued", "sending", "unknown"]),
                name="crm_message_in_flight_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class Call(models.Model):
    public_id = PublicIdField(prefix="call")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="calls")
    contact = models.ForeignKey(Contact, on_delete=models.PROTECT, null=True, blank=True, related_name="calls")
    direction = models.CharField(max_length=3, choices=[("in", "in"), ("out", "out")])
    # ringing, in-progress, completed, busy, no-answer, failed, canceled (Twilio's)
    status = models.CharField(max_length=20)
    from_number = models.CharField(max_length=64, blank=True)
    to = models.CharField(max_length=64, blank=True)
    provider_sid = models.CharField(max_length=255, null=True, blank=True, unique=True)
    duration_seconds = models.PositiveIntegerField(null=True, blank=True)
    recording_url = models.URLField(max_length=1000, blank=True)
    transcript = models.TextField(blank=True)
    score = models.JSONField(default=dict, blank=True)
    # Call scoring: explainable flags and the review queue ("", pending, reviewed).
    flags = models.JSONField(default=list, blank=True)
    review_status = models.CharField(max_length=16, blank=True)
    # Outbound voice follow-up: what happened (connected, callback_task,
    # opted_out, voicemail, no_answer, machine_skipped) and who answered.
    outcome = models.CharField(max_length=32, blank=True)
    answered_by = models.CharField(max_length=32, blank=True)
    enrollment = models.ForeignKey(
        "crm.Enrollment", on_delete=models.PROTECT, null=True, blank=True, related_name="calls"
    )
    # A missed inbound call: the call-back next action it was added to (a
    # person's repeat calls share one, which counts them).
    callback_task = models.ForeignKey(
        Task, on_delete=models.PROTECT, null=True, blank=True, related_name="missed_calls"
    )
    started_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["started_at", "id"]

    def __str__(self) -> str:
        return self.public_id


class Conversation(models.Model):
    """One lead's conversation at a glance, for the setters' inbox: the last
    message, the last one in, and since when the person has been waiting for
    a person's answer.

    Every lead has one, made with the lead by a trigger on crm_lead, and
    kept by a trigger on crm_message (crm.db_triggers), not by the code that
    writes messages: every message, however it is written, moves
    it in the same statement, so it cannot disagree with the messages and
    costs the sends no round trip. Concurrent messages of one lead meet in
    one upsert (the newest wins by time). Services change only what no
    message says: a conversation settled without a reply (`crm.services.
    conversations`).
    """

    lead = models.OneToOneField(Lead, on_delete=models.CASCADE, primary_key=True, related_name="conversation")
    business = models.ForeignKey(Business, on_delete=models.CASCADE, related_name="+")
    # No database constraint: the trigger keeps it, and rebuilds it when a
    # message moves to another lead (a merge).
    last_message = models.ForeignKey(
        Message, on_delete=models.DO_NOTHING, db_constraint=False, null=True, related_name="+"
    )
    # None until the first message; the channel is then that message's.
    last_message_at = models.DateTimeField(null=True)
    last_channel = models.CharField(max_length=16, blank=True, default="")
    # The lead's arrival, then its newest message: the inbox's order for
    # conversations nothing else puts first.
    last_activity_at = models.DateTimeField()
    last_inbound_at = models.DateTimeField(null=True)
    # What the person's last message asks for (its `intent`): the inbox
    # shows it and can filter and sort by it.
    last_intent = models.CharField(max_length=20, blank=True, default="")
    # Who waits on us, all four kept by one rule in the database from the
    # messages (crm.db_triggers, `leadops_conversation_waiting`): the first
    # message in that no person's answer has reached yet (None: nothing
    # waits on us); the first of those read as urgent; since when a person's
    # answer is held for a manager's approval (the person still waits); and
    # the person's answer that did not reach them (rejected, blocked, failed,
    # undelivered), whose status says why they wait again.
    awaiting_since = models.DateTimeField(null=True)
    urgent_since = models.DateTimeField(null=True)
    held_since = models.DateTimeField(null=True)
    missed_answer = models.ForeignKey(
        Message, on_delete=models.DO_NOTHING, db_constraint=False, null=True, related_name="+"
    )
    # Until when the conversation was settled without a reply (a STOP, a
    # person's "done"): what came in before then waits on no one.
    settled_at = models.DateTimeField(null=True)

    class Meta:
        indexes = [
            # The inbox's parts read in order (crm.inbox): who has waited
            # longest for a person, and the rest by their last activity. No
            # business column first: the inbox filters the lead (its business,
            # or its owner for a setter), and a prefix the query does not pin
            # would take the order away.
            models.Index(
                fields=["awaiting_since"],
                condition=models.Q(awaiting_since__isnull=False),
                name="crm_conversation_awaiting_idx",
            ),
            models.Index(
                fields=["urgent_since"],
                condition=models.Q(urgent_since__isnull=False),
                name="crm_conversation_urgent_idx",
            ),
            models.Index(
                fields=["awaiting_since"],
                condition=models.Q(held_since__isnull=False),
                name="crm_conversation_held_idx",
            ),
            models.Index(fields=["last_activity_at"], name="crm_conversation_recent_idx"),
        ]

    def __str__(self) -> str:
        return f"conversation of lead {self.lead_id}"


class ConversationRead(models.Model):
    """How far one user has read one lead's conversation: their unread count
    is the inbound messages after `read_at`. Per user, so a manager looking
    in leaves the owner's unread count as it was."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.CASCADE, related_name="+")
    read_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "lead"], name="crm_conversationread_unique_user_lead")]

    def __str__(self) -> str:
        return f"{self.user_id} read lead {self.lead_id} to {self.read_at:%Y-%m-%d %H:%M}"


class Note(models.Model):
    """A note on a lead, shown in its conversation; never sent.

    A person's note (`note`), or a decision on what someone proposed
    (`decision`: a held reply rejected, approved with edits, or left to
    expire), written by the decision itself and addressed to the person
    whose proposal it was: until they read the conversation it counts as
    unread for them (crm.inbox), as a message in does. crm cannot read the
    approval queue, so the decision leaves this record where crm counts.
    """

    class Kind(models.TextChoices):
        NOTE = "note"
        DECISION = "decision"

    public_id = PublicIdField(prefix="note")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, related_name="notes")
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.NOTE)
    author = models.CharField(max_length=150)
    # Whom a decision is for (None: nobody else to tell, e.g. the proposer decided it).
    addressee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    body = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(kind__in=["note", "decision"]), name="crm_note_kind_valid"),
            models.CheckConstraint(
                condition=models.Q(addressee__isnull=True) | models.Q(kind="decision"),
                name="crm_note_addressee_only_on_decision",
            ),
        ]
        indexes = [
            models.Index(fields=["lead", "created_at"], name="crm_note_lead_idx"),
            # The unread counts' decisions for one user, polled every few seconds.
            models.Index(
                fields=["addressee", "created_at"],
                condition=models.Q(kind="decision", addressee__isnull=False),
                name="crm_note_decision_for_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id
