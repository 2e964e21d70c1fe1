"""Ad spend: what each campaign cost, day by day, as the ad platform reports it.

A `Campaign` is one campaign of one of the business's ad accounts (Google Ads
or Meta), its name kept current by every pull. A `CampaignSpend` is one day
of one campaign — the day in the ad account's own time zone, as the platform
counts it — with its cost in the business's currency, clicks and
impressions. The pull of a day replaces what an earlier pull said of it (the
platforms restate recent days as late clicks and invalid-click credits
arrive), so (campaign, day) is unique and a re-pull is idempotent.
"""

from __future__ import annotations

from django.db import models

from crm.ids import PublicIdField
from crm.models.base import Business


class SpendPlatform(models.TextChoices):
    GOOGLE_ADS = "google_ads", "Google Ads"
    META = "meta", "Meta"


class Campaign(models.Model):
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    platform = models.CharField(max_length=16, choices=SpendPlatform.choices)
    # The ad account the campaign runs in: Google's customer id, Meta's ad account id (digits).
    account_id = models.CharField(max_length=32)
    # The platform's id, as our touches carry it (LeadTouch.campaign_id).
    campaign_id = models.CharField(max_length=100)
    name = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["business", "platform", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["business", "platform", "campaign_id"], name="crm_campaign_unique_platform_id"
            ),
            models.CheckConstraint(
                condition=models.Q(platform__in=SpendPlatform.values), name="crm_campaign_platform_valid"
            ),
            models.CheckConstraint(condition=~models.Q(campaign_id=""), name="crm_campaign_id_present"),
        ]

    def __str__(self) -> str:
        return f"{self.get_platform_display()} {self.name or self.campaign_id}"


class CampaignSpend(models.Model):
    public_id = PublicIdField(prefix="spd")
    business = models.ForeignKey(Business, on_delete=models.PROTECT, related_name="+")
    campaign = models.ForeignKey(Campaign, on_delete=models.PROTECT, related_name="spend")
    # The ad account's day (its own time zone), as the platform segments it.
    day = models.DateField()
    cost_amount = models.DecimalField(max_digits=12, decimal_places=2)
    # Always the business's: an account billed in another currency is refused, never converted.
    currency = models.CharField(max_length=3)
    clicks = models.BigIntegerField(default=0)
    impressions = models.BigIntegerField(default=0)
    fetched_at = models.DateTimeField()

    class Meta:
        ordering = ["campaign", "day"]
        constraints = [
            models.UniqueConstraint(fields=["campaign", "day"], name="crm_campaignspend_unique_day"),
            models.CheckConstraint(condition=models.Q(cost_amount__gte=0), name="crm_campaignspend_cost_nonnegative"),
            models.CheckConstraint(condition=models.Q(clicks__gte=0), name="crm_campaignspend_clicks_nonnegative"),
            models.CheckConstraint(
                condition=models.Q(impressions__gte=0), name="crm_campaignspend_impressions_nonnegative"
            ),
            models.CheckConstraint(
                condition=models.Q(currency__regex=r"^[A-Z]{3}$"), name="crm_campaignspend_currency_code"
            ),
        ]
        indexes = [
            # The returns report: a business's days in a period, summed per campaign.
            models.Index(fields=["business", "day"], name="crm_campaignspend_day_idx"),
        ]

    def __str__(self) -> str:
        return self.public_id
