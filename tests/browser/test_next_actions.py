"""A setter works their "My next actions" list in a real browser."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from crm.models import Lead, Role, Task
from crm.services import lead_sync
from crm.services.next_action import next_action_set
from tests.factories import BusinessFactory, lead_create, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"


def test_a_setter_completes_a_task_and_sets_the_next_one(live_server, browser_context):
    business = BusinessFactory.create(slug="acme", name="Acme", timezone="UTC")
    sam = member_create(business, Role.SETTER, username="sam")
    other = member_create(business, Role.SETTER, username="ola")
    now = timezone.now()
    late = lead_sync.lead_assign(lead_create(business, first_name="Late"), sam, actor="t", reason="t")
    soon = lead_sync.lead_assign(
        lead_create(business, first_name="Soon", phone="+12125550148"), sam, actor="t", reason="t"
    )
    theirs = lead_sync.lead_assign(
        lead_create(business, first_name="Theirs", phone="+12125550149"), other, actor="t", reason="t"
    )
    next_action_set(soon, "Send the quote", now + timedelta(hours=2), actor="t", reason="t")
    overdue = next_action_set(late, "First contact: reach Late Doe", now - timedelta(hours=1), actor="t", reason="t")
    next_action_set(theirs, "Not mine", now - timedelta(hours=3), actor="t", reason="t")

    page = browser_context.new_page()
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "sam")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.click("#back-office-nav >> text=My next actions")
    page.wait_for_selector("#tasks")
    titles = page.locator("#tasks .title").all_inner_texts()
    assert titles == ["First contact: reach Late Doe", "Send the quote"], "overdue first, only mine"
    assert page.inner_text("[data-count=overdue]") == "1"

    page.click(f"tr[data-task={overdue.public_id}] >> text=Complete")
    page.fill("#id_outcome", "Talked to them, wants a quote")
    page.click("#complete-submit")
    page.wait_for_selector(".errornote, .errorlist")
    assert "set the next action" in page.inner_text("#complete-form")

    page.fill("#id_outcome", "Talked to them, wants a quote")
    page.check("#id_reached")
    page.fill("#id_next_title", "Book the estimate visit")
    page.fill("#id_next_due", (now + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"))
    page.click("#complete-submit")
    page.wait_for_selector("#tasks")
    assert page.locator("#tasks .title").all_inner_texts() == ["Send the quote", "Book the estimate visit"]

    overdue.refresh_from_db()
    assert (overdue.status, overdue.outcome, overdue.completed_by) == ("done", "Talked to them, wants a quote", "sam")
    late = Lead.objects.get(pk=late.pk)
    assert late.next_action == "Book the estimate visit" and late.stage == "contacted"
    assert late.first_response_at is not None and late.speed_to_lead_seconds is not None
    assert Task.objects.filter(lead=late, kind="next_action", status="open").count() == 1
