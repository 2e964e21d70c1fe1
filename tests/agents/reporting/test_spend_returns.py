"""Spend beside revenue (agents.reporting.spend): the campaigns' cost from
the pulled spend, their leads and paid revenue by the revenue report's own
attribution, ROAS by click date, and the revenue page's section."""

from __future__ import annotations

import csv
import io
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.reporting.spend import campaign_returns
from crm.attribution import revenue_report, revenue_reports
from crm.models import Business, ConversionAccount, Lead, Source
from crm.services.records import appointment_record, contact_create, lead_open, payment_record
from crm.services.spend import SpendRow, campaign_spend_record
from tests.helpers.conversions import CUSTOMER, accounts

GADS_CAMPAIGN = "20412345678"


def local_today(business: Business) -> date:
    return timezone.now().astimezone(ZoneInfo(business.timezone)).date()


def noon(business: Business, day: date) -> datetime:
    return datetime(day.year, day.month, day.day, 12, tzinfo=ZoneInfo(business.timezone))


@pytest.fixture
def google(business: Business) -> ConversionAccount:
    return accounts(business)[0]


@pytest.fixture
def sources(business: Business) -> dict[str, Source]:
    return {
        "gads": Source.objects.create(business=business, key="gads", provider="google_ads"),
        "site": Source.objects.create(business=business, key="site", provider="website", secret="s3cret-site"),
    }


_phones = iter(range(1000, 9999))


def lead_at(business: Business, source: Source, at: datetime, *, campaign: str = "") -> Lead:
    """A lead that arrived (and clicked) at `at`: made then, as the capture would have."""
    n = next(_phones)
    with time_machine.travel(at, tick=False):
        contact = contact_create(business=business, actor="t", first_name=f"P{n}", phones=[f"+1312555{n:04d}"])
        return lead_open(
            contact=contact,
            actor="t",
            source=source,
            received_at=at,
            touch={"channel": "form", "provider": source.provider, "campaign_id": campaign},
        )


def book(lead: Lead, at: datetime) -> None:
    with time_machine.travel(at, tick=False):
        appointment_record(
            lead=lead, starts_at=at + timedelta(days=2), ends_at=at + timedelta(days=2, hours=1), actor="t"
        )


def pay(lead: Lead, amount: str, at: datetime) -> None:
    payment_record(lead=lead, amount=Decimal(amount), currency="USD", actor="t", received_at=at)


def spend(
    account: ConversionAccount, days: list[date], *, campaigns: tuple[str, ...] = (GADS_CAMPAIGN,), name: str = ""
) -> None:
    """One pull of the account's spend, as the pull writes it
    (crm.services.spend): every campaign, 10.00 a day, for these days."""
    campaign_spend_record(
        account=account,
        platform="google_ads",
        account_id=CUSTOMER,
        since=min(days),
        until=max(days),
        rows=[
            SpendRow(campaign, name or f"Campaign {campaign}", day, Decimal("10.00"), 4, 100, "USD")
            for campaign in campaigns
            for day in days
        ],
        fetched_at=timezone.now(),
        actor="test",
    )


@pytest.mark.django_db
def test_roas_counts_the_revenue_of_the_periods_clicks_however_late_they_paid(business, sources, google) -> None:
    today = local_today(business)
    since, until = today - timedelta(days=40), today - timedelta(days=11)  # 30 days
    spend(google, [today - timedelta(days=n) for n in range(5, 46)], name="Furnace repair")
    # Clicked in the period, booked in it, paid after it: the period's spend bought it.
    clicked_in = lead_at(business, sources["gads"], noon(business, today - timedelta(days=20)), campaign=GADS_CAMPAIGN)
    book(clicked_in, noon(business, today - timedelta(days=19)))
    pay(clicked_in, "900.00", timezone.now())
    # Clicked before the period, paid in it: an earlier period's return.
    clicked_before = lead_at(
        business, sources["gads"], noon(business, today - timedelta(days=50)), campaign=GADS_CAMPAIGN
    )
    pay(clicked_before, "5000.00", noon(business, today - timedelta(days=20)))

    returns = campaign_returns(business, since, until)

    [row] = [r for r in returns.campaigns if r.key == GADS_CAMPAIGN]
    assert (row.label, row.platform) == ("Furnace repair", "google_ads")
    assert (row.spend, row.clicks, row.impressions) == (Decimal("300.00"), 120, 3000)
    assert (row.leads, row.booked, row.revenue) == (1, 1, Decimal("900.00"))
    assert (row.cost_per_lead, row.cost_per_booked, row.roas) == (Decimal("300.00"), Decimal("300.00"), Decimal("3.00"))
    assert (row.spend_text, row.roas_text) == ("$300.00", "3.00×")
    # The source's platform row carries the same spend and return.
    [google_row] = [r for r in returns.sources if r.key == "google_ads"]
    assert (google_row.spend, google_row.leads, google_row.revenue, google_row.sources) == (
        Decimal("300.00"),
        1,
        Decimal("900.00"),
        ["gads"],
    )
    assert returns.paid.roas == Decimal("3.00")


