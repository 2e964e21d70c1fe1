"""An owner replays a dead letter from the inbound events' admin (leadops'
admin: replaying runs agents' processing), in a real browser."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.utils import timezone

from crm.models import InboundEvent, Lead, Role, Source
from tests.factories import BusinessFactory, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests-1"
BODY = b'{"first_name": "Rosa", "phone": "(212) 555-0147", "message": "furnace", "consent": true}'


def test_an_owner_replays_a_failed_event_and_it_is_processed(live_server, browser_context, tmp_path: Path):
    business = BusinessFactory.create(slug="acme", name="Acme Heating & Air", timezone="America/New_York")
    member_create(business, Role.OWNER, username="olivia")
    source = Source.objects.create(business=business, key="site", provider="website", secret="s")
    event = InboundEvent.objects.create(
        provider="website",
        external_id="site:dead-1",
        body=BODY,
        headers={"Content-Type": "application/json"},
        source=source,
        business=business,
        kind="form",
        status="failed",
        error="a worker gave up",
        attempts=5,
        signature_ok=True,
        received_at=timezone.now(),
    )
    shots = Path(os.environ.get("SCREENSHOT_DIR", tmp_path))

    page = browser_context.new_page()
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "olivia")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")
    page.goto(f"{live_server.url}/admin/crm/inboundevent/?status__exact=failed")
    page.check(f"#result_list input[name=_selected_action][value='{event.pk}']")
    page.screenshot(path=str(shots / "dead-letters.png"), full_page=True)
    page.select_option("select[name=action]", "replay")
    page.click("button[name=index]")

    page.wait_for_selector(".messagelist")
    assert "Replayed: 1 processed." in page.locator(".messagelist").inner_text()
    page.screenshot(path=str(shots / "replayed.png"), full_page=True)
    event.refresh_from_db()
    assert event.status == "processed" and Lead.objects.filter(business=business).count() == 1
