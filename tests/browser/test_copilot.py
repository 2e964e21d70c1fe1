"""A setter answers a lead with the copilot — now the workspace's thread —
in a real browser, reached from the lead's page in the back office and
from the copilot's old address."""

from __future__ import annotations

from datetime import time

import pytest

from approvals.models import ApprovalRequest
from crm.models import Message, MessageTemplate, Role
from crm.services import lead_sync
from crm.services.consent import consent_record
from tests.factories import BusinessFactory, lead_create, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"


def test_a_setter_sends_the_suggested_reply_and_a_risky_edit_waits_for_a_manager(live_server, browser_context):
    # Quiet hours wide open, so the test does not depend on the hour it runs at.
    business = BusinessFactory.create(
        slug="acme", name="Acme", quiet_hours_start=time(0, 0), quiet_hours_end=time(23, 59, 59)
    )
    MessageTemplate.objects.create(
        business=business,
        key="ack_sms",
        channel="sms",
        approved=True,
        body="Hi {first_name}, this is {business}. We got your request. Reply STOP to opt out.",
    )
    sam = member_create(business, Role.SETTER, username="sam")
    lead = lead_sync.lead_assign(lead_create(business, first_name="Rosa"), sam, actor="mia", reason="demo")
    consent_record(
        contact_point=lead.contact.points.get(), channel="sms", granted=True, basis="form_disclosure", actor="t"
    )

    page = browser_context.new_page()
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "sam")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.goto(f"{live_server.url}/admin/crm/lead/{lead.pk}/change/")
    page.click("#open-thread")
    page.wait_for_selector("#composer")
    assert "sms to +12125550147: yes, form_disclosure" in page.inner_text("[data-key=may_contact]")
    # Nobody wrote: the composer starts empty, and the setter picks the approved text.
    assert page.input_value("#id_body") == ""
    page.select_option("#template-picker", "ack_sms")
    assert page.input_value("#id_body") == "Hi Rosa, this is Acme. We got your request. Reply STOP to opt out."
    assert page.inner_text("#picked-state") == "Approved text, unmodified."

    page.click("#send-reply")
    page.wait_for_selector("#send-verdict >> text=Recorded, not sent (dry run)")
    sent = Message.objects.get(direction="out")
    assert (sent.status, sent.actor, sent.automated, sent.template_key) == ("dry_run", "sam", False, "ack_sms")

    page.select_option("#template-picker", "ack_sms")
    page.fill("#id_body", "We can do it for $199 tomorrow by 9am, guaranteed.")
    assert page.inner_text("#picked-state").startswith("Edited: your own words now")
    page.click("#send-reply")
    page.wait_for_selector("#send-verdict >> text=Waiting for approval")
    risky = Message.objects.filter(direction="out").order_by("-pk").first()
    assert risky.status == "pending_approval"
    assert ApprovalRequest.objects.get(kind="message_draft").payload["message"] == risky.public_id

    # The copilot's old address lands on the same thread.
    page.goto(f"{live_server.url}/admin/leads/{lead.public_id}/copilot/")
    page.wait_for_url(f"**/app/leads/{lead.public_id}/")
    assert page.locator(f"#conversation #{risky.public_id}").count() == 1
