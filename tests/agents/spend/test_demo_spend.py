"""The demo shop's month of spend: ROAS on the revenue page's first view."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client

from agents.reporting.spend import campaign_returns
from crm.models import Business, CampaignSpend, Role, TeamMember
from devtools.demo import DEMO_SLUG
from devtools.demo_spend import DAYS

pytestmark = pytest.mark.django_db


def test_the_demo_gets_a_month_of_spend_for_its_campaigns_once_and_shows_roas() -> None:
    call_command("load_demo", stdout=StringIO())
    business = Business.objects.get(slug=DEMO_SLUG)
    rows = CampaignSpend.objects.filter(business=business)
    assert rows.count() == 2 * DAYS
    assert set(rows.values_list("campaign__campaign_id", flat=True)) == {"20412345678", "120210000000001"}

    returns = campaign_returns(business, None, None)
    by_key = {row.key: row for row in returns.campaigns}
    google = by_key["20412345678"]
    assert google.spend and google.leads and google.cost_per_lead is not None
    assert any(row.roas for row in returns.campaigns), "a demo campaign's leads have paid"

    call_command("load_demo", stdout=StringIO())
    assert CampaignSpend.objects.filter(business=business).count() == 2 * DAYS  # once

    client = Client()
    owner = TeamMember.objects.filter(business=business, role=Role.OWNER).select_related("user").first()
    assert owner is not None
    client.force_login(owner.user)
    html = client.get("/admin/revenue/").content.decode()
    assert "Spend and return" in html and "Furnace repair - Chicago" in html and "×" in html
