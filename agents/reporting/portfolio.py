"""The agency's portfolio: one row per business the reader may see, with the
headline numbers of the last 30 days against the 30 before, and what the
ads cost against what they brought.

Every figure is the revenue report's (crm.attribution, grouped by business:
one definition per number, docs/reports.md) and the spend the ad platforms
reported (CampaignSpend). Businesses are grouped by currency — money is
never converted — and each currency costs four queries (the revenue report
for each period, the spend for both), whatever the number of businesses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Q, Sum

from crm.attribution import RevenueRow, revenue_report
from crm.models import Business, CampaignSpend

PERIOD = timedelta(days=30)


@dataclass(frozen=True)
class PortfolioRow:
    business: Business
    now: RevenueRow
    before: RevenueRow
    spend: Decimal | None  # None: no ad account reports spend for it
    spend_before: Decimal | None

    @property
    def roas(self) -> Decimal | None:
        """Paid revenue of the period's clicks ÷ the period's spend."""
        if not self.spend:
            return None
        return (self.now.net_by_click / self.spend).quantize(Decimal("0.01"))


def _spend(business_ids: list[int], since: datetime, until: datetime) -> dict[int, tuple[Decimal, Decimal]]:
    """Spend per business in this period and the one before (one query)."""
    current = Q(day__gte=since.date(), day__lt=until.date())
    before = Q(day__gte=(since - PERIOD).date(), day__lt=since.date())
    rows = (
        CampaignSpend.objects.filter(business_id__in=business_ids, day__gte=(since - PERIOD).date())
        .values("business_id")
        .annotate(now=Sum("cost_amount", filter=current), before=Sum("cost_amount", filter=before))
        .order_by()
    )
    return {r["business_id"]: (r["now"] or Decimal("0.00"), r["before"] or Decimal("0.00")) for r in rows}


def portfolio(businesses: Iterable[Business], *, until: datetime) -> list[PortfolioRow]:
    """The rows, busiest first (by new leads)."""
    since = until - PERIOD
    by_currency: dict[str, list[Business]] = {}
    for business in businesses:
        by_currency.setdefault(business.currency, []).append(business)
    rows = []
    for currency, group in by_currency.items():
        ids = [b.pk for b in group]
        now = {r.key: r for r in revenue_report(ids, currency=currency, by="business", since=since, until=until).rows}
        before = revenue_report(ids, currency=currency, by="business", since=since - PERIOD, until=since).rows
        earlier = {r.key: r for r in before}
        spend = _spend(ids, since, until)
        for business in group:
            key = str(business.pk)
            spent = spend.get(business.pk)
            rows.append(
                PortfolioRow(
                    business=business,
                    now=now.get(key) or RevenueRow(key=key),
                    before=earlier.get(key) or RevenueRow(key=key),
                    spend=spent[0] if spent else None,
                    spend_before=spent[1] if spent else None,
                )
            )
    rows.sort(key=lambda r: (-r.now.leads, r.business.name))
    return rows
