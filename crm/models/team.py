from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.functions import Lower

from crm.ids import PublicIdField
from crm.localtime import zone_validate
from crm.models.base import Business, Role
from crm.validation import name_refusal


class ServiceLine(models.Model):
    public_id = PublicIdField(prefix="svc")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="service_lines")
    slug = models.SlugField(max_length=64)
    name = models.CharField(max_length=200)
    keywords = models.JSONField(default=list, blank=True)
    high_value_amount = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    currency = models.CharField(max_length=3, default="USD")
    # The offer matcher: the approved offer for this line and its template keys.
    offer = models.CharField(max_length=300, blank=True)
    offer_templates = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["business", "slug"], name="crm_serviceline_unique_slug"),
            # Two lines of one name would be one choice shown twice (in any case).
            models.UniqueConstraint(
                "business",
                Lower("name"),
                name="crm_serviceline_unique_name",
                violation_error_message="This business already has a service line of that name.",
            ),
            models.CheckConstraint(
                condition=models.Q(high_value_amount__isnull=True) | models.Q(high_value_amount__gte=0),
                name="crm_serviceline_high_value_nonnegative",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if refusal := name_refusal(self.name):
            raise ValidationError({"name": f"The name {refusal}."})


class ServiceArea(models.Model):
    public_id = PublicIdField(prefix="area")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="service_areas")
    name = models.CharField(max_length=200)
    # Exact codes ("60601") or prefixes ending in "*" ("606*").
    postal_codes = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["business", "name"], name="crm_servicearea_unique_name"),
        ]

    def __str__(self) -> str:
        return self.name


class TeamMember(models.Model):
    """A user's membership of one business, with their role and routing profile.

    Membership is what scopes every query: a user sees only the businesses they
    have a TeamMember row in.
    """

    public_id = PublicIdField(prefix="tm")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="team")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    display_name = models.CharField(max_length=200, blank=True)
    email = models.EmailField(blank=True)
    phone = models.CharField(max_length=32, blank=True)
    # Where this person works: the pages they read show times in it, and their
    # working hours are in it. Empty: the business's zone.
    timezone = models.CharField(max_length=64, blank=True, help_text="Empty: the business's time zone")
    service_lines = models.ManyToManyField(ServiceLine, blank=True, related_name="members")
    service_areas = models.ManyToManyField(ServiceArea, blank=True, related_name="members")
    weight = models.PositiveIntegerField(default=1)
    max_open_leads = models.PositiveIntegerField(null=True, blank=True)
    # {"mon": "08:00-18:00", ...}; a missing day is a day off.
    hours = models.JSONField(default=dict, blank=True)
    out_of_office_until = models.DateTimeField(null=True, blank=True)
    # Smooth weighted round robin: each pick adds every eligible member's
    # weight to their score and takes the total from the one chosen. Read and
    # written only under a row lock on the candidates (crm.services.routing).
    rotation_score = models.IntegerField(default=0)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["business", "display_name"]
        constraints = [
            models.UniqueConstraint(fields=["business", "user"], name="crm_teammember_unique_user"),
            models.CheckConstraint(condition=models.Q(role__in=Role.values), name="crm_teammember_role_valid"),
        ]

    def __str__(self) -> str:
        return self.display_name or self.user.get_username()

    def clean(self) -> None:
        zone_validate(self.timezone)
        if refusal := name_refusal(self.display_name):
            raise ValidationError({"display_name": f"The name {refusal}."})


class Availability(models.Model):
    """Bookable slots for a team: the days, the local time windows, and how many
    appointments one slot takes. Booking locks this row (agents.booking)."""

    public_id = PublicIdField(prefix="avl")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="availability")
    members = models.ManyToManyField(TeamMember, blank=True, related_name="availability")
    service_lines = models.ManyToManyField(ServiceLine, blank=True, related_name="availability")
    days = models.JSONField(default=list, help_text='["mon", "tue", ...]')
    slots = models.JSONField(default=list, help_text='["09:00-11:00", ...] in the business time zone')
    capacity = models.PositiveIntegerField(default=1)
    is_active = models.BooleanField(default=True)

    class Meta:
        verbose_name_plural = "availability"
        constraints = [
            models.CheckConstraint(condition=models.Q(capacity__gte=1), name="crm_availability_capacity_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} ({', '.join(self.slots)})"


class Invitation(models.Model):
    """One invitation sent (or meant to be sent) to a team member: an email
    with a link to set their password, or, where the operator runs single
    sign-on, where to sign in. One row per sending, so the team page can say
    when someone was invited and whether they came in, and a sweep can find
    the ones that never went out (`sent_at` empty, `error` saying why)."""

    # "inv" is the invoices' prefix: an evidence link reads a public id's
    # prefix to find its page.
    public_id = PublicIdField(prefix="invt")
    member = models.ForeignKey(TeamMember, on_delete=models.PROTECT, related_name="invitations")
    # Who asked for it; empty for a business file's load or a command.
    sent_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # When the email left; empty until then, and for good when it could not.
    sent_at = models.DateTimeField(null=True, blank=True)
    # Why it was not sent (the mail server's refusal, no address…); empty once sent.
    error = models.CharField(max_length=300, blank=True)
    # When the member set their password through a link of theirs.
    accepted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The sweep's question: what was never sent?
            models.Index(fields=["created_at"], condition=models.Q(sent_at__isnull=True), name="crm_invitation_unsent"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(accepted_at__isnull=True) | models.Q(sent_at__isnull=False),
                name="crm_invitation_accepted_after_sent",
                violation_error_message="An invitation is accepted only after it was sent.",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id
