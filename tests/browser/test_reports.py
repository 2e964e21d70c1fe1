"""An owner reads the daily brief, follows a link to the lead, and opens the
funnel with its chart, in a real browser."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.routing.sla import sla_check
from crm.models import Lead, Role, Source
from crm.services import lead_sync
from crm.services.records import appointment_record, contact_create, lead_open
from tests.factories import BusinessFactory, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"


def test_an_owner_opens_the_brief_follows_a_link_and_opens_the_funnel(live_server, browser_context):
    business = BusinessFactory.create(slug="acme", name="Acme Heating & Air", timezone="America/Chicago")
    member_create(business, Role.OWNER, username="olga")
    sam = member_create(business, Role.SETTER, username="sam")
    source = Source.objects.create(business=business, key="site", provider="website", secret="s")
    contact = contact_create(business=business, actor="t", first_name="Rosa", last_name="Diaz", phones=["+12125550147"])
    lead = lead_open(contact=contact, actor="t", source=source, touch={"channel": "form"})
    lead_sync.lead_assign(lead, sam, actor="t", reason="demo")
    sla_check(lead, now=timezone.now())
    start = timezone.now() - timedelta(days=1)
    appointment_record(lead=lead, starts_at=start, ends_at=start + timedelta(hours=1), actor="t", status="held")

    page = browser_context.new_page()
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "olga")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")

    page.click("#nav-brief")
    page.wait_for_selector("#daily-brief")
    item = page.locator(".brief-sla a").first
    assert item.inner_text() == f"First response overdue: Rosa Diaz ({lead.public_id})"
    item.click()
    page.wait_for_selector("#timeline")
    assert lead.public_id in page.inner_text("#content")
    assert "sla.breached" in page.inner_text("#timeline")

    page.click("#open-trace")
    page.wait_for_selector("#trace")
    assert page.get_attribute("[data-key=source]", "data-ok") == "true"
    assert "First break: may_contact" in page.inner_text("#first-break")

    page.click("#nav-funnel")
    chart = page.locator("svg#funnel-chart")
    chart.wait_for()
    assert chart.locator("g.bar").count() == 7
    leads_bar = chart.locator("g.bar[data-label=Leads]")
    assert leads_bar.get_attribute("data-value") == "1"
    assert chart.locator("g.bar[data-label='Appointment held'] rect").bounding_box()["width"] > 100
    assert page.inner_text("#funnel-table tr.total th") == "all"
    assert Lead.objects.count() == 1
