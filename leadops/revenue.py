"""The revenue page: the revenue report (crm.attribution) for people, with
CSV and XLSX exports. Staff login; a user reads the revenue of the
businesses they own or manage. A thin view: the same validation and report
as the API endpoint. For one business it shows spend beside the revenue
(agents.reporting.spend), exported with `format=spend_csv` / `spend_xlsx`."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import urlencode
from rest_framework.exceptions import PermissionDenied, ValidationError

from agents.reporting.spend import CampaignReturns, campaign_returns, money_text, returns_table
from crm.api.revenue import report_businesses, revenue_with
from crm.attribution import BY_CHOICES, REPEAT_CHOICES, TOUCH_CHOICES, RevenueReport, revenue_csv_rows, revenue_table
from crm.exports import XLSX_TYPE, SafeCsvWriter, xlsx_bytes
from crm.figures import Figure, before_words, figure
from crm.localtime import zone_name
from crm.models import Business
from leadops.charts import bar_chart

# Campaigns drawn in the paid-revenue chart; the table below lists them all.
CHART_CAMPAIGNS = 8
# The page's period when the query names none (the API's is all time).
DEFAULT_DAYS = timedelta(days=30)


@staff_member_required
def revenue_page(request: HttpRequest) -> HttpResponse:
    params = request.GET.dict()
    params.pop("format", None)
    mine = report_businesses(request.user)
    if "since" not in params and "until" not in params:
        params.update(_default_period(mine, params.get("business", "")))
    context = {
        "businesses": mine,
        "by_choices": BY_CHOICES,
        "touch_choices": TOUCH_CHOICES,
        "repeat_choices": REPEAT_CHOICES,
        "params": params,
    }
    try:
        # By campaign and by source too (the spend section's), and the period
        # before (the headlines'), all in the same query.
        report, others, before, businesses = revenue_with(
            request.user, params, also=("campaign", "source"), before=True
        )
    except PermissionDenied as exc:
        return render(request, "leadops/revenue.html", {**context, "error": str(exc.detail)}, status=403)
    except ValidationError as exc:
        detail = exc.detail if isinstance(exc.detail, dict) else {"query": exc.detail}
        error = "; ".join(f"{k}: {' '.join(str(m) for m in v)}" for k, v in detail.items())
        return render(request, "leadops/revenue.html", {**context, "error": error}, status=400)
    name = "revenue-" + "-".join(b.slug for b in businesses)[:80] + f"-{report.by}-{report.touch}"
    returns = _returns(report, businesses, known=[report, *others])
    if returns is not None and request.GET.get("format") in ("spend_csv", "spend_xlsx"):
        spend_name = f"spend-{businesses[0].slug}"
        if request.GET["format"] == "spend_csv":
            response = HttpResponse(content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="{spend_name}.csv"'
            SafeCsvWriter(response).writerows(returns_table(returns))
            return response
        header, *rows = returns_table(returns)
        response = HttpResponse(xlsx_bytes("Spend", header, rows, money=returns.currency), content_type=XLSX_TYPE)
        response["Content-Disposition"] = f'attachment; filename="{spend_name}.xlsx"'
        return response
    if request.GET.get("format") == "csv":
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
        SafeCsvWriter(response).writerows(revenue_csv_rows(report))
        return response
    if request.GET.get("format") == "xlsx":
        header, *rows = revenue_table(report)
        response = HttpResponse(xlsx_bytes("Revenue", header, rows, money=report.currency), content_type=XLSX_TYPE)
        response["Content-Disposition"] = f'attachment; filename="{name}.xlsx"'
        return response
    # The exports download what the page shows: its period too, when it is the default.
    exports = {kind: urlencode({**params, "format": kind}) for kind in ("csv", "xlsx", "spend_csv", "spend_xlsx")}
    days_zone = businesses[0].timezone if len(businesses) == 1 else zone_name()
    previous, previous_returns, against = _previous(report, before, businesses)
    return render(
        request,
        "leadops/revenue.html",
        {
            **context,
            "figures": revenue_figures(report, returns, previous, previous_returns, against),
            "chart": _campaign_chart(returns) if returns is not None else None,
            "report": report,
            "named_rows": _named_rows(report, returns),
            "selected": businesses,
            "csv_query": exports["csv"],
            "xlsx_query": exports["xlsx"],
            "days_zone": days_zone,
            "returns": returns,
            "spend_csv_query": exports["spend_csv"],
            "spend_xlsx_query": exports["spend_xlsx"],
        },
    )


def _default_period(mine: list[Business], slug: str) -> dict[str, str]:
    """The last 30 days to today, in the business's days (one business asked
    for, or the only one) or the viewer's: what an owner asks first, and a
    period the headlines can compare with the 30 days before. Emptying both
    dates in the form shows all time."""
    chosen = [b for b in mine if b.slug == slug] if slug else mine
    zone = ZoneInfo(chosen[0].timezone) if len(chosen) == 1 else timezone.get_current_timezone()
    today = timezone.now().astimezone(zone).date()
    return {"since": (today - DEFAULT_DAYS + timedelta(days=1)).isoformat(), "until": today.isoformat()}


def _returns(
    report: RevenueReport, businesses: list[Business], *, known: list[RevenueReport], with_sources: bool = True
) -> CampaignReturns | None:
    """Spend and return for the report's period, for one business (spend is
    per business, in its own currency); None for several."""
    if len(businesses) != 1:
        return None
    business = businesses[0]
    zone = ZoneInfo(business.timezone)
    since: date | None = report.since.astimezone(zone).date() if report.since else None
    # `until` is exclusive: its day is the one before.
    until: date | None = (report.until.astimezone(zone) - timedelta(microseconds=1)).date() if report.until else None
    return campaign_returns(business, since, until, repeat=report.repeat, known=known, with_sources=with_sources)


def _previous(
    report: RevenueReport, before: dict[str, RevenueReport], businesses: list[Business]
) -> tuple[RevenueReport | None, CampaignReturns | None, str]:
    """What the headlines compare with: the period of equal length just
    before this one, counted in the page's own query, and its name. For one
    business the campaigns' total (its headlines are the spend table's total
    row); for several, the report's. An open-ended period has none."""
    if report.since is None or report.until is None or not before:
        return None, None, ""
    earlier = before[report.by]
    against = before_words(report.until - report.since)
    if len(businesses) == 1:
        return None, _returns(earlier, businesses, known=list(before.values()), with_sources=False), against
    return earlier, None, against


