from __future__ import annotations

import re
from typing import Any

from django.db import models

from crm.ids import PublicIdField
from crm.models.base import Business
from crm.models.contacts import Contact, InboundEvent, Source
from crm.models.team import ServiceLine, TeamMember


class Stage(models.TextChoices):
    NEW = "new"
    ASSIGNED = "assigned"
    CONTACTED = "contacted"
    ENGAGED = "engaged"
    QUALIFIED = "qualified"
    BOOKED = "booked"
    NO_SHOW = "no_show"
    APPOINTMENT_HELD = "appointment_held"
    ESTIMATE_SENT = "estimate_sent"
    WON = "won"
    LOST = "lost"
    DISQUALIFIED = "disqualified"
    UNRESPONSIVE = "unresponsive"


# A lead in one of these stages is closed: it no longer counts as the open
# lead for its (contact, service line), so a new need can open a new lead.
CLOSED_STAGES = (Stage.WON, Stage.LOST, Stage.DISQUALIFIED, Stage.UNRESPONSIVE)
# Stages in which the first-response clock runs: once a visit is booked
# (by a setter or by the person on Calendly) someone has reached them.
BEFORE_BOOKING_STAGES = (Stage.NEW, Stage.ASSIGNED, Stage.CONTACTED, Stage.ENGAGED, Stage.QUALIFIED)


class LeadException(models.TextChoices):
    MISSING_IDENTITY = "missing_identity"
    INVALID_PHONE = "invalid_phone"
    TEST_LEAD = "test_lead"
    OUT_OF_AREA = "out_of_area"
    EMERGENCY = "emergency"
    COMMERCIAL = "commercial"
    WARRANTY = "warranty"
    LICENSED_DIAGNOSIS = "licensed_diagnosis"
    NO_ELIGIBLE_OWNER = "no_eligible_owner"
    SLA_BREACHED = "sla_breached"
    MERGE_CONFLICT = "merge_conflict"
    COMPLAINT = "complaint"
    NUMBER_NOT_ALLOWED = "number_not_allowed"


