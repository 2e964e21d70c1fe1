"""Spend beside revenue: what each campaign cost and what its clicks brought.

Per campaign, and per source (the paid sources grouped by ad platform):
spend, clicks and impressions in the period (the platforms' days,
crm.models.CampaignSpend), leads, booked leads and paid revenue, then cost
per lead, cost per booked lead and ROAS.

The lead figures are the revenue report's own (crm.attribution, the same
call the revenue page makes): a lead belongs to the campaign (or source) of
its first touch; leads count when they arrived, booked when the appointment
was made; a repeat customer is credited apart, as the report does by
default. Paid revenue is the report's `net_by_click`: payments minus
refunds of the leads whose click fell in the period, however late they paid
— the money the period's spend bought, so ROAS = that ÷ spend.

A row without spend data (a website form, a referral, a campaign no
connected ad account reports) says so: its spend, cost per lead, cost per
booked lead and ROAS are None, never 0. A campaign an account reports with no
cost in the period has a spend of 0.00.

A constant number of queries whatever the campaigns and days: the campaigns
with their summed spend (one grouped query), the revenue report by campaign
and by source (one query each; the revenue page hands over the one it shows),
the business's sources.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Q, Sum
from django.db.models.functions import Coalesce

from crm.attribution import NO_VALUE, REPEAT, UNATTRIBUTED, RevenueReport, RevenueRow, revenue_reports
from crm.exports import CURRENCY_SYMBOLS
from crm.models import Business, Campaign, Provider, Source, SpendPlatform

ZERO = Decimal("0.00")
CENT = Decimal("0.01")
# The source providers whose spend an ad platform reports.
PLATFORM_OF_PROVIDER = {"google_ads": SpendPlatform.GOOGLE_ADS, "meta": SpendPlatform.META}
PLATFORM_NAMES = dict(SpendPlatform.choices)
PROVIDER_NAMES = dict(Provider.choices)


def money_text(amount: Decimal | None, currency: str) -> str:
    """ "$1,234.50", "1,234.50 CHF"; "no spend data" for None."""
    if amount is None:
        return "no spend data"
    symbol = CURRENCY_SYMBOLS.get(currency.upper())
    words = f"{amount:,.2f}"
    if amount < 0 and symbol:
        return f"-{symbol}{words[1:]}"
    return f"{symbol}{words}" if symbol else f"{words} {currency.upper()}"


def _per(spend: Decimal | None, count: int) -> Decimal | None:
    if spend is None or count <= 0:
        return None
    return (spend / count).quantize(CENT, ROUND_HALF_UP)


@dataclass
class ReturnRow:
    key: str  # the campaign id, or the source key / platform
    label: str  # the campaign's name, the platform's, or the source's provider ("Website form")
    platform: str  # google_ads | meta | "" (no ad platform)
    currency: str
    spend: Decimal | None = None  # None: no spend data
    clicks: int | None = None
    impressions: int | None = None
    leads: int = 0
    booked: int = 0
    revenue: Decimal = ZERO  # paid revenue by click date (net of refunds)
    sources: list[str] = field(default_factory=list)

    @property
    def cost_per_lead(self) -> Decimal | None:
        return _per(self.spend, self.leads)

    @property
    def cost_per_booked(self) -> Decimal | None:
        return _per(self.spend, self.booked)

    @property
    def roas(self) -> Decimal | None:
        """Paid revenue by click date ÷ spend; None without spend (or none spent)."""
        if self.spend is None or self.spend <= 0:
            return None
        return (self.revenue / self.spend).quantize(CENT, ROUND_HALF_UP)

    # For the page: money in the business's currency.
    @property
    def spend_text(self) -> str:
        return money_text(self.spend, self.currency)

    @property
    def cost_per_lead_text(self) -> str:
        return self._ratio_text(self.cost_per_lead)

    @property
    def cost_per_booked_text(self) -> str:
        return self._ratio_text(self.cost_per_booked)

    def _ratio_text(self, value: Decimal | None) -> str:
        # Spend but nothing to divide it by (no lead, none booked) is a dash.
        if self.spend is None:
            return "no spend data"
        return "—" if value is None else money_text(value, self.currency)

    @property
    def revenue_text(self) -> str:
        return money_text(self.revenue, self.currency)

    @property
    def platform_name(self) -> str:
        """ "Google Ads", "Meta"; "" for no ad platform (the page shows words, the exports the code)."""
        return PLATFORM_NAMES.get(self.platform, self.platform)

    @property
    def roas_text(self) -> str:
        if self.spend is None:
            return "no spend data"
        return "—" if self.roas is None else f"{self.roas:.2f}×"

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "platform": self.platform,
            "spend": self.spend,
            "clicks": self.clicks,
            "impressions": self.impressions,
            "leads": self.leads,
            "booked": self.booked,
            "revenue_by_click": self.revenue,
            "cost_per_lead": self.cost_per_lead,
            "cost_per_booked": self.cost_per_booked,
            "roas": self.roas,
        }


@dataclass
class CampaignReturns:
    business: Business
    currency: str
    since: date | None
    until: date | None
    campaigns: list[ReturnRow]
    sources: list[ReturnRow]

    @property
    def paid(self) -> ReturnRow:
        """The rows with spend data, summed (the campaigns')."""
        total = ReturnRow(key="total", label="total with spend data", platform="", currency=self.currency)
        total.spend, total.clicks, total.impressions = ZERO, 0, 0
        for row in self.campaigns:
            if row.spend is None:
                continue
            total.spend += row.spend
            total.clicks = (total.clicks or 0) + (row.clicks or 0)
            total.impressions = (total.impressions or 0) + (row.impressions or 0)
            total.leads += row.leads
            total.booked += row.booked
            total.revenue += row.revenue
        return total


def _bounds(business: Business, since: date | None, until: date | None) -> tuple[datetime | None, datetime | None]:
    """The period's local days as the revenue report's [since, until) times."""
    zone = ZoneInfo(business.timezone)
    start = datetime.combine(since, time.min, tzinfo=zone) if since else None
    end = datetime.combine(until + timedelta(days=1), time.min, tzinfo=zone) if until else None
    return start, end


def campaign_returns(
    business: Business,
    since: date | None,
    until: date | None,
    *,
    repeat: str = "exclude",
    known: Iterable[RevenueReport] = (),
    with_sources: bool = True,
) -> CampaignReturns:
    """Spend, leads, booked leads, paid revenue by click date, cost per lead,
    cost per booked lead and ROAS per campaign and per source, for the days
    since..until (inclusive, the business's days; None: unbounded). Reads
    only; three queries whatever the number of campaigns and days.

    `known`: revenue reports already computed for this business and period
    (the revenue page's); a first-touch report by campaign or by source in
    the same currency, bounds and repeat setting is used instead of
    computing that grouping again. `with_sources=False` leaves the sources
    out (the headlines' previous period needs only the campaigns' total)."""
    currency = business.currency
    day_filter = Q(spend__currency=currency)
    if since:
        day_filter &= Q(spend__day__gte=since)
    if until:
        day_filter &= Q(spend__day__lte=until)
    spent = list(
        Campaign.objects.filter(business=business)
        .values("campaign_id", "platform", "name")
        .annotate(
            cost=Coalesce(Sum("spend__cost_amount", filter=day_filter), ZERO),
            clicks=Coalesce(Sum("spend__clicks", filter=day_filter), 0),
            impressions=Coalesce(Sum("spend__impressions", filter=day_filter), 0),
        )
        .order_by("platform", "campaign_id")
    )
    start, end = _bounds(business, since, until)
    asked = ("first", currency, repeat, start, end)
    reports = {r.by: r for r in known if (r.touch, r.currency, r.repeat, r.since, r.until) == asked}
    wanted = ("campaign", "source") if with_sources else ("campaign",)
    missing = [by for by in wanted if by not in reports]
    if missing:
        reports.update(
            revenue_reports([business.pk], currency=currency, bys=missing, since=start, until=end, repeat=repeat)
        )
    by_campaign = reports["campaign"]

    # Per campaign: every campaign an account reports, and every key the report found.
    rows: dict[str, ReturnRow] = {}
    for c in spent:
        rows[c["campaign_id"]] = ReturnRow(
            key=c["campaign_id"],
            label=c["name"] or c["campaign_id"],
            platform=c["platform"],
            currency=currency,
            spend=Decimal(c["cost"]).quantize(CENT),
            clicks=int(c["clicks"]),
            impressions=int(c["impressions"]),
        )
    for found in by_campaign.rows:
        row = rows.get(found.key)
        if row is None:
            row = rows[found.key] = ReturnRow(key=found.key, label=_label(found.key), platform="", currency=currency)
        _add(row, found)
    campaigns = [r for r in rows.values() if r.spend or r.leads or r.revenue or r.booked]

    if not with_sources:
        return CampaignReturns(
            business=business, currency=currency, since=since, until=until, campaigns=campaigns, sources=[]
        )
    by_source = reports["source"]
    providers = dict(Source.objects.filter(business=business).values_list("key", "provider"))

    # Per source: a paid source's platform row carries the platform's spend.
    platform_spend: dict[str, ReturnRow] = {}
    for row in rows.values():
        if row.platform:
            total = platform_spend.setdefault(
                row.platform,
                ReturnRow(
                    key=row.platform,
                    label=PLATFORM_NAMES.get(row.platform, row.platform),
                    platform=row.platform,
                    currency=currency,
                    spend=ZERO,
                    clicks=0,
                    impressions=0,
                ),
            )
            total.spend = (total.spend or ZERO) + (row.spend or ZERO)
            total.clicks = (total.clicks or 0) + (row.clicks or 0)
            total.impressions = (total.impressions or 0) + (row.impressions or 0)
    sources: dict[str, ReturnRow] = {}
    for found in by_source.rows:
        provider = providers.get(found.key, found.key)
        platform = PLATFORM_OF_PROVIDER.get(provider, "")
        if platform and platform in platform_spend:
            row = sources.setdefault(platform, platform_spend[platform])
        else:
            # A source is known by its key (the business file's); its provider says what it is.
            label = provider_name(found.key, providers) or _label(found.key)
            row = sources.setdefault(found.key, ReturnRow(key=found.key, label=label, platform="", currency=currency))
        row.sources.append(found.key)
        _add(row, found)
    for platform, row in platform_spend.items():
        sources.setdefault(platform, row)

    def order(r: ReturnRow) -> tuple[Any, ...]:
        return (r.spend is None, -(r.spend or ZERO), -r.revenue, -r.leads, r.label)

    return CampaignReturns(
        business=business,
        currency=currency,
        since=since,
        until=until,
        campaigns=sorted(campaigns, key=order),
        sources=sorted(sources.values(), key=order),
    )


def provider_name(key: str, providers: dict[str, str]) -> str:
    """What people call a lead's first-touch source key (`first_source_key`):
    its source's provider ("Website form"), or the provider the key is itself
    (a touch without a source); "" for neither. `providers`: key → provider
    of the business's sources."""
    return PROVIDER_NAMES.get(providers.get(key, key), "")


def _label(key: str) -> str:
    return {NO_VALUE: "(no campaign)", REPEAT: REPEAT, UNATTRIBUTED: UNATTRIBUTED}.get(key, key)


def _add(row: ReturnRow, found: RevenueRow) -> None:
    row.leads += found.leads
    row.booked += found.booked
    row.revenue += found.net_by_click


HEADER = [
    "level",
    "key",
    "name",
    "platform",
    "spend_amount",
    "clicks",
    "impressions",
    "leads",
    "booked",
    "revenue_by_click",
    "cost_per_lead_amount",
    "cost_per_booked_amount",
    "roas",
    "currency",
]


def returns_table(returns: CampaignReturns) -> list[list[Any]]:
    """The campaigns, then the sources, as a table for CSV and XLSX: money
    as Decimals, "no spend data" cells empty (None)."""
    lines: list[list[Any]] = [list(HEADER)]
    for level, rows in (("campaign", returns.campaigns), ("source", returns.sources)):
        for row in rows:
            lines.append(
                [
                    level,
                    row.key,
                    row.label,
                    row.platform,
                    row.spend,
                    row.clicks,
                    row.impressions,
                    row.leads,
                    row.booked,
                    row.revenue,
                    row.cost_per_lead,
                    row.cost_per_booked,
                    row.roas,
                    returns.currency,
                ]
            )
    return lines
