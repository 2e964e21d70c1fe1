"""Sync: the systems of record a contractor already runs (a field-service
app such as Jobber, later Housecall Pro and calendars), kept in step with
ours.

A `SyncConnection` is one business's link to one provider: its OAuth tokens
(encrypted at rest, never shown back), how far each stream of theirs has
been read, and how the link is doing. A `SyncLink` pairs one record of ours
with its twin over there, with the version of theirs and the digest of ours
as they were at the last sync (which is how an edit on both sides is told
apart from an edit on one). A `SyncChange` is one change to carry across —
a push of ours or a pull of theirs — and is the work item itself: written in
the transaction of what causes it, claimed, tried, backed off, finished.
"""

from __future__ import annotations

from django.db import models

from crm.fields import EncryptedTextField
from crm.ids import PublicIdField
from crm.models.base import Business
from crm.models.leads import Lead
from crm.models.team import TeamMember


class SyncConnection(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active"
        # The provider refused our tokens (revoked, refresh refused): work
        # waits, and a person connects again.
        REAUTHORIZE = "reauthorize"
        # The contractor removed our app on their side: nothing more is sent.
        DISCONNECTED = "disconnected"

    public_id = PublicIdField(prefix="sync")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="sync_connections")
    provider = models.CharField(max_length=16)
    # A calendar is one person's: its busy times take that member off the
    # slots, and the visits assigned to them go into it. Empty: the business's.
    member = models.ForeignKey(
        TeamMember, on_delete=models.PROTECT, null=True, blank=True, related_name="calendar_connections"
    )
    # Their account's id: webhooks name it, and it finds the business.
    account_id = models.CharField(max_length=200, blank=True)
    account_name = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    access_token = EncryptedTextField(blank=True)
    refresh_token = EncryptedTextField(blank=True)
    token_expires_at = models.DateTimeField(null=True, blank=True)
    # The secret that signs the account's webhooks when it is the
    # business's own (Housecall Pro's signing secret, pasted with the key).
    webhook_secret = EncryptedTextField(blank=True)
    # A refresh in flight, claimed with a conditional UPDATE: with refresh
    # token rotation the old token dies on first use, so two workers must
    # never refresh at once (the second would be refused and read it as a
    # revocation).
    refresh_claimed_at = models.DateTimeField(null=True, blank=True)
    # How far each stream has been read: {stream: {"since": their time, "after": page cursor}}.
    cursors = models.JSONField(default=dict, blank=True)
    reconciled_at = models.DateTimeField(null=True, blank=True)
    # The provider's rate limit: nothing is asked of it before then.
    throttled_until = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    connected_by = models.CharField(max_length=150, blank=True)
    # A calendar's busy blocks ([[start, end], …] as ISO texts, UTC) over
    # the days slots are offered, as read at `busy_checked_at`.
    busy = models.JSONField(default=list, blank=True)
    busy_checked_at = models.DateTimeField(null=True, blank=True)
    # A calendar's push channel (Google's watch channel, Microsoft's
    # subscription): its id names the connection in a notification, and its
    # token (Google's channel token, Microsoft's clientState) proves it is ours.
    channel_id = models.CharField(max_length=200, blank=True)
    channel_token = EncryptedTextField(blank=True)
    channel_resource_id = models.CharField(max_length=200, blank=True)
    channel_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["business", "provider"]
        constraints = [
            models.UniqueConstraint(
                fields=["business", "provider"],
                condition=models.Q(member__isnull=True),
                name="crm_syncconnection_one_per_provider",
            ),
            models.UniqueConstraint(
                fields=["member", "provider"],
                condition=models.Q(member__isnull=False),
                name="crm_syncconnection_one_calendar_per_member",
            ),
            models.UniqueConstraint(
                fields=["channel_id"], condition=~models.Q(channel_id=""), name="crm_syncconnection_one_per_channel"
            ),
            # An account's webhooks find one business.
            models.UniqueConstraint(
                fields=["provider", "account_id"],
                condition=~models.Q(account_id=""),
                name="crm_syncconnection_one_business_per_account",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["active", "reauthorize", "disconnected"]),
                name="crm_syncconnection_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider} ({self.public_id})"


class SyncLink(models.Model):
    """One record of ours (`record`, its public id) and its twin over there
    (`external_id`), by kind: client, request, estimate, job, visit,
    invoice, payment. A link without an external id is a push of ours in
    flight (`claimed_at`); one without a record is theirs alone (a client of
    theirs no contact of ours matches)."""

    connection = models.ForeignKey(SyncConnection, on_delete=models.PROTECT, related_name="links")
    kind = models.CharField(max_length=16)
    external_id = models.CharField(max_length=200, null=True, blank=True)
    record = models.CharField(max_length=40, blank=True)
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # Their version as we last saw it (their updatedAt).
    remote_version = models.CharField(max_length=64, blank=True)
    # sha256 of our mapped fields as they were when we last synced.
    local_digest = models.CharField(max_length=64, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    synced_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["connection", "kind", "external_id"], name="crm_synclink_one_per_external_id"
            ),
            # One twin per record of ours: two pushes racing for one person
            # meet here, and the second waits for the first's client.
            models.UniqueConstraint(
                fields=["connection", "kind", "record"],
                condition=~models.Q(record=""),
                name="crm_synclink_one_per_record",
            ),
            models.CheckConstraint(
                condition=models.Q(external_id__isnull=False) | models.Q(claimed_at__isnull=False),
                name="crm_synclink_external_id_or_claimed",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.record or '-'} = {self.external_id or '(pushing)'}"


class SyncChange(models.Model):
    class Direction(models.TextChoices):
        PUSH = "push"
        PULL = "pull"

    class Status(models.TextChoices):
        PENDING = "pending"  # to be tried at next_attempt_at
        WORKING = "working"  # claimed by a worker
        DONE = "done"
        FAILED = "failed"  # refused for good, or out of tries: a person looks

    public_id = PublicIdField(prefix="sch")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    connection = models.ForeignKey(SyncConnection, on_delete=models.PROTECT, related_name="changes")
    direction = models.CharField(max_length=8, choices=Direction.choices)
    # push: what of ours changed ("booking"); pull: the kind of theirs to read.
    kind = models.CharField(max_length=16)
    record = models.CharField(max_length=40, blank=True)  # push: our record's public id
    external_id = models.CharField(max_length=200, blank=True)  # pull: theirs
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # A push's idempotency key (`<kind>:<record>`): one push per change of
    # ours, whatever retries or replays the transaction that made it.
    key = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)  # tries that failed for a passing reason
    next_attempt_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=300, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField()
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["connection", "key"],
                condition=models.Q(direction="push"),
                name="crm_syncchange_one_push_per_key",
            ),
            # Pulls of one record coalesce while they wait: the pull reads
            # their record as it is then, whatever number of webhooks said so.
            models.UniqueConstraint(
                fields=["connection", "kind", "external_id"],
                condition=models.Q(direction="pull", status="pending"),
                name="crm_syncchange_one_waiting_pull",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["pending", "working", "done", "failed"]),
                name="crm_syncchange_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(direction__in=["push", "pull"]), name="crm_syncchange_direction_valid"
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"], condition=models.Q(status="pending"), name="crm_syncchange_due_idx"
            ),
            models.Index(fields=["claimed_at"], condition=models.Q(status="working"), name="crm_syncchange_fly_idx"),
            models.Index(fields=["connection", "status"], name="crm_syncchange_status_idx"),
        ]

    def __str__(self) -> str:
        return self.public_id
