"""Approvals in the workspace in a real browser: a manager rejects a held
reply with a note from inside the thread and the setter finds it unread in
their inbox and thread; a manager rewords a held reply, the owner sees the
change as a diff and approves it, and the approved text goes out. The
screenshots docs/workspace.md shows are made here."""

from __future__ import annotations

from datetime import time, timedelta

import pytest
from django.utils import timezone

from agents.followup.replies import reply_record
from agents.playbook.copilot import reply_send
from approvals.models import ApprovalRequest
from crm.models import Business, Lead, Message, Note, Role, TeamMember
from crm.services import lead_sync
from crm.services.records import contact_create, lead_open
from tests.factories import BusinessFactory, member_create
from tests.helpers.followup import consent_all

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"
RISKY = "Hi Rosa, the repair is $199, tomorrow by 9am, guaranteed."
REWORDED = "Hi Rosa, thanks! Mia will call you shortly about a visit and the price."


@pytest.fixture
def business() -> Business:
    # Quiet hours wide open: what the gate says must not depend on the hour the tests run at.
    return BusinessFactory.create(
        slug="acme",
        name="Acme Heating & Air",
        timezone="America/Chicago",
        quiet_hours_start=time(0, 0),
        quiet_hours_end=time(23, 59, 59),
    )


@pytest.fixture
def team(business: Business) -> dict[str, TeamMember]:
    return {
        "sam": member_create(business, Role.SETTER, username="sam", display_name="Sam Setter"),
        "mia": member_create(business, Role.MANAGER, username="mia", display_name="Mia Manager"),
        "olivia": member_create(business, Role.OWNER, username="olivia", display_name="Olivia Owner"),
    }


def rosa_with_a_held_reply(business: Business, sam: TeamMember) -> tuple[Lead, ApprovalRequest]:
    contact = contact_create(
        business=business,
        actor="test",
        first_name="Rosa",
        last_name="Diaz",
        phones=["+12125550147"],
        emails=["rosa.diaz@example.com"],
    )
    lead = lead_open(
        contact=contact,
        actor="test",
        request_text="Furnace bangs when it starts up.",
        received_at=timezone.now() - timedelta(minutes=50),
        touch={"channel": "form"},
    )
    lead = lead_sync.lead_assign(lead, sam, actor="test", reason="round robin")
    consent_all(lead, at=timezone.now())
    reply_record(
        lead, channel="sms", body="How much to fix it, and when can you come?", actor="test", now=timezone.now()
    )
    held = reply_send(lead, user=sam.user, body=RISKY, form_key="risky")
    assert held.status == Message.Status.PENDING_APPROVAL
    return lead, ApprovalRequest.objects.get(message=held)


