from __future__ import annotations

from datetime import time
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import models

from crm.ids import PublicIdField
from crm.localtime import zone_validate
from crm.services.webhook_targets import TargetRefused, TargetUnresolved, target_check
from crm.validation import name_refusal, policy_refusals

CURRENCY_DEFAULT = "USD"


class Role(models.TextChoices):
    SETTER = "setter"
    OWNER = "owner"
    MANAGER = "manager"
    TECHNICIAN = "technician"


class Business(models.Model):
    """A tenant: one contractor. An agency runs several."""

    public_id = PublicIdField(prefix="biz")
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    region = models.CharField(max_length=2, default="US", help_text="Default phone region (ISO 3166)")
    currency = models.CharField(max_length=3, default=CURRENCY_DEFAULT)
    # What a carrier's sender registration (10DLC brand and campaign) asks of
    # the business: legal_name, website, privacy_policy_url (the business
    # file's `business:` section; agents/reporting/evidence_pack.py).
    registration = models.JSONField(default=dict, blank=True)
    # The SMS health limits past which automated sequences pause (the business
    # file's policy.sms_health; agents/reporting/sms_health.py has the defaults).
    sms_health = models.JSONField(default=dict, blank=True)
    # Review requests after the job ({after, delay_hours, google_place_id, url}:
    # the business file's policy.reviews; agents/reviews/requests.py reads it).
    reviews = models.JSONField(default=dict, blank=True)
    first_response_minutes = models.PositiveIntegerField(default=5)
    quiet_hours_start = models.TimeField(default=time(8, 0))
    quiet_hours_end = models.TimeField(default=time(21, 0))
    dedupe_window_days = models.PositiveIntegerField(default=30)
    max_texts_per_day = models.PositiveIntegerField(default=3)
    # {"TX": "10:00-17:00"}: the business's own narrower windows for recipients
    # in a US state; they only narrow the statutory rules
    # (agents/outbound/state_rules.py), never widen them.
    quiet_hours_by_state = models.JSONField(default=dict, blank=True)
    # Consent older than this is no permission for automated follow-up.
    consent_max_age_days = models.PositiveIntegerField(default=365)
    # A missed call may get one automated text-back only where the business says so,
    # and a caller at most one in this many hours, however often they call.
    missed_call_text_back = models.BooleanField(default=False)
    missed_call_text_back_window_hours = models.PositiveIntegerField(default=24)
    # Ask Twilio Lookup what line a number is before its first text (a paid
    # lookup, once per number): a landline or toll-free number gets a call
    # task instead of a text that could never arrive.
    line_type_lookup = models.BooleanField(default=False)
    # Routing and SLA. Business hours as {"mon": "08:00-18:00", ...};
    # empty means the SLA clock runs round the clock.
    business_hours = models.JSONField(default=dict, blank=True)
    # On an SLA breach, hand the lead to the next eligible owner (else only alert).
    sla_reassign_on_breach = models.BooleanField(default=False)
    # ICP / fit scorer: [{"rule": "in_area", "points": 30}, ...]; empty uses the built-in rules.
    fit_rules = models.JSONField(default=list, blank=True)
    # Job-scope words per flag: {"emergency": [...], "commercial": [...]}; merged over built-ins.
    scope_keywords = models.JSONField(default=dict, blank=True)
    # Follow-up and reporting.
    estimate_follow_up_days = models.PositiveIntegerField(default=3)
    brief_hour = models.PositiveSmallIntegerField(default=7, help_text="Local hour the daily brief is emailed")
    # Public intake. The countries (ISO 3166 codes) whose numbers may be texted
    # or called; empty means the business's own `region` only.
    contact_countries = models.JSONField(default=list, blank=True)
    # The hosted form asks for a server-verified challenge (when the server has one configured).
    captcha_required = models.BooleanField(default=False)
    # Origins ("https://acme.example") allowed to frame the hosted form; empty: none.
    embed_origins = models.JSONField(default=list, blank=True)
    # This business's own Slack channel; the server's SLACK_WEBHOOK_URL is the fallback.
    slack_webhook_url = models.URLField(max_length=500, blank=True)
    # Raw bodies and headers of processed or ignored inbound events are pruned after this many days.
    raw_retention_days = models.PositiveIntegerField(default=90)
    # Language models (agents/ai), once the server has a provider (LLM_PROVIDER):
    # whether this business uses it, its calls per calendar month in its own
    # zone (None: no cap), and the intents a model's guarded reply may answer
    # without a person (through the send gate).
    ai_enabled = models.BooleanField(default=True)
    ai_monthly_calls = models.PositiveIntegerField(null=True, blank=True)
    ai_auto_reply = models.JSONField(default=list, blank=True)
    # Outside business hours, inbound texts and DMs are answered within the
    # playbook (agents/booking/receptionist.py) and handed to a person otherwise.
    ai_receptionist = models.BooleanField(default=False)
    # The approved facts a drafted reply may state besides the records (the
    # business file's `playbook`): {"booking_url": ..., "prices": [{"item", "amount"}], "facts": [...]}.
    playbook = models.JSONField(default=dict, blank=True)
    # Forwarded calls (the business file's `calls`): recorded or not, how a
    # recording is transcribed (off, model: the server's speech to text), and
    # the US states the business operates in, for the recording-consent
    # announcement (empty: unknown, so every recorded call is announced).
    call_recording = models.BooleanField(default=False)
    call_transcription = models.CharField(max_length=8, choices=[("off", "off"), ("model", "model")], default="off")
    call_states = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "businesses"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=models.Q(brief_hour__lte=23), name="crm_business_brief_hour_valid"),
            models.CheckConstraint(
                condition=models.Q(raw_retention_days__gte=1), name="crm_business_raw_retention_days_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(missed_call_text_back_window_hours__gte=1),
                name="crm_business_missed_call_text_back_window_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(call_transcription__in=["off", "model"]),
                name="crm_business_call_transcription_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # Not a field validator: validators are part of a field's migration
        # state, and this check needs none.
        zone_validate(self.timezone)
        # The JSON policy fields: the admin shows them raw, so the shapes the
        # business file's parser enforces are checked here too.
        errors = policy_refusals({field.name: getattr(self, field.name) for field in self._meta.fields})
        if refusal := name_refusal(self.name):
            errors["name"] = f"The name {refusal}."
        if errors:
            raise ValidationError(errors)
        if self.slack_webhook_url:
            # A tenant's URL the server posts to: the outbound webhooks'
            # guard (public addresses only) at save, and again at each post.
            try:
                target_check(self.slack_webhook_url)
            except TargetUnresolved:
                pass  # nothing can reach it; each post checks again
            except TargetRefused as exc:
                raise ValidationError({"slack_webhook_url": f"Refused: {exc}."}) from exc


class Money(models.Model):
    """Money is a Decimal amount beside its ISO currency; never a float."""

    amount = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("0.00"))
    currency = models.CharField(max_length=3, default=CURRENCY_DEFAULT)

    class Meta:
        abstract = True