@pytest.mark.django_db
def test_a_source_without_spend_says_no_spend_data_never_zero(business, sources, google) -> None:
    today = local_today(business)
    spend(google, [today - timedelta(days=1)])
    site_lead = lead_at(business, sources["site"], noon(business, today - timedelta(days=2)))
    pay(site_lead, "400.00", timezone.now())
    # A campaign no account reports (a utm name, say) has no spend data either.
    lead_at(business, sources["gads"], noon(business, today - timedelta(days=2)), campaign="summer-promo")

    returns = campaign_returns(business, today - timedelta(days=6), today)

    [site] = [r for r in returns.sources if r.key == "site"]
    assert (site.leads, site.revenue) == (1, Decimal("400.00"))
    assert site.spend is None and site.cost_per_lead is None and site.cost_per_booked is None and site.roas is None
    assert (site.spend_text, site.cost_per_lead_text, site.roas_text) == ("no spend data",) * 3
    [promo] = [r for r in returns.campaigns if r.key == "summer-promo"]
    assert promo.spend is None and promo.roas is None and promo.leads == 1
    # Spent with no lead yet: a cost, and a dash where there is nothing to divide by.
    [paid] = [r for r in returns.campaigns if r.key == GADS_CAMPAIGN]
    assert (paid.spend, paid.leads, paid.cost_per_lead, paid.cost_per_lead_text) == (Decimal("10.00"), 0, None, "—")
    assert paid.roas == Decimal("0.00")


def _campaigns(business: Business, google: ConversionAccount, gads: Source, n: int) -> None:
    today = local_today(business)
    campaigns = tuple(f"3000000{k:04d}" for k in range(n))
    spend(google, [today - timedelta(days=d) for d in range(3)], campaigns=campaigns)
    for campaign in campaigns:
        lead = lead_at(business, gads, noon(business, today - timedelta(days=1)), campaign=campaign)
        pay(lead, "100.00", timezone.now())


@pytest.mark.django_db
@pytest.mark.parametrize("n", [1, 20])
def test_the_returns_cost_the_same_queries_for_one_campaign_or_twenty(business, sources, google, n) -> None:
    _campaigns(business, google, sources["gads"], n)
    today = local_today(business)

    with CaptureQueriesContext(connection) as queries:
        returns = campaign_returns(business, today - timedelta(days=6), today)

    # The spend, both groupings of the revenue report in one query, the sources' providers.
    assert len(queries.captured_queries) == 3
    assert len([r for r in returns.campaigns if r.spend]) == n
    assert returns.paid.spend == Decimal("30.00") * n and returns.paid.roas == Decimal("3.33")

    # The revenue page's own report of the period is used, not computed again.
    zone = ZoneInfo(business.timezone)
    start = datetime.combine(today - timedelta(days=6), time.min, tzinfo=zone)
    end = datetime.combine(today + timedelta(days=1), time.min, tzinfo=zone)
    shown = revenue_report([business.pk], currency="USD", by="campaign", since=start, until=end)
    with CaptureQueriesContext(connection) as queries:
        again = campaign_returns(business, today - timedelta(days=6), today, known=[shown])
    assert len(queries.captured_queries) == 3  # the spend, the report by source, the providers
    assert [r.as_dict() for r in again.campaigns] == [r.as_dict() for r in returns.campaigns]
    both = revenue_reports([business.pk], currency="USD", bys=("campaign", "source"), since=start, until=end).values()
    with CaptureQueriesContext(connection) as queries:
        known = campaign_returns(business, today - timedelta(days=6), today, known=both)
    assert len(queries.captured_queries) == 2  # the spend, the providers
    assert [r.as_dict() for r in known.sources] == [r.as_dict() for r in returns.sources]
    with CaptureQueriesContext(connection) as queries:
        paid_only = campaign_returns(business, today - timedelta(days=6), today, with_sources=False)
    assert len(queries.captured_queries) == 2 and paid_only.sources == []  # the spend, the report by campaign
    assert paid_only.paid.as_dict() == returns.paid.as_dict()


@pytest.mark.django_db
def test_the_revenue_page_shows_spend_and_return_and_exports_it(business, sources, google, manager) -> None:
    today = local_today(business)
    spend(google, [today - timedelta(days=n) for n in range(1, 4)], name="Furnace repair")
    lead = lead_at(business, sources["gads"], noon(business, today - timedelta(days=2)), campaign=GADS_CAMPAIGN)
    pay(lead, "120.00", timezone.now())
    lead_at(business, sources["site"], noon(business, today - timedelta(days=2)))
    client = Client()
    client.force_login(manager.user)

    page = client.get("/admin/revenue/", {"by": "campaign"})

    html = page.content.decode()
    assert page.status_code == 200 and 'id="revenue-table"' in html  # the report itself is still there
    assert 'id="spend-returns"' in html and "Spend and return" in html
    assert "Furnace repair" in html and "$30.00" in html and "4.00×" in html
    assert 'data-key="site"' in html and "no spend data" in html
    export = client.get("/admin/revenue/", {"by": "campaign", "format": "spend_csv"})
    lines = list(csv.reader(io.StringIO(export.content.decode())))
    assert lines[0][:5] == ["level", "key", "name", "platform", "spend_amount"]
    campaign = next(line for line in lines if line[1] == GADS_CAMPAIGN)
    assert campaign[4] == "30.00" and campaign[9] == "120.00" and campaign[12] == "4.00" and campaign[13] == "USD"
    xlsx = client.get("/admin/revenue/", {"by": "campaign", "format": "spend_xlsx"})
    assert xlsx.status_code == 200 and xlsx.content[:2] == b"PK"
