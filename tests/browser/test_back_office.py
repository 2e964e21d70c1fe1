"""A setter and a manager use the back office in a real browser."""

from __future__ import annotations

import pytest

from crm.models import Role
from crm.services import lead_sync
from tests.factories import BusinessFactory, lead_create, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests-1"


def log_in(page, base: str, username: str) -> None:
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")


def lead_ids_shown(page, base: str) -> set[str]:
    page.goto(f"{base}/admin/crm/lead/")
    page.wait_for_selector("#result_list")
    return {text.strip() for text in page.locator("#result_list tbody th a").all_inner_texts()}


def test_setter_sees_own_leads_and_timeline_manager_sees_all(live_server, browser_context):
    business = BusinessFactory.create(slug="acme", name="Acme Heating & Air")
    sam = member_create(business, Role.SETTER, username="sam")
    sara = member_create(business, Role.SETTER, username="sara")
    member_create(business, Role.MANAGER, username="mia")
    mine = lead_sync.lead_assign(
        lead_create(business, first_name="Ana", phone="+12125550101"), sam, actor="mia", reason="demo"
    )
    lead_sync.lead_transition(mine, "contacted", actor="sam", reason="called back")
    theirs = lead_sync.lead_assign(
        lead_create(business, first_name="Ben", phone="+12125550102"), sara, actor="mia", reason="demo"
    )
    base = live_server.url

    page = browser_context.new_page()
    log_in(page, base, "sam")
    assert lead_ids_shown(page, base) == {mine.public_id}

    page.click(f"text={mine.public_id}")
    page.wait_for_selector("#timeline")
    entries = page.locator("#timeline li")
    assert entries.count() >= 4  # touch, created, assigned, stage change
    timeline_text = page.locator("#timeline").inner_text()
    assert "lead.stage_changed by sam" in timeline_text
    times = page.locator("#timeline time").evaluate_all("els => els.map(e => e.getAttribute('datetime'))")
    assert times == sorted(times)

    # Typing another setter's lead URL shows nothing of it.
    page.goto(f"{base}/admin/crm/lead/{theirs.pk}/change/")
    assert theirs.public_id not in page.content()

    page.context.clear_cookies()
    log_in(page, base, "mia")
    assert lead_ids_shown(page, base) == {mine.public_id, theirs.public_id}
