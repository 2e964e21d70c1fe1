"""The agency portfolio (agents/reporting/portfolio.py, /admin/reports/portfolio/):
one row per business the reader belongs to, the revenue report's figures
for the last 30 days against the 30 before, spend and ROAS; nothing of a
business they do not belong to; a fixed number of queries."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.reporting.portfolio import portfolio
from crm.models import Business, Campaign, CampaignSpend, Lead, Role
from crm.services.records import payment_record
from tests.factories import BusinessFactory, lead_create, member_create

pytestmark = pytest.mark.django_db


def shop(slug: str, *, leads: int, paid: str = "", spend: str = "", earlier_leads: int = 0) -> Business:
    business = BusinessFactory.create(slug=slug, name=slug.replace("-", " ").title(), currency="USD")
    now = timezone.now()
    for n in range(leads + earlier_leads):
        lead = lead_create(business, first_name=f"P{n}", phone=f"+1312555{n:04d}")
        if n >= leads:  # arrived in the 30 days before
            Lead.objects.filter(pk=lead.pk).update(created_at=now - timedelta(days=40))
        elif n == 0 and paid:
            payment_record(
                lead=lead, amount=Decimal(paid), currency="USD", actor="t", received_at=now - timedelta(days=2)
            )
    if spend:
        campaign = Campaign.objects.create(
            business=business, platform="google_ads", account_id="1", campaign_id=f"c-{slug}", name="C", updated_at=now
        )
        CampaignSpend.objects.create(
            business=business,
            campaign=campaign,
            day=(now - timedelta(days=3)).date(),
            cost_amount=Decimal(spend),
            currency="USD",
            fetched_at=now,
        )
    return business


def test_an_agency_sees_each_of_its_businesses_and_nothing_else() -> None:
    north = shop("north-hvac", leads=3, paid="900.00", spend="300.00", earlier_leads=1)
    south = shop("south-plumbing", leads=1)
    elsewhere = shop("not-ours", leads=5, paid="5000.00")
    agency = member_create(north, Role.MANAGER, username="ana")
    member_create(south, Role.OWNER, username="ana")
    client = Client()
    client.force_login(agency.user)

    page = client.get("/admin/reports/portfolio/")

    assert page.status_code == 200
    rows = {row.business.slug: row for row in page.context["rows"]}
    assert set(rows) == {"north-hvac", "south-plumbing"}
    assert elsewhere.name not in page.content.decode()
    row = rows["north-hvac"]
    assert (row.now.leads, row.before.leads, row.now.net, row.spend) == (3, 1, Decimal("900.00"), Decimal("300.00"))
    assert row.roas == Decimal("3.00")
    assert (rows["south-plumbing"].spend, rows["south-plumbing"].roas) == (None, None)
    html = page.content.decode()
    assert "$900.00" in html and "no spend data" in html
    assert f'href="/admin/revenue/?business={north.slug}"' in html
    # The headlines sum the table's columns; one currency, so money is summed too.
    figures = {f.key: (f.text, f.change) for f in page.context["figures"]}
    assert figures == {
        "leads": ("4", "+3"),
        "booked": ("0", "same"),
        "won": ("0", "same"),
        "net": ("$900", "+$900"),
    }
    assert '<svg id="portfolio-chart"' in html and "Collected by business" in html


def test_businesses_in_two_currencies_are_never_summed_as_money() -> None:
    north = shop("north-hvac", leads=2, paid="100.00")
    maple = shop("maple-roofing", leads=1)
    Business.objects.filter(pk=maple.pk).update(currency="CAD")
    agency = member_create(north, Role.OWNER, username="ana")
    member_create(maple, Role.OWNER, username="ana")
    client = Client()
    client.force_login(agency.user)

    page = client.get("/admin/reports/portfolio/")

    assert [f.key for f in page.context["figures"]] == ["leads", "booked", "won"]
    assert "New leads by business" in page.content.decode()


def test_a_setter_gets_no_portfolio() -> None:
    business = shop("solo", leads=1)
    setter = member_create(business, Role.SETTER, username="sam")
    client = Client()
    client.force_login(setter.user)
    assert client.get("/admin/reports/portfolio/").status_code == 403


def test_the_portfolio_reads_a_fixed_number_of_queries() -> None:
    few = [shop(f"few-{n}", leads=1, spend="10.00") for n in range(2)]
    many = few + [shop(f"many-{n}", leads=2, paid="50.00", spend="20.00") for n in range(4)]
    now = timezone.now()
    counted = []
    for businesses in (few, many):
        with CaptureQueriesContext(connection) as queries:
            rows = portfolio(businesses, until=now)
        assert len(rows) == len(businesses)
        counted.append(len(queries))
    assert counted[0] == counted[1] == 3  # the report for each period, the spend
