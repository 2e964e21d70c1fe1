"""Where LeadOps meets the contractor's other systems, in a real browser:
the sync status page an owner checks (a connection that needs them says
so, times in their zone), and the thread saying what line a number is."""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from crm.models import NumberLookup, Role, SyncConnection
from tests.factories import BusinessFactory, lead_create, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"


def log_in(page, base: str, username: str) -> None:
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")


def test_an_owner_sees_which_connection_needs_them_in_their_own_zone(live_server, browser_context, shots, settings):
    settings.JOBBER_CLIENT_ID, settings.JOBBER_CLIENT_SECRET = "jobber-app", "jobber-secret"
    acme = BusinessFactory.create(slug="acme", name="Acme Heating & Air", timezone="America/Chicago")
    member_create(acme, Role.OWNER, username="olivia")
    refused = timezone.now() - timedelta(minutes=20)
    SyncConnection.objects.create(
        business=acme,
        provider="jobber",
        account_id="acct-1",
        account_name="Acme Heating (Jobber)",
        status=SyncConnection.Status.REAUTHORIZE,
        last_success_at=refused - timedelta(hours=3),
        last_error_at=refused,
        last_error="Jobber refused the refresh token: the app was disconnected",
    )
    page = browser_context.new_page()
    log_in(page, live_server.url, "olivia")

    page.goto(f"{live_server.url}/admin/sync/")
    row = page.locator("#sync-connections tbody tr")
    assert row.get_attribute("data-status") == "reauthorize"
    text = row.inner_text()
    assert "Jobber" in text and "reconnect needed" in text and "the app was disconnected" in text
    # Said in the viewer's zone (an owner without one of their own: the business's), whole on hover.
    title = row.locator(".last-error time").get_attribute("title") or ""
    assert refused.astimezone(ZoneInfo("America/Chicago")).strftime("%-I:%M %p CST (America/Chicago)") in title
    # Jobber is offered again (to reconnect); the calendars, never connected, are offered to connect.
    buttons = page.locator("#sync-offers button").all_inner_texts()
    assert "Reconnect Jobber" in buttons and "Connect Jobber" not in buttons
    page.screenshot(path=str(shots / "sync-status.png"), full_page=True)


def test_the_thread_says_a_number_is_a_landline(live_server, browser_context, shots):
    acme = BusinessFactory.create(slug="acme", name="Acme Heating & Air", timezone="America/Chicago")
    member_create(acme, Role.MANAGER, username="mia")
    lead = lead_create(acme, phone="+12125550147", first_name="Rosa", last_name="Diaz")
    NumberLookup.objects.create(number="+12125550147", line_type="landline", looked_up_at=timezone.now())
    page = browser_context.new_page()
    log_in(page, live_server.url, "mia")

    page.goto(f"{live_server.url}/app/leads/{lead.public_id}/")

    assert page.locator("#thread-head .line-type").inner_text() == "landline"
    page.locator("#thread-head").screenshot(path=str(shots / "thread-line-type.png"))