class Lead(models.Model):
    """One opportunity: a person and a need. Stage, owner and next action are
    written only by `crm.services.lead_sync` (the CRM Sync role)."""

    public_id = PublicIdField(prefix="lead")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="leads")
    contact = models.ForeignKey(Contact, on_delete=models.PROTECT, related_name="leads")
    service_line = models.ForeignKey(ServiceLine, on_delete=models.PROTECT, null=True, blank=True, related_name="leads")
    stage = models.CharField(max_length=20, choices=Stage.choices, default=Stage.NEW)
    owner = models.ForeignKey(TeamMember, on_delete=models.PROTECT, null=True, blank=True, related_name="leads")
    next_action = models.CharField(max_length=300, blank=True)
    next_action_due_at = models.DateTimeField(null=True, blank=True)
    sla_due_at = models.DateTimeField(null=True, blank=True)
    hold = models.BooleanField(default=False)
    hold_reason = models.CharField(max_length=300, blank=True)
    exceptions = models.JSONField(default=list, blank=True)
    request_text = models.TextField(blank=True)
    lost_reason = models.CharField(max_length=300, blank=True)
    is_test = models.BooleanField(default=False)
    # When the automated acknowledgement went out, and — separately — when a
    # person first contacted the lead (speed to lead).
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    first_response_at = models.DateTimeField(null=True, blank=True)
    # Speed to lead: first human contact minus arrival, kept for reporting.
    speed_to_lead_seconds = models.PositiveIntegerField(null=True, blank=True)
    sla_breached_at = models.DateTimeField(null=True, blank=True)
    # Fit: the facts the qualifier gathered (postal code, flags, matched
    # keywords), the fit score and the reason for each point.
    facts = models.JSONField(default=dict, blank=True)
    fit_score = models.IntegerField(null=True, blank=True)
    fit_reasons = models.JSONField(default=list, blank=True)
    # Why routing could not pick an owner (the manager queue shows it).
    routing_reason = models.CharField(max_length=300, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # Set when a contact merge made this lead one with another open lead of
    # the same person and need: this one was closed and its conversation,
    # touches, tasks and money records moved there; its history stays here.
    merged_into = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["contact", "service_line"],
                condition=~models.Q(stage__in=CLOSED_STAGES),
                # A lead without a service line yet is still "the" open lead.
                nulls_distinct=False,
                name="crm_lead_one_open_per_contact_service",
            ),
            models.CheckConstraint(condition=models.Q(stage__in=Stage.values), name="crm_lead_stage_valid"),
            models.CheckConstraint(
                condition=models.Q(next_action="") | models.Q(next_action_due_at__isnull=False),
                name="crm_lead_next_action_has_due_time",
            ),
        ]
        indexes = [
            models.Index(fields=["business", "stage"], name="crm_lead_stage_idx"),
            models.Index(fields=["owner", "stage"], name="crm_lead_owner_idx"),
            # Reports: the funnel and the leak audit select leads by arrival.
            models.Index(fields=["business", "created_at"], name="crm_lead_created_idx"),
            # The inbox's second and third parts, read in order: leads nobody
            # has reached yet by their first-response deadline, and leads by
            # their next action's due time (crm.inbox).
            models.Index(
                fields=["business", "sla_due_at"],
                condition=models.Q(first_response_at__isnull=True, sla_due_at__isnull=False),
                name="crm_lead_first_response_idx",
            ),
            models.Index(
                fields=["business", "next_action_due_at"],
                condition=models.Q(next_action_due_at__isnull=False),
                name="crm_lead_next_action_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id

    # Changes CRM Sync made to this object that reach the row when its unit
    # of work ends (crm.services.lead_sync.lead_current); None otherwise.
    _unwritten: set[str] | None = None

    def refresh_from_db(self, using: str | None = None, fields: Any = None, from_queryset: Any = None) -> None:
        # Reading the row over changes not written yet would lose them.
        if self._unwritten:
            raise RuntimeError(
                f"{self.public_id} has changes not written yet ({', '.join(sorted(self._unwritten))}): "
                "use crm.services.lead_sync.lead_refresh"
            )
        super().refresh_from_db(using=using, fields=fields, from_queryset=from_queryset)

    @property
    def is_open(self) -> bool:
        return self.stage not in CLOSED_STAGES


class LeadTouch(models.Model):
    """One source touch: where this lead (again) came from."""

    public_id = PublicIdField(prefix="tch")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, related_name="touches")
    source = models.ForeignKey(Source, on_delete=models.PROTECT, null=True, blank=True, related_name="touches")
    inbound_event = models.ForeignKey(
        InboundEvent, on_delete=models.PROTECT, null=True, blank=True, related_name="touches"
    )
    channel = models.CharField(max_length=32, help_text="form, call, sms, dm, manual…")
    provider = models.CharField(max_length=16)
    campaign_id = models.CharField(max_length=100, blank=True)
    adgroup_id = models.CharField(max_length=100, blank=True)
    ad_id = models.CharField(max_length=100, blank=True)
    form_id = models.CharField(max_length=100, blank=True)
    gclid = models.CharField(max_length=300, blank=True)
    fbclid = models.CharField(max_length=300, blank=True)
    # Google's click ids for iOS app and web-to-app clicks, where there is no gclid.
    gbraid = models.CharField(max_length=300, blank=True)
    wbraid = models.CharField(max_length=300, blank=True)
    # Meta Lead Ads: the lead's id at Meta (its leadgen_id), what Meta's
    # Conversions API for CRM matches the lead's later stages on.
    meta_lead_id = models.CharField(max_length=32, blank=True)
    # The marketplace thread the touch came in on (a Thumbtack negotiation, a
    # Yelp lead): where a reply to the person goes, and which lead a later
    # message in that thread belongs to.
    thread_id = models.CharField(max_length=100, blank=True)
    utm = models.JSONField(default=dict, blank=True)
    landing_page = models.URLField(max_length=1000, blank=True)
    answers = models.JSONField(default=dict, blank=True)
    received_at = models.DateTimeField()
    # The touch named no service line (a form answer without service words):
    # the identity resolver may move it to the need it belongs to when a touch
    # made before it arrives after it. Older rows are False and never move.
    line_unknown = models.BooleanField(default=False)

    class Meta:
        verbose_name_plural = "lead touches"
        ordering = ["received_at", "id"]
        indexes = [
            models.Index(fields=["business", "campaign_id"], name="crm_leadtouch_campaign_idx"),
            # A lead's first (or latest) touch, read per lead by the reports:
            # the top of this index, no sort.
            models.Index(fields=["lead", "received_at", "id"], name="crm_leadtouch_first_idx"),
            # A marketplace message finds its thread's lead.
            models.Index(
                fields=["business", "provider", "thread_id"],
                condition=~models.Q(thread_id=""),
                name="crm_leadtouch_thread_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class Task(models.Model):
    """A human action with an owner and a due time."""

    class Status(models.TextChoices):
        OPEN = "open"
        DONE = "done"
        CANCELED = "canceled"

    class Kind(models.TextChoices):
        """What a person is asked for; each role opens its own kind."""

        NEXT_ACTION = "next_action", "next action"  # the lead's one next action (at most one open)
        EXCEPTION = "exception", "exception"  # a step stopped: something only a person can supply
        FOLLOW_UP = "follow_up", "follow-up"  # a message or call a path could not make itself
        CALL_BACK = "call_back", "call back"  # a missed call, or a follow-up call that needs a person
        TAKE_OVER = "take_over", "take over"  # the person replied: the conversation is a person's now
        INVOICE = "invoice", "invoice"  # a completed job to invoice
        PAYMENT = "payment", "collect payment"  # an issued invoice to collect

    public_id = PublicIdField(prefix="task")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="tasks")
    owner = models.ForeignKey(TeamMember, on_delete=models.PROTECT, null=True, blank=True, related_name="tasks")
    kind = models.CharField(max_length=32, choices=Kind.choices, default=Kind.NEXT_ACTION)
    title = models.CharField(max_length=300)
    due_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    outcome = models.CharField(max_length=300, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    completed_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["due_at"]
        constraints = [
            # Invariant 3: one open next action per lead.
            models.UniqueConstraint(
                fields=["lead"],
                condition=models.Q(status="open", kind="next_action"),
                name="crm_task_one_open_next_action",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["open", "done", "canceled"]), name="crm_task_status_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["owner", "status", "due_at"], name="crm_task_owner_idx"),
            # The brief's overdue tasks of a business.
            models.Index(
                fields=["business", "due_at"], condition=models.Q(status="open"), name="crm_task_open_due_idx"
            ),
        ]

    def __str__(self) -> str:
        return self.title


class Timer(models.Model):
    """A per-lead clock (SLA check, sequence step, reminder): a row with a due
    time, claimed by `run_timers` with a conditional update."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        CANCELED = "canceled"
        FAILED = "failed"

    public_id = PublicIdField(prefix="tmr")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="timers")
    kind = models.CharField(max_length=64)
    payload = models.JSONField(default=dict, blank=True)
    due_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    claimed_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    # Optional: a timer with a key exists at most once (e.g. "sla:lead_…").
    dedupe_key = models.CharField(max_length=200, null=True, blank=True, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["due_at"]
        indexes = [
            # What run_timers claims: pending, or running (a stale claim is
            # claimable again). The claim's `pending OR stale running` filter
            # can use this index and not a pending-only one, so the claim reads
            # the claimable rows instead of every timer ever run.
            models.Index(
                fields=["due_at"], condition=models.Q(status__in=["pending", "running"]), name="crm_timer_claimable_idx"
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class Sequence(models.Model):
    """A follow-up path (no reply, no show, open estimate, reminders)."""

    public_id = PublicIdField(prefix="seq")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="sequences")
    key = models.SlugField(max_length=64)

    class Trigger(models.TextChoices):
        """What starts the path (and the stages it runs in: agents.followup.sequences.engine)."""

        NO_REPLY = "no_reply", "no reply to the first response"
        NO_SHOW = "no_show", "a no-show"
        OPEN_ESTIMATE = "open_estimate", "an estimate left open"
        APPOINTMENT = "appointment", "an appointment booked (reminders)"

    class StepChannel(models.TextChoices):
        """How a step reaches the person (a task step asks a person to)."""

        SMS = "sms"
        EMAIL = "email"
        VOICE = "voice"
        TASK = "task"

    class StepClock(models.TextChoices):
        """How a step's delay counts: plain time, or only the business's open hours and days."""

        ABSOLUTE = "absolute"
        BUSINESS = "business"

    # A step's delay: a whole number of minutes, hours or days ("15m", "2h", "1d").
    STEP_DELAY = re.compile(r"^(\d+)([mhd])$")
    STEP_DELAY_MINUTES = {"m": 1, "h": 60, "d": 24 * 60}

    trigger = models.CharField(max_length=32, choices=Trigger.choices)
    # [{"after": "15m", "channel": "sms", "template": "nudge_sms"}, …]
    steps = models.JSONField(default=list)
    # Lower runs first: a higher-priority path replaces a lower one for the
    # contact; a lower one waits behind it.
    priority = models.PositiveIntegerField(default=100)
    # Per-sequence goals: reaching one of these stages completes the path.
    goal_stages = models.JSONField(default=list, blank=True)
    is_active = models.BooleanField(default=True)
    # Paused by the SMS health check (agents/reporting/sms_health.py) when its
    # texts drive opt-outs or carrier filtering past the business's limits:
    # its text steps wait until a manager resumes it. Not in the business
    # file, so loading the file again never lifts a pause.
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["business", "key"], name="crm_sequence_unique_key")]

    def __str__(self) -> str:
        return self.key

    @classmethod
    def step_delay(cls, after: str) -> tuple[int, str] | None:
        """A step's `after` read as (amount, unit), or None when it is not one."""
        match = cls.STEP_DELAY.match(after)
        return (int(match.group(1)), match.group(2)) if match else None


class Enrollment(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        WAITING = "waiting"
        STOPPED = "stopped"
        COMPLETED = "completed"

    public_id = PublicIdField(prefix="enr")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, related_name="enrollments")
    contact = models.ForeignKey(Contact, on_delete=models.PROTECT, related_name="enrollments")
    sequence = models.ForeignKey(Sequence, on_delete=models.PROTECT, related_name="enrollments")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    stop_reason = models.CharField(max_length=64, blank=True)
    next_step_index = models.PositiveIntegerField(default=0)
    next_step_due_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # Invariant 5: one automated path per contact at a time.
            models.UniqueConstraint(
                fields=["contact"], condition=models.Q(status="active"), name="crm_enrollment_one_active_per_contact"
            ),
        ]
        indexes = [
            # Pipeline QA's stuck enrollments: active ones by their step's due time.
            models.Index(
                fields=["next_step_due_at"], condition=models.Q(status="active"), name="crm_enrollment_active_due_idx"
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class MessageTemplate(models.Model):
    """An approved playbook text. Automated sends use only approved templates."""

    public_id = PublicIdField(prefix="tpl")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="templates")
    key = models.SlugField(max_length=64)
    channel = models.CharField(max_length=8)
    subject = models.CharField(max_length=200, blank=True)
    body = models.TextField()
    approved = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["business", "key"], name="crm_messagetemplate_unique_key")]

    def __str__(self) -> str:
        return self.key


class ExceptionItem(models.Model):
    """Something a person must look at (pipeline QA, routing, matching), with an
    owner. At most one open item per kind and subject, so periodic checks that
    find the same problem again do not pile up duplicates."""

    class Status(models.TextChoices):
        OPEN = "open"
        RESOLVED = "resolved"

    public_id = PublicIdField(prefix="exc")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="exception_items")
    owner = models.ForeignKey(TeamMember, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    kind = models.CharField(max_length=40)
    # The public id of the record the item is about (lead, message, payment, …).
    subject = models.CharField(max_length=64)
    detail = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    detected_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-detected_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["business", "kind", "subject"],
                condition=models.Q(status="open"),
                name="crm_exceptionitem_one_open_per_subject",
            ),
        ]
        indexes = [
            models.Index(fields=["business", "status", "kind"], name="crm_exceptionitem_queue_idx"),
            # The exception report's page: open items, newest first.
            models.Index(
                fields=["-detected_at", "-id"], condition=models.Q(status="open"), name="crm_exceptionitem_open_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject}"