def log_in(context, live_server, username: str, *, path: str):
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.goto(f"{live_server.url}/admin/login/?next={path}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"**{path}")
    return page


def shoot(element, path) -> None:
    """A screenshot of one element, clear of the sticky top bar."""
    element.evaluate("el => el.scrollIntoView({block: 'center'})")
    element.screenshot(path=str(path))


def test_a_manager_rejects_a_held_reply_with_a_note_and_the_setter_reads_it_unread(
    live_server, browser, business, team, shots
):
    lead, request = rosa_with_a_held_reply(business, team["sam"])
    panel = f"#decide-{request.public_id}"

    mia = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = log_in(mia, live_server, "mia", path="/app/approvals/")
        assert page.inner_text("#approvals-badge") == "1"
        row = page.locator(f'.approval-row[data-approval="{request.public_id}"]')
        assert "Rosa Diaz" in row.inner_text() and "a price “$199”" in row.inner_text()
        page.screenshot(path=str(shots / "approvals.png"), full_page=True)

        row.locator(".row-name").click()
        page.wait_for_url(f"**/app/leads/{lead.public_id}/#decide-{request.public_id}")
        assert "How much to fix it" in page.inner_text("#conversation"), "the conversation is above"
        assert "The claims guard found" in page.inner_text(panel)
        held = page.inner_text("#conversation .held-pending")
        assert "It promises a price “$199”" in held and "Mia Manager or Olivia Owner decides" in held
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(shots / "approval-thread.png"), full_page=True)
        page.click(f"{panel} .decide-reject summary")
        page.fill(f"{panel} textarea[name=note]", "No prices or times by text: call her and book the visit.")
        shoot(page.locator(panel), shots / "approval-decide.png")
        page.click(f"{panel} .decide-reject-submit")
        page.wait_for_selector(f"{panel}.is-decided >> text=Rejected")
        page.wait_for_selector("#conversation .held-rejected >> text=Rejected")
        page.wait_for_selector("#approvals-badge.is-empty", state="attached")
    finally:
        mia.close()

    request.refresh_from_db()
    assert (request.status, request.decided_by.username) == ("rejected", "mia")

    sam = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = log_in(sam, live_server, "sam", path="/app/inbox/")
        row = page.locator(f'#rows .row[data-lead="{lead.public_id}"]')
        assert "is-unread" in (row.get_attribute("class") or "")
        assert row.locator(".count").inner_text() == "2", "her text and the decision, both unread"
        assert page.inner_text("#unread-badge") == "1"
        assert page.locator("#nav-approvals").count() == 0, "a setter decides nothing"
        page.screenshot(path=str(shots / "decision-unread.png"))

        row.locator(".row-name").click()
        page.wait_for_url(f"**/app/leads/{lead.public_id}/")
        decision = page.locator("#conversation .note-decision.is-for-you")
        assert "No prices or times by text: call her and book the visit." in decision.inner_text()
        assert "Decision by mia · for you" in decision.inner_text()
        assert "CST" in decision.inner_text() or "CDT" in decision.inner_text(), "in the viewer's zone"
        page.screenshot(path=str(shots / "decision-thread.png"), full_page=True)
        page.wait_for_selector("#unread-badge.is-empty", state="attached", timeout=5000)
    finally:
        sam.close()
    assert Note.objects.get(kind=Note.Kind.DECISION).addressee == team["sam"].user


def test_an_edit_shows_as_a_diff_and_the_approved_text_goes_out(live_server, browser, business, team, shots):
    lead, request = rosa_with_a_held_reply(business, team["sam"])
    panel = f"#decide-{request.public_id}"

    mia = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = log_in(mia, live_server, "mia", path=f"/app/leads/{lead.public_id}/")
        page.click(f"{panel} .decide-edit summary")
        page.fill(f"{panel} textarea[name=body]", REWORDED)
        page.click(f"{panel} .decide-edit-submit")
        page.wait_for_selector(f"{panel} .said-success >> text=Your edit is saved as your proposal")
        assert page.locator(f"{panel} .decide-approve").count() == 0, "nobody approves their own words"
        assert "You proposed these words" in page.inner_text(panel)
    finally:
        mia.close()

    olivia = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = log_in(olivia, live_server, "olivia", path="/app/approvals/")
        page.click(f'.approval-row[data-approval="{request.public_id}"] .row-name')
        page.wait_for_selector(panel)
        removed = page.locator(f"{panel} .changes del").first.inner_text()
        assert removed == "the repair is $199, tomorrow by 9am, guaranteed."
        assert "Mia will call you shortly" in page.locator(f"{panel} .changes ins").first.inner_text()
        assert "The claims guard finds no promise in it." in page.inner_text(panel)
        shoot(page.locator(panel), shots / "approval-diff.png")

        page.click(f"{panel} .decide-approve")
        page.wait_for_selector(f"{panel} .said-success >> text=Recorded, not sent (dry run)")
        message = request.message
        page.wait_for_selector(f"#{message.public_id} >> text=Recorded, not sent (dry run)")
        assert REWORDED in page.inner_text(f"#{message.public_id} .bubble")
        assert "with edits by mia" in page.inner_text(f"#{message.public_id} .held-approved")
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(shots / "approval-approved.png"), full_page=True)
    finally:
        olivia.close()

    message.refresh_from_db()
    assert (message.status, message.body) == ("dry_run", REWORDED)
    note = Note.objects.get(kind=Note.Kind.DECISION)
    assert note.addressee == team["sam"].user and REWORDED in note.body
