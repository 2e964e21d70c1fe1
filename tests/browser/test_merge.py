"""A manager approves a merge of two records of one person in the browser,
and the surviving lead's thread shows both histories as one conversation."""

from __future__ import annotations

from datetime import time, timedelta

import pytest
from django.utils import timezone

from agents.capture.base import Capture
from agents.capture.identity import capture_apply
from agents.followup.replies import reply_record
from approvals.models import ApprovalRequest
from crm.models import Business, Contact, Lead, Role
from crm.services.conversations import note_add
from tests.factories import BusinessFactory, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"
PHONE, EMAIL = "+13125550177", "rosa.diaz@example.com"


@pytest.fixture
def business() -> Business:
    return BusinessFactory.create(
        slug="acme",
        name="Acme Heating & Air",
        timezone="America/Chicago",
        quiet_hours_start=time(0, 0),
        quiet_hours_end=time(23, 59, 59),
    )


def captured(business: Business, **kw: object) -> Lead:
    capture = Capture(channel="form", occurred_at=timezone.now() - timedelta(hours=2), **kw)  # type: ignore[arg-type]
    return capture_apply(business=business, capture=capture).lead


def test_a_manager_approves_a_merge_and_the_thread_shows_both_histories(live_server, browser_context, business, shots):
    member_create(business, Role.MANAGER, username="mia", display_name="Mia Manager")
    # One person, twice: a text from her phone, a form with her email.
    by_phone = captured(business, phones=[PHONE], first_name="Rosa")
    reply_record(by_phone, channel="sms", body="Is anyone free to look at my furnace?", actor="test")
    by_email = captured(business, emails=[EMAIL], first_name="Rosa", last_name="Diaz")
    reply_record(by_email, channel="email", body="Here are photos of the furnace label.", actor="test")
    note_add(by_email, author="mia", body="Sent photos by email; prefers mornings.")
    # Then both at once: the capture cannot tell which record is her and asks a person.
    captured(business, phones=[PHONE], emails=[EMAIL], first_name="Rosa")
    request = ApprovalRequest.objects.get(kind="merge_contacts", status="pending")

    page = browser_context.new_page()
    page.set_default_timeout(10_000)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/approvals/approvalrequest/{request.pk}/change/")
    page.fill("#id_username", "mia")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#decision-form")
    assert "Same person?" in page.content()
    page.click("#approve-button")
    page.wait_for_selector(".messagelist .success")

    merged = Contact.objects.select_related("merged_into").get(merged_into__isnull=False)
    keep = merged.merged_into
    assert keep is not None
    survivor = Lead.objects.get(contact=keep, merged_into__isnull=True)
    assert {by_phone.contact_id, by_email.contact_id} == {keep.pk, merged.pk}

    # The merged record's page leads to the person it became.
    page.goto(f"{live_server.url}/admin/crm/contact/{merged.pk}/change/")
    page.wait_for_url(f"**/admin/crm/contact/{keep.pk}/change/")

    page.goto(f"{live_server.url}/app/leads/{survivor.public_id}/")
    page.wait_for_selector("#conversation")
    conversation = page.locator("#conversation").inner_text()
    for said in (
        "Is anyone free to look at my furnace?",
        "Here are photos of the furnace label.",
        "Sent photos by email; prefers mornings.",
    ):
        assert said in conversation, said
    header = page.locator("#thread-head").inner_text()
    assert "Rosa Diaz" in header and PHONE in header and EMAIL in header
    page.screenshot(path=str(shots / "merged-thread.png"), full_page=True)
