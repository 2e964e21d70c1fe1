"""The agency's portfolio page (`/admin/reports/portfolio/`): one row per
business the reader may read revenue of, each linking into that business's
revenue report; nothing of a business they do not belong to
(agents/reporting/portfolio.py)."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.safestring import SafeString
from django.views.decorators.http import require_safe

from agents.reporting.portfolio import PERIOD, PortfolioRow, portfolio
from crm.api.revenue import report_businesses
from crm.figures import Figure, before_words, figure
from crm.money import money_text
from leadops.charts import bar_chart

# The brief's and the funnel's words for the same figures.
COUNTS = (("leads", "New leads"), ("booked", "Booked"), ("won", "Won"))


@staff_member_required
@require_safe
def portfolio_page(request: HttpRequest) -> HttpResponse:
    businesses = report_businesses(request.user)
    if not businesses:
        raise PermissionDenied("the portfolio is for the owners and managers of a business")
    until = timezone.now()
    rows = portfolio(businesses, until=until)
    return render(
        request,
        "leadops/reports/portfolio.html",
        {
            "title": "Portfolio",
            "rows": rows,
            "figures": portfolio_figures(rows),
            "chart": portfolio_chart(rows),
            "since": until - PERIOD,
            "until": until,
        },
    )


def _money(rows: list[PortfolioRow]) -> tuple[str, Callable[[int | Decimal | None], str]] | None:
    """The one currency all the rows are in, and how its money reads in a
    headline; None when they mix (money is never converted)."""
    currencies = {row.business.currency for row in rows}
    if len(currencies) != 1:
        return None
    currency, region = currencies.pop(), rows[0].business.region or "US"
    return currency, lambda value: money_text(value, currency, region=region, whole=True)


def portfolio_figures(rows: list[PortfolioRow]) -> list[Figure]:
    """The sums of the table's columns, against the period before: the
    counts always, collected money only when every business uses one currency."""
    against = before_words(PERIOD)
    figures = [
        figure(key, label, sum(getattr(r.now, key) for r in rows), (sum(getattr(r.before, key) for r in rows), against))
        for key, label in COUNTS
    ]
    money = _money(rows)
    if money is not None:
        now, before = sum(r.now.net for r in rows), sum(r.before.net for r in rows)
        figures.append(figure("net", "Collected", Decimal(now), (Decimal(before), against), fmt=money[1]))
    return figures


def portfolio_chart(rows: list[PortfolioRow]) -> SafeString:
    """Money collected by business when they share a currency, else new leads."""
    money = _money(rows)
    if money is not None:
        currency, text = money
        bars = [(r.business.name, float(r.now.net), text(r.now.net)) for r in rows]
        return bar_chart(bars, chart_id="portfolio-chart", title=f"Collected by business, last 30 days ({currency})")
    bars = [(r.business.name, float(r.now.leads), f"{r.now.leads:,}") for r in rows]
    return bar_chart(bars, chart_id="portfolio-chart", title="New leads by business, last 30 days")
