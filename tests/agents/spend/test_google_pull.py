"""Google Ads spend pulled through the google-ads client from the real gRPC
stand-in: its campaign report, paged with Google's page tokens."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agents.conversions.spend import spend_pull
from agents.tasks import spend_pull as spend_pull_job
from crm.models import Business, Campaign, CampaignSpend, ExceptionItem, PeriodicRun, Receipt
from devtools.simulator.lsa import campaign_day_row
from tests.helpers.conversions import CUSTOMER, accounts
from tests.helpers.google_ads import GoogleAdsServer

pytestmark = pytest.mark.django_db(transaction=True)

CAMPAIGNS = {"20412345678": "Furnace repair - Chicago", "20412345679": "AC install", "20412345680": "Brand"}


def today(business: Business) -> date:
    return timezone.now().astimezone(ZoneInfo(business.timezone)).date()


def plant(server: GoogleAdsServer, business: Business, *, days: int = 4, currency: str = "USD") -> None:
    """Each campaign's last `days` days; cost grows with the day and campaign."""
    for n, (campaign, name) in enumerate(sorted(CAMPAIGNS.items())):
        for back in range(days):
            day = (today(business) - timedelta(days=back)).isoformat()
            server.lsa.campaign_days.append(
                campaign_day_row(
                    CUSTOMER,
                    campaign,
                    day=day,
                    name=name,
                    cost_micros=12_345_678 * (n + 1) + back * 1_000_000,
                    clicks=10 + back,
                    impressions=400 + back,
                    currency=currency,
                )
            )


def spend_of(business: Business) -> dict[tuple[str, date], tuple[str, Decimal, int, int]]:
    return {
        (s.campaign.campaign_id, s.day): (s.public_id, s.cost_amount, s.clicks, s.impressions)
        for s in CampaignSpend.objects.filter(business=business).select_related("campaign")
    }


def test_every_campaign_day_is_pulled_across_pages_in_the_accounts_currency(business, google_ads) -> None:
    google, _ = accounts(business)
    plant(google_ads, business, days=4)
    # Another customer's campaign and a day outside the period are not ours to pull.
    google_ads.lsa.campaign_days.append(
        campaign_day_row("9999999999", "1", day=today(business).isoformat(), name="Not ours", cost_micros=5_000_000)
    )
    old = (today(business) - timedelta(days=10)).isoformat()
    google_ads.lsa.campaign_days.append(campaign_day_row(CUSTOMER, "20412345678", day=old, name="x", cost_micros=1))
    google_ads.lsa.page_size = 5

    result = spend_pull(google, days=4)

    assert (result.status, result.rows, result.campaigns) == ("pulled", 12, 3)
    assert (result.since, result.until) == (today(business) - timedelta(days=3), today(business))
    rows = spend_of(business)
    assert len(rows) == 12
    # 12.345678 rounds half up to the cent; the day before cost a unit more.
    assert rows[("20412345678", today(business))][1:] == (Decimal("12.35"), 10, 400)
    assert rows[("20412345680", today(business) - timedelta(days=1))][1:] == (Decimal("38.04"), 11, 401)
    assert set(CampaignSpend.objects.values_list("currency", flat=True)) == {"USD"}
    assert dict(Campaign.objects.values_list("campaign_id", "name")) == CAMPAIGNS
    assert set(Campaign.objects.values_list("platform", "account_id")) == {("google_ads", CUSTOMER)}
    # Three pages of five, the query Google is asked, for our customer only.
    searches = google_ads.lsa.searches
    assert len(searches) == 3 and {s["customer_id"] for s in searches} == {CUSTOMER}
    since = (today(business) - timedelta(days=3)).isoformat()
    assert f"segments.date BETWEEN '{since}' AND '{today(business).isoformat()}'" in searches[0]["query"]
    assert "metrics.cost_micros" in searches[0]["query"] and "customer.currency_code" in searches[0]["query"]
    assert searches[0]["metadata"]["developer-token"] == "dev-token-local"
    assert Receipt.objects.filter(action="spend.pulled", subject=google.public_id).count() == 1


