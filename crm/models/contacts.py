from __future__ import annotations

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import RangeOperators
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models.fields.json import KeyTextTransform

from crm.fields import EncryptedTextField
from crm.ids import PublicIdField
from crm.models.base import Business


class Provider(models.TextChoices):
    GOOGLE_ADS = "google_ads", "Google Ads"
    META = "meta", "Meta lead ads"
    INSTAGRAM = "instagram", "Instagram"
    WEBSITE = "website", "Website form"
    HOSTED_FORM = "hosted_form", "Hosted form"
    TYPEFORM = "typeform", "Typeform"
    TWILIO = "twilio", "Twilio"
    CALENDLY = "calendly", "Calendly"
    STRIPE = "stripe", "Stripe"
    MANUAL = "manual", "Entered by a person"
    # Marketplaces and call tracking: leads the contractor pays for elsewhere.
    GOOGLE_LSA = "google_lsa", "Google Local Services"
    THUMBTACK = "thumbtack", "Thumbtack"
    YELP = "yelp", "Yelp"
    ANGI = "angi", "Angi"
    CALLRAIL = "callrail", "CallRail"
    # Systems of record a contractor runs, kept in step (crm.models.sync).
    JOBBER = "jobber", "Jobber"
    # A team member's calendar: its changes notify us (crm.models.sync).
    GOOGLE_CALENDAR = "google_calendar", "Google Calendar"
    MICROSOFT_365 = "microsoft365", "Microsoft 365 calendar"


# The settings that name a provider's account, line, page or form. An
# inbound event that names one is filed in the business whose source holds
# it, so a business may never hold another's (a Twilio number, a Meta page):
# one database constraint per setting, over every source, switched off or
# not. Sources of one business may share one (several numbers on one
# Twilio account). Values compare as text: a hand-edited page id of
# 100000000000001 and "100000000000001" are the same page.
PROVIDER_IDS: dict[str, tuple[str, ...]] = {
    Provider.TWILIO: ("phone_number", "account_sid", "messaging_service_sid"),
    Provider.META: ("page_id",),
    Provider.INSTAGRAM: ("account_id",),
    Provider.CALENDLY: ("organization",),
    Provider.TYPEFORM: ("form_id",),
    Provider.STRIPE: ("account_id",),
    Provider.GOOGLE_ADS: ("customer_id",),
    Provider.GOOGLE_LSA: ("customer_id",),
    Provider.THUMBTACK: ("business_id",),
    Provider.YELP: ("business_id",),
    Provider.CALLRAIL: ("company_id",),
}


def _one_business_per_id(provider: str, key: str) -> ExclusionConstraint:
    # btree_gist gives GiST its = on text and <> on integers (migration 0037).
    return ExclusionConstraint(
        name=f"crm_source_{provider}_{key}_one_business",
        expressions=[(KeyTextTransform(key, "config"), RangeOperators.EQUAL), ("business", RangeOperators.NOT_EQUAL)],
        condition=models.Q(provider=provider),
        # Names the setting, never the business that holds it.
        violation_error_message=f"This {key} is already in use by another business.",
    )


class Source(models.Model):
    """A configured entry point: one webhook URL key, its secret and settings."""

    public_id = PublicIdField(prefix="src")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="sources")
    # The key appears in webhook URLs, which carry no business: unique overall.
    key = models.SlugField(max_length=64, unique=True)
    provider = models.CharField(max_length=16, choices=Provider.choices)
    # Encrypted at rest and never shown: the webhook's shared secret or signing key.
    secret = EncryptedTextField(blank=True)
    # Meta sources: the page access token the Graph API reads leads with; Instagram
    # sources: the token DM replies are sent with (encrypted, never shown).
    page_token = EncryptedTextField(blank=True)
    # Provider settings, no secrets: page_id, account_id, phone_number, forward_to…
    config = models.JSONField(default=dict, blank=True)
    # This source's first-response standard; empty uses the business's.
    first_response_minutes = models.PositiveIntegerField(null=True, blank=True)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["business", "key"]
        constraints = [
            models.CheckConstraint(condition=models.Q(provider__in=Provider.values), name="crm_source_provider_valid"),
            *(_one_business_per_id(provider, key) for provider, keys in PROVIDER_IDS.items() for key in keys),
        ]

    def __str__(self) -> str:
        return self.key