def revenue_figures(
    report: RevenueReport,
    returns: CampaignReturns | None,
    previous: RevenueReport | None,
    previous_returns: CampaignReturns | None,
    against: str,
) -> list[Figure]:
    """The page's headlines, each read from a total the page shows: for one
    business the spend table's total row (paid revenue by click, spend, ROAS,
    cost per booked lead); for several, the revenue table's net collected.
    Without a previous period (an open-ended one) they stand alone."""

    def money(value: int | Decimal | None) -> str:
        return money_text(None if value is None else Decimal(value), report.currency)

    def ratio(value: int | Decimal | None) -> str:
        return "—" if value is None else f"{value:.2f}×"

    def before(value: int | Decimal | None) -> tuple[tuple[int | Decimal | None, str], ...]:
        return ((value, against),) if against else ()

    if returns is None:
        was_net = None if previous is None else previous.totals.net
        return [figure("net", "Collected, net", report.totals.net, *before(was_net), fmt=money)]
    now = returns.paid
    was = previous_returns.paid if previous_returns is not None else None
    headlines = (
        ("revenue", "Paid revenue", money, False),
        ("spend", "Spend", money, False),
        ("roas", "Return on ad spend", ratio, False),
        ("cost_per_booked", "Cost per booked", money, True),
    )
    return [
        figure(
            key,
            label,
            getattr(now, key),
            *before(None if was is None else getattr(was, key)),
            fmt=fmt,
            lower_is_better=lower,
        )
        for key, label, fmt, lower in headlines
    ]


def _named_rows(report: RevenueReport, returns: CampaignReturns | None) -> list[tuple[str, Any]]:
    """The report's rows with the name a person knows each by: a campaign's
    name as its ad account reports it (the id stays in the full table and
    the exports), else the key itself (a source's key, "(none)")."""
    names = {row.key: row.label for row in returns.campaigns} if returns is not None and report.by == "campaign" else {}
    return [(names.get(row.key, row.key), row) for row in report.rows]


def _campaign_chart(returns: CampaignReturns) -> Any:
    """Paid revenue by click for the campaigns that earned most, by name."""
    earning = sorted((r for r in returns.campaigns if r.revenue > 0), key=lambda r: (-r.revenue, r.label))
    bars = [(row.label, float(row.revenue), row.revenue_text) for row in earning[:CHART_CAMPAIGNS]]
    return bar_chart(
        bars, chart_id="revenue-chart", title=f"Paid revenue by campaign, top {CHART_CAMPAIGNS} ({returns.currency})"
    )
