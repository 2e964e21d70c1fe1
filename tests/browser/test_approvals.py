"""Managers work the approval queue in a real browser: one rewords a drafted
reply (which makes it her proposal), another approves it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from approvals.handlers import APPROVAL_HANDLERS
from approvals.models import ApprovalRequest
from approvals.services import approval_request_open
from crm.models import Receipt, Role
from tests.factories import BusinessFactory, lead_create, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests-1"
QUEUE = "/admin/approvals/approvalrequest/"


@pytest.fixture(autouse=True)
def no_registered_handlers() -> Iterator[None]:
    # Sending the approved draft is the send gate's handler; this test is the gate's own side.
    with APPROVAL_HANDLERS.replaced():
        yield


def log_in(page, base: str, username: str) -> None:
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")


def test_a_manager_rewords_a_drafted_reply_and_another_approves_it_from_the_queue(live_server, browser_context):
    business = BusinessFactory.create(slug="acme", name="Acme Heating & Air")
    member_create(business, Role.MANAGER, username="mia")
    member_create(business, Role.MANAGER, username="max")
    proposed = {"body": "Hi Ana, a furnace tune-up is $89 and we can be there by 3pm.", "channel": "sms"}
    draft = approval_request_open(
        business=business,
        lead=lead_create(business, first_name="Ana", phone="+12125550101"),
        kind="message_draft",
        summary="The reply names a price and an arrival time",
        proposed_by="agent:sms_assistant",
        payload=proposed,
    )
    merge = approval_request_open(
        business=business,
        lead=lead_create(business, first_name="Ben", phone="+12125550102"),
        kind="merge_contacts",
        summary="Same person?",
        proposed_by="agent:identity",
        payload={"keep": "cont_a", "merge": ["cont_b"]},
    )
    edited = "Hi Ana, thanks for reaching out! Sam will call you shortly to find a time that suits you."
    base = live_server.url

    page = browser_context.new_page()
    log_in(page, base, "mia")
    page.goto(f"{base}{QUEUE}")
    page.wait_for_selector("#result_list")
    queued = {text.strip() for text in page.locator("#result_list tbody th a").all_inner_texts()}
    assert queued == {draft.public_id, merge.public_id}

    page.locator("#changelist-filter").get_by_role("link", name="Message Draft", exact=True).click()
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody th a").all_inner_texts() == [draft.public_id]

    page.click(f"text={draft.public_id}")
    page.wait_for_selector("#decision-form")
    assert page.input_value("#id_body") == proposed["body"]
    page.fill("#id_body", edited)
    page.fill("#id_note", "No prices or arrival times by text")
    page.click("#approve-button")

    # Rewording makes it mia's proposal: saved, still pending, for someone else.
    page.wait_for_selector(".messagelist .warning")
    assert f"Your edit of {draft.public_id} is saved as your proposal" in page.locator(".messagelist").inner_text()
    draft.refresh_from_db()
    assert (draft.status, draft.proposed_by, draft.decided_by) == (ApprovalRequest.Status.PENDING, "mia", None)
    assert draft.payload == {**proposed, "body": edited} and draft.original_payload == proposed
    edit = Receipt.objects.get(subject=draft.public_id, action="approval.edited")
    assert (edit.actor, edit.reason) == ("mia", "No prices or arrival times by text")
    assert edit.before == {"proposed_by": "agent:sms_assistant", "payload": proposed}

    browser_context.clear_cookies()
    log_in(page, base, "max")
    page.goto(f"{base}{QUEUE}{draft.pk}/change/")
    page.wait_for_selector("#decision-form")
    assert page.input_value("#id_body") == edited
    page.click("#approve-button")

    page.wait_for_selector(".messagelist .success")
    assert f"Approved {draft.public_id}" in page.locator(".messagelist").inner_text()
    assert page.locator("#decision-form").count() == 0
    assert "Approved" in page.locator(".field-status").inner_text()

    draft.refresh_from_db()
    assert (draft.status, draft.decided_by.username) == (ApprovalRequest.Status.APPROVED, "max")
    assert draft.payload == {**proposed, "body": edited} and draft.original_payload == proposed
    receipt = Receipt.objects.get(subject=draft.public_id, action="approval.approved")
    assert (receipt.actor, receipt.before, receipt.after) == ("max", {"status": "pending"}, {"status": "approved"})
    assert ApprovalRequest.objects.get(pk=merge.pk).status == ApprovalRequest.Status.PENDING


def test_an_approved_draft_goes_out_through_the_gate_and_shows_on_the_lead(live_server, browser_context):
    from datetime import time

    from agents import decisions
    from agents.outbound.gate import message_send
    from crm.services.consent import consent_record

    decisions.register()  # the real handlers, inside this test's replaced registry
    # Quiet hours wide open, so the test does not depend on the hour it runs at.
    business = BusinessFactory.create(
        slug="acme", name="Acme", quiet_hours_start=time(0, 0), quiet_hours_end=time(23, 59, 59)
    )
    member_create(business, Role.MANAGER, username="mia")
    member_create(business, Role.MANAGER, username="max")
    lead = lead_create(business, first_name="Ana", phone="+12125550101")
    consent_record(
        contact_point=lead.contact.points.get(), channel="sms", granted=True, basis="form_disclosure", actor="t"
    )
    draft = message_send(
        lead=lead,
        channel="sms",
        body="We'll be there by 3pm for $89.",
        actor="agent:sms_assistant",
        idempotency_key="browser-draft",
        automated=False,
        needs_approval=True,
    )
    request = ApprovalRequest.objects.get(kind="message_draft")
    base = live_server.url

    page = browser_context.new_page()
    log_in(page, base, "mia")
    page.goto(f"{base}{QUEUE}{request.pk}/change/")
    page.wait_for_selector("#decision-form")
    page.fill("#id_body", "Thanks Ana! Sam will call you shortly to find a time.")
    page.click("#edit-button")
    page.wait_for_selector(".messagelist .warning")
    draft.refresh_from_db()
    assert draft.status == "pending_approval"  # mia's words now: another person approves them
    page.context.clear_cookies()
    log_in(page, base, "max")
    page.goto(f"{base}{QUEUE}{request.pk}/change/")
    page.wait_for_selector("#decision-form")
    page.click("#approve-button")
    page.wait_for_selector(".messagelist .success")

    draft.refresh_from_db()
    assert (draft.status, draft.body) == ("dry_run", "Thanks Ana! Sam will call you shortly to find a time.")
    page.goto(f"{base}/admin/crm/lead/{lead.pk}/change/")
    page.wait_for_selector("#timeline")
    assert "→ sms dry_run" in page.locator("#timeline").inner_text()
