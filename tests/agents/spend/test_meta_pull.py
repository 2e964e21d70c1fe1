"""Meta spend pulled from the Graph stand-in's ad account insights, page by
page through `paging.next`."""

from __future__ import annotations

import json
from datetime import date, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from agents.conversions.spend import spend_pull
from crm.models import Business, Campaign, CampaignSpend, ConversionAccount, ExceptionItem, Receipt
from tests.helpers.conversions import META_TOKEN, accounts
from tests.helpers.graph import GraphServer, insight_row

pytestmark = pytest.mark.django_db(transaction=True)

AD_ACCOUNT = "555000111222"
CAMPAIGNS = {"120210000000001": "Fall tune-up", "120210000000002": "Heat pump rebate", "120210000000003": "Retarget"}


def today(business: Business) -> date:
    return timezone.now().astimezone(ZoneInfo(business.timezone)).date()


def meta_account(business: Business, *, ad_account: str = f"act_{AD_ACCOUNT}") -> ConversionAccount:
    _, meta = accounts(business)
    meta.config = {**meta.config, "ad_account_id": ad_account.removeprefix("act_")}
    meta.save(update_fields=["config"])
    return meta


def plant(graph: GraphServer, business: Business, *, days: int, currency: str = "USD") -> None:
    rows = graph.insights.setdefault(AD_ACCOUNT, [])
    for n, (campaign, name) in enumerate(sorted(CAMPAIGNS.items())):
        for back in range(days):
            day = (today(business) - timedelta(days=back)).isoformat()
            spend = f"{10 * (n + 1) + back}.{n}7"
            rows.append(
                insight_row(
                    campaign, day=day, name=name, spend=spend, clicks=5 + back, impressions=900, currency=currency
                )
            )


def spend_of(business: Business) -> dict[tuple[str, date], tuple[str, Decimal, int]]:
    return {
        (s.campaign.campaign_id, s.day): (s.public_id, s.cost_amount, s.clicks)
        for s in CampaignSpend.objects.filter(business=business).select_related("campaign")
    }


def test_every_campaign_day_is_pulled_following_paging_next(business, graph) -> None:
    meta = meta_account(business)
    plant(graph, business, days=5)
    graph.insights_page_size = 4
    # A day before the period is not asked for.
    graph.insights[AD_ACCOUNT].append(
        insight_row("120210000000001", day=(today(business) - timedelta(days=9)).isoformat(), name="x", spend="1.00")
    )

    result = spend_pull(meta, days=5)

    assert (result.status, result.rows, result.campaigns) == ("pulled", 15, 3)
    rows = spend_of(business)
    assert len(rows) == 15
    assert rows[("120210000000002", today(business))][1:] == (Decimal("20.17"), 5)
    assert rows[("120210000000003", today(business) - timedelta(days=4))][1:] == (Decimal("34.27"), 9)
    assert set(Campaign.objects.values_list("platform", "account_id")) == {("meta", AD_ACCOUNT)}
    assert dict(Campaign.objects.values_list("campaign_id", "name")) == CAMPAIGNS
    # Four pages: the first asked as Meta documents it, the others by their `next` link.
    gets = [r for r in graph.seen if r["method"] == "GET"]
    assert len(gets) == 4
    assert gets[0]["path"] == f"/v21.0/act_{AD_ACCOUNT}/insights"
    first = gets[0]["query"]
    assert (first["level"], first["time_increment"]) == (["campaign"], ["1"])
    since = (today(business) - timedelta(days=4)).isoformat()
    assert json.loads(first["time_range"][0]) == {"since": since, "until": today(business).isoformat()}
    assert first["fields"] == ["campaign_id,campaign_name,spend,clicks,impressions,account_currency"]
    assert [g["query"].get("after") for g in gets] == [None, ["4"], ["8"], ["12"]]
    # The token only ever in the header.
    assert {g["authorization"] for g in gets} == {f"Bearer {META_TOKEN}"}
    assert all("access_token" not in g["query"] for g in gets)
    assert Receipt.objects.filter(action="spend.pulled", subject=meta.public_id).count() == 1


def test_pulling_again_overwrites_and_a_renamed_campaign_takes_its_new_name(business, graph) -> None:
    meta = meta_account(business)
    plant(graph, business, days=3)
    graph.insights_page_size = 2
    spend_pull(meta, days=3)
    first = spend_of(business)

    for row in graph.insights[AD_ACCOUNT]:
        if row["campaign_id"] == "120210000000001":
            row["campaign_name"] = "Fall tune-up 2026"
            row["spend"] = "0.00" if row["date_start"] == today(business).isoformat() else row["spend"]
    assert spend_pull(meta, days=3).status == "pulled"
    second = spend_of(business)

    assert len(second) == 9 and Campaign.objects.count() == 3
    key = ("120210000000001", today(business))
    assert second[key][0] == first[key][0] and second[key][1] == Decimal("0.00")
    assert Campaign.objects.get(campaign_id="120210000000001").name == "Fall tune-up 2026"
    spend_pull(meta, days=3)
    assert spend_of(business) == second


def test_an_expired_token_on_a_later_page_writes_nothing_and_tells_the_manager(business, manager, graph) -> None:
    meta = meta_account(business)
    plant(graph, business, days=5)
    graph.insights_page_size = 4
    graph.plan = [200, "token"]

    result = spend_pull(meta, days=5)

    assert result.status == "refused" and "code 190" in result.detail
    assert not CampaignSpend.objects.exists() and not Campaign.objects.exists()
    item = ExceptionItem.objects.get(kind="spend_token", subject=meta.public_id, status="open")
    assert item.owner == manager and "access token" in item.detail
    assert Receipt.objects.filter(action="spend.pull_failed", subject=meta.public_id).exists()
    assert META_TOKEN not in item.detail

    assert spend_pull(meta, days=5).status == "pulled"
    item.refresh_from_db()
    assert item.status == "resolved" and CampaignSpend.objects.count() == 15


def test_a_server_error_is_a_passing_failure_with_no_item(business, graph, settings) -> None:
    settings.META_GRAPH_ATTEMPTS = 2
    meta = meta_account(business)
    plant(graph, business, days=2)
    graph.default = 500

    result = spend_pull(meta, days=2)

    assert result.status == "failed" and "after 2 attempts" in result.detail
    assert len(graph.seen) == 2  # retried once
    assert not CampaignSpend.objects.exists() and not ExceptionItem.objects.exists()
    assert Receipt.objects.filter(action="spend.pull_failed", subject=meta.public_id).exists()


def test_an_ad_account_in_another_currency_is_refused(business, graph) -> None:
    meta = meta_account(business)
    plant(graph, business, days=2, currency="CAD")

    result = spend_pull(meta, days=2)

    assert result.status == "refused" and "CAD" in result.detail
    assert not CampaignSpend.objects.exists()
    assert ExceptionItem.objects.filter(kind="spend_currency", subject=meta.public_id).exists()


def test_an_account_without_an_ad_account_id_is_skipped_saying_so(business, graph) -> None:
    _, meta = accounts(business)
    result = spend_pull(meta)
    assert result.status == "skipped" and "ad_account_id" in result.detail
    assert graph.seen == [] and not Receipt.objects.filter(action__startswith="spend.").exists()