class Contact(models.Model):
    """One person. Their phones, emails and handles are ContactPoints."""

    public_id = PublicIdField(prefix="cont")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="contacts")
    first_name = models.CharField(max_length=100, blank=True)
    last_name = models.CharField(max_length=100, blank=True)
    postal_code = models.CharField(max_length=16, blank=True)
    address = models.CharField(max_length=300, blank=True)
    notes = models.TextField(blank=True)
    # Set when a person confirms two records are the same person.
    merged_into = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    # Every automated path stops for this person until someone resumes it
    # (free text that reads as a revocation, a complaint).
    automation_paused = models.BooleanField(default=False)
    automation_paused_reason = models.CharField(max_length=300, blank=True)
    # One sending number per person (invariant 5) when no Messaging Service
    # keeps the sender sticky for us.
    sticky_from_number = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["business", "last_name", "first_name"], name="crm_contact_name_idx"),
            # Search by a part of a name (ILIKE '%ros%'): trigram indexes.
            GinIndex(fields=["first_name"], opclasses=["gin_trgm_ops"], name="crm_contact_first_name_trgm"),
            GinIndex(fields=["last_name"], opclasses=["gin_trgm_ops"], name="crm_contact_last_name_trgm"),
        ]

    def __str__(self) -> str:
        return self.name or self.public_id

    @property
    def name(self) -> str:
        return " ".join(part for part in (self.first_name, self.last_name) if part)


class ContactPointKind(models.TextChoices):
    PHONE = "phone"
    EMAIL = "email"
    INSTAGRAM = "instagram"
    MESSENGER = "messenger"
    # A marketplace's own thread with the customer (its id there): replies go
    # back inside the marketplace, where the customer asked.
    THUMBTACK = "thumbtack"
    YELP = "yelp"


class ContactPoint(models.Model):
    """A way to reach a contact, stored normalized (E.164, lower-cased email)."""

    public_id = PublicIdField(prefix="cp")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    contact = models.ForeignKey(Contact, on_delete=models.PROTECT, related_name="points")
    kind = models.CharField(max_length=16, choices=ContactPointKind.choices)
    value = models.CharField(max_length=254, help_text="Normalized: E.164 phone, lower-cased email, provider id")
    raw_value = models.CharField(max_length=254, blank=True, help_text="As typed, kept when it could not be parsed")
    is_valid = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["kind", "created_at"]
        constraints = [
            # Only a normalized value identifies a person: two people who both
            # typed "call me" are not one contact.
            models.UniqueConstraint(
                fields=["business", "kind", "value"],
                condition=models.Q(is_valid=True),
                name="crm_contactpoint_unique_value",
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=ContactPointKind.values), name="crm_contactpoint_kind_valid"
            ),
            models.CheckConstraint(condition=~models.Q(value=""), name="crm_contactpoint_value_nonempty"),
        ]
        # Search by a phone or an email across the user's businesses (the
        # unique index leads with the business).
        indexes = [models.Index(fields=["value"], name="crm_contactpoint_value_idx")]

    def __str__(self) -> str:
        return self.value