def test_pulling_again_overwrites_the_days_and_a_renamed_campaign_takes_its_new_name(business, google_ads) -> None:
    google, _ = accounts(business)
    plant(google_ads, business, days=3)
    spend_pull(google, days=3)
    first = spend_of(business)

    # Google restates yesterday's cost, the campaign is renamed, a day is credited back to nothing.
    yesterday = (today(business) - timedelta(days=1)).isoformat()
    for row in google_ads.lsa.campaign_days:
        if row["campaign"]["id"] == 20412345678:
            row["campaign"]["name"] = "Furnace repair - Chicagoland"
            if row["segments"]["date"] == yesterday:
                row["metrics"]["cost_micros"] = 99_990_000
    google_ads.lsa.campaign_days = [
        r
        for r in google_ads.lsa.campaign_days
        if not (r["campaign"]["id"] == 20412345679 and r["segments"]["date"] == yesterday)
    ]
    result = spend_pull(google, days=3)

    second = spend_of(business)
    assert (result.status, result.rows, result.removed) == ("pulled", 8, 1)
    assert len(second) == 8 and Campaign.objects.count() == 3
    day = today(business) - timedelta(days=1)
    # The same row, overwritten: its public id kept.
    assert second[("20412345678", day)][0] == first[("20412345678", day)][0]
    assert second[("20412345678", day)][1] == Decimal("99.99")
    assert ("20412345679", day) not in second
    assert Campaign.objects.get(campaign_id="20412345678").name == "Furnace repair - Chicagoland"

    spend_pull(google, days=3)
    assert spend_of(business) == second  # nothing changes when nothing did


def test_a_refused_token_writes_nothing_and_tells_the_manager(business, manager, google_ads) -> None:
    google, _ = accounts(business)
    plant(google_ads, business, days=4)
    google_ads.lsa.page_size = 5
    # The first page is answered, the second refused: nothing of the first is kept.
    google_ads.lsa.search_plan = ["ok", "auth"]

    result = spend_pull(google, days=4)

    assert result.status == "refused" and "UNAUTHENTICATED" in result.detail
    assert not CampaignSpend.objects.exists() and not Campaign.objects.exists()
    item = ExceptionItem.objects.get(kind="spend_token", subject=google.public_id)
    assert item.status == "open" and item.owner == manager and "UNAUTHENTICATED" in item.detail
    failed = Receipt.objects.get(action="spend.pull_failed", subject=google.public_id)
    assert "refused" in failed.reason
    # Pulled again while refused: still one item.
    google_ads.lsa.search_plan = ["auth"]
    spend_pull(google, days=4)
    assert ExceptionItem.objects.filter(kind="spend_token", status="open").count() == 1

    # The token works again: the pull writes and the item is settled.
    assert spend_pull(google, days=4).status == "pulled"
    assert CampaignSpend.objects.count() == 12
    item.refresh_from_db()
    assert item.status == "resolved"


def test_an_account_billed_in_another_currency_is_refused_not_converted(business, google_ads) -> None:
    google, _ = accounts(business)
    plant(google_ads, business, days=2, currency="EUR")

    result = spend_pull(google, days=2)

    assert result.status == "refused" and "EUR" in result.detail and "USD" in result.detail
    assert not CampaignSpend.objects.exists()
    assert ExceptionItem.objects.filter(kind="spend_currency", subject=google.public_id, status="open").exists()


def test_a_new_account_gets_thirty_days_then_three_and_a_dry_run_writes_nothing(business, google_ads) -> None:
    google, _ = accounts(business)
    plant(google_ads, business, days=35)

    dry = spend_pull(google, dry_run=True)
    assert (dry.status, dry.rows) == ("dry_run", 90)
    assert dry.since == today(business) - timedelta(days=29)
    assert not CampaignSpend.objects.exists() and not Receipt.objects.filter(action__startswith="spend.").exists()

    first = spend_pull(google)
    assert (first.status, first.rows, first.since) == ("pulled", 90, today(business) - timedelta(days=29))
    daily = spend_pull(google)
    assert (daily.rows, daily.since) == (9, today(business) - timedelta(days=2))
    assert CampaignSpend.objects.count() == 90  # the daily window replaced its days, left the others


def test_the_command_pulls_one_business_and_fails_loudly_on_a_refusal(business, google_ads, capsys) -> None:
    google, meta = accounts(business)
    plant(google_ads, business, days=2)

    call_command("pull_spend", "--business", business.slug, "--days", "2")
    out = capsys.readouterr().out
    assert f"acme google {google.public_id}: pulled" in out and "3 campaigns, 6 campaign days" in out
    # Meta's account names no ad account: said, not failed.
    assert f"acme meta {meta.public_id}: skipped" in out and "ad_account_id" in out
    assert CampaignSpend.objects.count() == 6

    google_ads.lsa.search_default = "auth"
    with pytest.raises(CommandError, match="1 of 2 accounts not pulled"):
        call_command("pull_spend", "--business", business.slug, "--days", "2")
    with pytest.raises(CommandError, match="no business"):
        call_command("pull_spend", "--business", "nobody")


def test_the_daily_job_pulls_every_account_and_records_its_run(business, google_ads) -> None:
    accounts(business)
    plant(google_ads, business, days=31)

    counts = spend_pull_job()

    assert counts == {"accounts": 2, "rows": 90, "pulled": 1, "skipped": 1}  # a new account: 30 days
    run = PeriodicRun.objects.get(name="leadops.spend_pull")
    assert run.succeeded_at is not None and run.result == counts
