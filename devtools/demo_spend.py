"""The demo shop's ad spend: a month of daily cost for the two campaigns its
paid leads came from (the Google Ads and Meta campaign ids the demo's
touches carry, devtools/demo.py TOUCHES), so the revenue page's "Spend and
return" shows cost per lead and ROAS on first login.

Written as a pull writes it (crm.services.spend: one pull per ad account,
with its receipt), never through the network: the demo's accounts hold no
real credentials. Once: a business with spend already gets none.
"""

from __future__ import annotations

import random
from datetime import date, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.utils import timezone

from crm.models import Business, CampaignSpend, ConversionAccount, SpendPlatform
from crm.services.spend import SpendRow, campaign_spend_record

DAYS = 30
# (platform of the conversion account, spend platform, campaign id, name, daily cost range, clicks range)
CAMPAIGNS = (
    ("google", SpendPlatform.GOOGLE_ADS, "20412345678", "Furnace repair - Chicago", (38, 64), (9, 22)),
    ("meta", SpendPlatform.META, "120210000000001", "Fall tune-up", (14, 31), (18, 46)),
)
# The demo file's Meta account names no ad account; this one stands for it.
DEMO_META_AD_ACCOUNT = "100000000000555"


def demo_spend_ensure(business: Business) -> int:
    """DAYS days of spend, ending yesterday in the shop's zone, for each demo
    campaign whose platform the business has a conversion account on; the
    rows written (0 when there is spend already)."""
    if CampaignSpend.objects.filter(business=business).exists():
        return 0
    rng = random.Random(20412345678)
    yesterday = timezone.now().astimezone(ZoneInfo(business.timezone)).date() - timedelta(days=1)
    days = [yesterday - timedelta(days=n) for n in range(DAYS - 1, -1, -1)]
    written = 0
    for platform, spend_platform, campaign, name, cost, clicks in CAMPAIGNS:
        account = ConversionAccount.objects.filter(business=business, platform=platform).first()
        if account is None:
            continue
        account_id = (
            str(account.config.get("customer_id") or "")
            if platform == "google"
            else str(account.config.get("ad_account_id") or DEMO_META_AD_ACCOUNT)
        )
        rows = [_day(rng, campaign, name, day, cost, clicks, business.currency) for day in days]
        written += campaign_spend_record(
            account=account,
            platform=spend_platform,
            account_id=account_id,
            since=days[0],
            until=days[-1],
            rows=rows,
            fetched_at=timezone.now(),
            actor="load_demo",
        ).rows
    return written


def _day(
    rng: random.Random,
    campaign: str,
    name: str,
    day: date,
    cost: tuple[int, int],
    clicks: tuple[int, int],
    currency: str,
) -> SpendRow:
    # Weekends cost less: fewer searches for a furnace on a Sunday.
    scale = Decimal("0.6") if day.weekday() >= 5 else Decimal(1)
    amount = (Decimal(rng.randrange(cost[0] * 100, cost[1] * 100)) / 100 * scale).quantize(Decimal("0.01"))
    n = int(rng.randrange(*clicks) * float(scale))
    return SpendRow(campaign, name, day, amount, n, n * rng.randrange(18, 35), currency)