class KeptApartPair(models.Model):
    """Two contacts a person said are different people (a rejected
    `merge_contacts` request): identity stops asking about them.

    A row of its own rather than a query over rejected approval requests:
    the unique pair is a database fact the capture path reads with one
    indexed lookup, it outlives the request's payload (which may name more
    than two contacts), and a merge re-points it to the surviving contact.
    The pair is stored in primary-key order, so (a, b) and (b, a) are one row."""

    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    contact_low = models.ForeignKey(Contact, on_delete=models.PROTECT, related_name="+")
    contact_high = models.ForeignKey(Contact, on_delete=models.PROTECT, related_name="+")
    decided_by = models.CharField(max_length=150)
    # The public id of the request whose rejection recorded the pair, if any.
    approval = models.CharField(max_length=40, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["business", "contact_low", "contact_high"], name="crm_keptapartpair_unique_pair"
            ),
            models.CheckConstraint(
                condition=models.Q(contact_low__lt=models.F("contact_high")), name="crm_keptapartpair_ordered"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.contact_low_id} apart from {self.contact_high_id}"


class Channel(models.TextChoices):
    SMS = "sms"
    VOICE = "voice"
    EMAIL = "email"
    # Instagram DMs: sending needs no grant (Meta's 24-hour window decides);
    # the ledger holds the person's own STOP and its confirmed plain-word
    # revocations, which block DMs like any revocation.
    INSTAGRAM = "instagram"
    # A marketplace's message thread (Thumbtack, Yelp): like a DM, the
    # customer wrote there first; the ledger holds only their revocations.
    THUMBTACK = "thumbtack"
    YELP = "yelp"


class ConsentStatus(models.TextChoices):
    GRANTED = "granted"
    REVOKED = "revoked"
    UNKNOWN = "unknown"


class ConsentEvent(models.Model):
    """The append-only consent ledger, per contact point and channel."""

    class Action(models.TextChoices):
        GRANT = "grant"
        REVOKE = "revoke"

    public_id = PublicIdField(prefix="cev")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    contact_point = models.ForeignKey(ContactPoint, on_delete=models.PROTECT, related_name="consent_events")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    action = models.CharField(max_length=8, choices=Action.choices)
    # form_disclosure, inbound_conversation, missed_call, keyword, free_text, provider_error, manual…
    basis = models.CharField(max_length=32)
    # The text shown, checkbox value, page URL, IP, user agent, keyword, provider error…
    evidence = models.JSONField(default=dict, blank=True)
    inbound_event = models.ForeignKey(
        "crm.InboundEvent", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    actor = models.CharField(max_length=150)
    at = models.DateTimeField()

    class Meta:
        ordering = ["at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(channel__in=Channel.values), name="crm_consentevent_channel_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(action__in=["grant", "revoke"]), name="crm_consentevent_action_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class ConsentState(models.Model):
    """The current consent per contact point and channel, derived from the
    ledger and rewritten in the same transaction as each ConsentEvent."""

    contact_point = models.ForeignKey(ContactPoint, on_delete=models.CASCADE, related_name="consent_states")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    status = models.CharField(max_length=8, choices=ConsentStatus.choices, default=ConsentStatus.UNKNOWN)
    last_event = models.ForeignKey(ConsentEvent, on_delete=models.PROTECT, related_name="+")
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["contact_point", "channel"], name="crm_consentstate_unique_channel"),
        ]

    def __str__(self) -> str:
        return f"{self.channel}: {self.status}"


