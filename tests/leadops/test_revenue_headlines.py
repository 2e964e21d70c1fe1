"""The revenue page's headlines and chart: read from the totals the page
shows, each against the period of equal length before, campaigns by name."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.utils import timezone

from crm.models import Business, ConversionAccount, Source
from tests.agents.reporting.test_spend_returns import GADS_CAMPAIGN, book, lead_at, local_today, noon, pay, spend
from tests.helpers.conversions import accounts

pytestmark = pytest.mark.django_db


@pytest.fixture
def google(business: Business) -> ConversionAccount:
    return accounts(business)[0]


@pytest.fixture
def sources(business: Business) -> dict[str, Source]:
    return {"gads": Source.objects.create(business=business, key="gads", provider="google_ads")}


def _cell(html: str, row_id: str, cls: str) -> str:
    row = html.split(f'id="{row_id}"')[1].split("</tr>")[0]
    match = re.search(rf'<td class="{cls}">([^<]*)</td>', row)
    assert match, (row_id, cls)
    return match.group(1)


def test_the_revenue_headlines_are_the_spend_totals_against_the_period_before(business, sources, google, manager):
    today = local_today(business)
    since, until = today - timedelta(days=9), today  # ten days; the ten before are the comparison
    spend(google, [today - timedelta(days=n) for n in range(0, 20)], name="Furnace <b>repair</b>")
    now = lead_at(business, sources["gads"], noon(business, today - timedelta(days=3)), campaign=GADS_CAMPAIGN)
    book(now, noon(business, today - timedelta(days=3)))
    pay(now, "500.00", timezone.now())
    before = lead_at(business, sources["gads"], noon(business, today - timedelta(days=15)), campaign=GADS_CAMPAIGN)
    pay(before, "200.00", timezone.now())
    client = Client()
    client.force_login(manager.user)

    response = client.get("/admin/revenue/", {"business": business.slug, "since": str(since), "until": str(until)})

    assert response.status_code == 200
    html = response.content.decode()
    figures = {f.key: (f.text, f.change) for f in response.context["figures"]}
    # Each headline is the spend table's total row, as printed.
    assert figures["revenue"][0] == _cell(html, "spend-totals", "revenue") == "$500.00"
    assert figures["spend"][0] == _cell(html, "spend-totals", "spend") == "$100.00"
    assert figures["roas"][0] == _cell(html, "spend-totals", "roas") == "5.00×"
    assert figures["cost_per_booked"][0] == _cell(html, "spend-totals", "cpb") == "$100.00"
    assert figures["revenue"][1] == "+$300.00" and figures["spend"][1] == "same"
    assert figures["roas"][1] == "+3.00×"
    assert figures["cost_per_booked"][1] == "—"  # nothing was booked before: no cost per booking to compare
    assert {c.against for f in response.context["figures"] for c in f.changes} == {"the 10 days before"}
    headlines = html.split('id="revenue-headlines"')[1].split("</dl>")[0]
    assert "+$300.00 vs the 10 days before" in headlines
    # The chart names the campaign (escaped), never its id, and has its text alternative.
    chart = html.split('<svg id="revenue-chart"')[1].split("</svg>")[0]
    assert "Furnace &lt;b&gt;repair&lt;/b&gt;" in chart and "<b>" not in chart and GADS_CAMPAIGN not in chart
    assert '<table class="visually-hidden chart-data" id="revenue-chart-data">' in html
    assert Decimal(re.search(r'data-value="([0-9.]+)"', chart).group(1)) == Decimal("500")


def test_the_page_opens_on_the_last_30_days_against_the_30_before(business, sources, google, manager):
    client = Client()
    client.force_login(manager.user)
    response = client.get("/admin/revenue/", {"business": business.slug})
    assert response.status_code == 200
    today = timezone.now().astimezone(ZoneInfo(business.timezone)).date()
    params = response.context["params"]
    assert (params["since"], params["until"]) == (str(today - timedelta(days=29)), str(today))
    assert {c.against for f in response.context["figures"] for c in f.changes} == {"the 30 days before"}
    html = response.content.decode()
    assert f'name="since" value="{today - timedelta(days=29)}"' in html
    # The exports download the period the page shows.
    assert f"since={today - timedelta(days=29)}" in response.context["csv_query"]


def test_an_open_ended_period_has_headlines_but_no_comparison(business, sources, google, manager):
    client = Client()
    client.force_login(manager.user)
    # Both dates emptied in the form: all time.
    response = client.get("/admin/revenue/", {"business": business.slug, "since": "", "until": ""})
    assert response.status_code == 200
    assert [f.changes for f in response.context["figures"]] == [()] * len(response.context["figures"])
    assert "headline-change" not in response.content.decode()
    assert "No data for this period." in response.content.decode()  # no campaign earned anything
