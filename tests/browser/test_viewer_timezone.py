"""A setter in Chicago reads the admin's lead list and the daily brief in a
real browser: every time on Chicago's clock, the zone named, in LeadOps' look.

Screenshots go to SCREENSHOT_DIR (docs/screenshots/ holds the committed ones:
`SCREENSHOT_DIR=docs/screenshots pytest tests/browser/test_viewer_timezone.py`).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from crm.models import Role, Source, Stage
from crm.services import lead_sync
from crm.services.records import contact_create, lead_open, task_create
from tests.factories import BusinessFactory, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"
# Thursday 15 January 2026, 15:30 UTC: 09:30 in Chicago (CST).
DUE = datetime(2026, 1, 15, 15, 30, tzinfo=UTC)
PEOPLE = [
    ("Rosa", "Diaz", "+13125550147", Stage.ENGAGED, "Ask about the system's age"),
    ("Omar", "Haddad", "+13125550148", Stage.CONTACTED, "Call again if there is no reply"),
    ("Grace", "Kim", "+13125550149", Stage.QUALIFIED, "Offer two visit times"),
    ("Diego", "Ramírez", "+13125550150", Stage.ASSIGNED, "First call"),
]


def test_a_chicago_setter_reads_the_lead_list_and_the_brief_on_chicago_time(live_server, browser_context, tmp_path):
    business = BusinessFactory.create(slug="acme", name="Acme Heating & Air", timezone="America/Chicago")
    sam = member_create(business, Role.SETTER, username="sam", display_name="Sam Setter")
    source = Source.objects.create(business=business, key="site", provider="website", secret="s")
    for first, last, phone, stage, action in PEOPLE:
        contact = contact_create(business=business, actor="t", first_name=first, last_name=last, phones=[phone])
        lead = lead_open(contact=contact, actor="t", source=source, touch={"channel": "form"})
        lead_sync.lead_assign(lead, sam, actor="t", reason="test")
        path = [Stage.CONTACTED, Stage.ENGAGED, Stage.QUALIFIED]
        for step in path[: path.index(stage) + 1] if stage in path else []:
            lead_sync.lead_transition(lead, step, actor="sam", reason="test")
        lead_sync.lead_set_next_action(lead, action, DUE, actor="sam", reason="test")
        task_create(lead=lead, title=action, due_at=DUE, actor="sam")
    shots = Path(os.environ.get("SCREENSHOT_DIR", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)

    page = browser_context.new_page()
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{live_server.url}/admin/login/")
    assert "LeadOps" in page.inner_text("#site-name")
    page.fill("#id_username", "sam")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")
    assert "America/Chicago" in page.inner_text("#viewer-zone")

    page.goto(f"{live_server.url}/admin/crm/lead/")
    page.wait_for_selector("#result_list")
    due = page.locator("#result_list td.field-next_action_due_at")
    assert due.count() == len(PEOPLE)
    assert set(due.all_inner_texts()) == {"Jan. 15, 2026, 9:30 a.m."}  # 15:30 UTC, on Chicago's clock
    assert "America/Chicago" in page.inner_text("#viewer-zone")
    # Our look, not the stock admin's: the header is LeadOps' ink, not Django's blue.
    header_bg = page.evaluate("getComputedStyle(document.getElementById('header')).backgroundColor")
    assert header_bg == "rgb(30, 27, 75)"
    page.click("#toggle-nav-sidebar")  # the list's full width, due times in view
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(shots / "admin-theme.png"))

    page.click("#nav-brief")
    page.wait_for_selector("#daily-brief")
    brief = page.inner_text("#daily-brief")
    assert "Overdue since Thu 09:30: First call" in brief
    assert "times in America/Chicago (C" in brief  # CST or CDT, as of today
    assert page.title() == "Daily brief | LeadOps"
    page.screenshot(path=str(shots / "report-brief.png"), full_page=True)

    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{live_server.url}/admin/my/next-actions/")
    page.wait_for_selector("#tasks")
    assert page.locator("#tasks tr.task td").first.inner_text() == "2026-01-15 09:30 CST overdue"
    # One column at a phone's width: nothing runs off the side.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(shots / "next-actions-phone.png"), full_page=True)