class InboundEvent(models.Model):
    """A provider delivery, stored verbatim before any processing (raw first)."""

    # Processing attempts allowed per run: at first, and again after each replay.
    ATTEMPTS_PER_RUN = 5

    class Status(models.TextChoices):
        RECEIVED = "received"
        PROCESSING = "processing"
        PROCESSED = "processed"
        IGNORED = "ignored"
        FAILED = "failed"

    public_id = PublicIdField(prefix="evt")
    # Null only while the owning business is not yet known (a global endpoint
    # such as Stripe's, before the payload is parsed).
    business = models.ForeignKey(Business, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    source = models.ForeignKey(Source, on_delete=models.PROTECT, null=True, blank=True, related_name="events")
    # The source whose own endpoint accepted the delivery, set once when it is
    # stored (`source` may be filled in later, once the payload names it).
    # A repeat is judged within it: where a business signs its deliveries with
    # its own key (Calendly, Typeform, a website form), an id it posts first
    # must not make another business's real delivery "a repeat". Empty for a
    # provider-wide endpoint, where the provider alone signs and its ids are
    # unique (Stripe before its account is read).
    accepted_by = models.ForeignKey(Source, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    provider = models.CharField(max_length=16, choices=Provider.choices)
    external_id = models.CharField(max_length=200)
    kind = models.CharField(max_length=64, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    body = models.BinaryField()
    signature_ok = models.BooleanField(default=False)
    is_test = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RECEIVED)
    error = models.TextField(blank=True)
    # Every attempt ever made; a claim counts one only while attempts <
    # attempt_limit, and a replay raises the limit by ATTEMPTS_PER_RUN.
    attempts = models.PositiveIntegerField(default=0)
    attempt_limit = models.PositiveIntegerField(default=ATTEMPTS_PER_RUN)
    received_at = models.DateTimeField()
    claimed_at = models.DateTimeField(null=True, blank=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    # Set while an automatic retry is due (the sweep takes the event again
    # from then on); empty once it is processed or left failed for a person.
    retry_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-received_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "accepted_by", "external_id"],
                nulls_distinct=False,
                name="crm_inboundevent_unique_external_id",
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["received", "processing", "processed", "ignored", "failed"]),
                name="crm_inboundevent_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(attempts__lte=models.F("attempt_limit")),
                name="crm_inboundevent_attempts_within_limit",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "received_at"], name="crm_inboundevent_status_idx"),
            models.Index(
                fields=["retry_at"], name="crm_inboundevent_retry_idx", condition=models.Q(retry_at__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider}:{self.external_id}"


class RejectedDelivery(models.Model):
    """Deliveries refused for a bad signature or key, counted per source and
    day (bounded: one row per source, provider and day; old days are pruned)."""

    business = models.ForeignKey(Business, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    source = models.ForeignKey(Source, on_delete=models.CASCADE, null=True, blank=True, related_name="rejections")
    provider = models.CharField(max_length=16, choices=Provider.choices)
    day = models.DateField()
    count = models.PositiveIntegerField(default=0)
    last_reason = models.CharField(max_length=200, blank=True)
    last_remote_addr = models.GenericIPAddressField(null=True, blank=True)
    last_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "rejected deliveries"
        ordering = ["-day", "provider"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "source", "day"], nulls_distinct=False, name="crm_rejecteddelivery_unique_day"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider} {self.day}: {self.count}"


class PollCursor(models.Model):
    """How far a poller has read a provider that sends no webhook (Google
    Local Services leads) or a resync has reached (Yelp): one row per source
    and stream, moved forward only in the transaction that stores what it
    read, so a restart resumes where the last committed read ended and two
    pollers never store one lead twice (they lock the row)."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="cursors")
    name = models.CharField(max_length=64)
    value = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["source", "name"], name="crm_pollcursor_one_per_stream")]

    def __str__(self) -> str:
        return f"{self.source_id}:{self.name}={self.value}"


class NumberLookup(models.Model):
    """What Twilio Lookup said about a phone number's line, kept per number
    (a public fact about the number, not about a person): a landline or a
    toll-free number gets a call, not a text."""

    class LineType(models.TextChoices):
        MOBILE = "mobile"
        LANDLINE = "landline"
        FIXED_VOIP = "fixedVoip"
        NON_FIXED_VOIP = "nonFixedVoip"
        TOLL_FREE = "tollFree"
        PERSONAL = "personal"
        PAGER = "pager"
        VOICEMAIL = "voicemail"
        SHARED_COST = "sharedCost"
        UNKNOWN = "unknown"

    number = models.CharField(max_length=32, unique=True)
    line_type = models.CharField(max_length=16, choices=LineType.choices, default=LineType.UNKNOWN)
    carrier_name = models.CharField(max_length=200, blank=True)
    # Lookup's own error for the number (60600 unprovisioned…), "" when it answered.
    error = models.CharField(max_length=200, blank=True)
    looked_up_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.number}: {self.line_type}"
