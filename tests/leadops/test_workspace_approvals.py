"""Approvals in the workspace: the list managers and owners decide from, the
decisions made inside the lead's thread (as plain form posts, and with
htmx), a held reply said in words, the warning about what went out since,
and the decision coming back to the setter as an unread item."""

from __future__ import annotations

import json
import re
from datetime import time

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.followup.replies import reply_record
from agents.outbound.gate import message_send
from agents.playbook.copilot import reply_send
from approvals.models import ApprovalRequest
from crm.models import Business, Lead, Message, Note, Role, TeamMember
from crm.services import lead_sync
from leadops.workspace.held import Change, words_changed
from tests.factories import BusinessFactory, lead_create, member_create
from tests.helpers.followup import consent_all

pytestmark = pytest.mark.django_db

RISKY = "We can do it for $199 tomorrow by 9am, guaranteed."
SAFE = "We can do it for you. Mia will call you shortly about the price."


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
def sam(business: Business) -> TeamMember:
    return member_create(business, Role.SETTER, username="sam", display_name="Sam Setter")


@pytest.fixture
def mia(business: Business) -> TeamMember:
    return member_create(business, Role.MANAGER, username="mia", display_name="Mia Manager")


@pytest.fixture
def olivia(business: Business) -> TeamMember:
    return member_create(business, Role.OWNER, username="olivia", display_name="Olivia Owner")


@pytest.fixture
def lead(business: Business, sam: TeamMember) -> Lead:
    lead = lead_create(business, first_name="Rosa", last_name="Diaz", phone="+12125550147")
    lead = lead_sync.lead_assign(lead, sam, actor="test", reason="test owner")
    consent_all(lead, at=timezone.now())
    reply_record(lead, channel="sms", body="How much to fix the furnace?", actor="test")
    return lead


def login(member: TeamMember) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def held_reply(lead: Lead, member: TeamMember, body: str = RISKY, key: str = "risky") -> ApprovalRequest:
    message = reply_send(lead, user=member.user, body=body, form_key=key)
    assert message.status == Message.Status.PENDING_APPROVAL
    return ApprovalRequest.objects.get(message=message)


def thread_url(lead: Lead) -> str:
    return f"/app/leads/{lead.public_id}/"


def decide_url(request: ApprovalRequest, action: str) -> str:
    return f"/app/approvals/{request.public_id}/{action}/"


def flashes(response) -> list[str]:
    return [str(m) for m in response.wsgi_request._messages]


def held_block(page: str) -> str:
    """The words under the held message in the conversation, tags stripped."""
    found = re.search(r'<div class="held held-\w+">(.*?)</div>', page, re.S)
    assert found, "the held message says why it waits"
    return " ".join(re.sub(r"<[^>]+>", " ", found.group(1)).split())


# ------------------------------------------------------------------ who may


def test_setters_and_technicians_get_403_on_the_approvals_list_and_every_decision(business, lead, sam, mia):
    request = held_reply(lead, sam)
    tom = member_create(business, Role.TECHNICIAN, username="tom")
    for member in (sam, tom):
        client = login(member)
        assert client.get("/app/approvals/").status_code == 403
        assert client.get(f"/app/approvals/{request.public_id}/").status_code == 403
        for action, form in (("approve", {}), ("edit", {"body": SAFE}), ("reject", {"note": "no"})):
            assert client.post(decide_url(request, action), form).status_code == 403, (member, action)
    request.refresh_from_db()
    assert (request.status, request.proposed_by) == ("pending", "sam")
    assert not Note.objects.filter(kind=Note.Kind.DECISION).exists()


def test_another_businesss_manager_finds_no_such_request(lead, sam):
    request = held_reply(lead, sam)
    otto = member_create(BusinessFactory.create(slug="other"), Role.MANAGER, username="otto")
    client = login(otto)
    assert "Nothing waits for you" in client.get("/app/approvals/").content.decode()
    assert client.post(decide_url(request, "approve")).status_code == 404
    assert client.post(decide_url(request, "reject"), {"note": "no"}).status_code == 404
    request.refresh_from_db()
    assert request.status == "pending"


def test_the_proposer_may_not_approve_their_own_words_and_is_told_why(lead, mia, olivia):
    request = held_reply(lead, mia)  # a manager's own risky reply
    client = login(mia)

    page = client.get(thread_url(lead)).content.decode()
    assert "You proposed these words, so another manager or owner decides them." in page
    assert "decide-approve" not in page, "no Approve button for the proposer"
    response = client.post(decide_url(request, "approve"))

    assert response.status_code == 302
    assert flashes(response) == [
        "Not done: you proposed these words (or reworded them last), so another manager or owner decides them."
    ]
    request.refresh_from_db()
    assert (request.status, request.decided_by) == ("pending", None)
    assert "decide-approve" in login(olivia).get(thread_url(lead)).content.decode()


# ------------------------------------------------------------------ the list and the thread


def test_leaders_list_what_waits_and_the_top_bar_counts_it_for_them_only(lead, sam, mia):
    request = held_reply(lead, sam)

    page = login(mia).get("/app/approvals/").content.decode()
    assert "1 waiting for a decision" in page and "Rosa Diaz" in page and RISKY in page
    assert "a price “$199”" in page and "Proposed by sam" in page
    assert f'href="/app/approvals/{request.public_id}/"' in page
    assert re.search(r'id="nav-approvals">Approvals <span id="approvals-badge"[^>]*>1</span>', page)
    assert "nav-approvals" not in login(sam).get("/app/inbox/").content.decode()

    opened = login(mia).get(f"/app/approvals/{request.public_id}/")
    assert opened["Location"] == f"{thread_url(lead)}#decide-{request.public_id}"


def test_a_held_reply_says_in_words_why_it_waits_and_who_decides(lead, sam, mia, olivia):
    request = held_reply(lead, sam)

    said = held_block(login(sam).get(thread_url(lead)).content.decode())

    assert said.startswith("Held for approval. It promises a price “$199”")
    assert "a time “tomorrow”, a time “9am” and a guarantee “guaranteed”" in said
    assert "Mia Manager or Olivia Owner decides — a manager or owner, never whoever proposed it." in said
    assert "msg_" not in said and request.public_id not in said and "apr_" not in said


def test_the_manager_decides_inside_the_thread_the_conversation_above_the_proposal(lead, sam, mia):
    request = held_reply(lead, sam)

    page = login(mia).get(thread_url(lead)).content.decode()

    conversation, panel = page.index('id="conversation"'), page.index(f'id="decide-{request.public_id}"')
    assert conversation < panel
    decide = page[panel:]
    assert "The text proposed" in decide and RISKY in decide
    assert "The claims guard found" in decide and "a price “$199”" in decide
    for label in ("Approve</button>", "Edit and approve</summary>", "Reject with a note</summary>"):
        assert label in decide


# ------------------------------------------------------------------ deciding


def test_a_rejection_with_a_note_without_javascript_reaches_the_setter_as_unread(lead, sam, mia):
    request = held_reply(lead, sam)
    setter = login(sam)
    setter.get(thread_url(lead))  # sam has read everything so far

    response = login(mia).post(decide_url(request, "reject"), {"note": "No prices by text: call her."})

    assert response.status_code == 302
    assert response["Location"] == f"{thread_url(lead)}#{request.message.public_id}"
    assert flashes(response) == [
        "Rejected: the reply is not sent, and whoever proposed it reads your note in their thread."
    ]
    request.refresh_from_db()
    assert (request.status, request.decision_note) == ("rejected", "No prices by text: call her.")
    inbox = setter.get("/app/inbox/").content.decode()
    assert f'class="row is-unread" data-lead="{lead.public_id}"' in inbox
    assert '<span class="count" title="1 unread">1</span>' in inbox
    assert setter.get("/app/unread/").content.decode().count(">1</span>") == 1
    thread = setter.get(thread_url(lead)).content.decode()
    assert "Rejected</strong> by mia" in thread and "“No prices by text: call her.”" in thread
    assert "<strong>Decision</strong> by mia · for you" in thread
    assert setter.get("/app/unread/?n=0").status_code == 204, "read once the thread is open"


def test_a_rejection_needs_a_note(lead, sam, mia):
    request = held_reply(lead, sam)
    response = login(mia).post(decide_url(request, "reject"), {"note": "  "})
    assert flashes(response) == ["Not done: say why: the proposer reads it in their thread."]
    request.refresh_from_db()
    assert request.status == "pending"


def test_deciding_with_htmx_answers_the_panel_again_with_its_events(lead, sam, mia):
    request = held_reply(lead, sam)

    response = login(mia).post(decide_url(request, "approve"), {"seen": ""}, HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    page = response.content.decode()
    assert page.lstrip().startswith(f'<section class="decide card is-decided" id="decide-{request.public_id}"')
    assert "Approved: the reply went through the send gate (Recorded, not sent (dry run))." in page
    events = json.loads(response["HX-Trigger"])
    assert events["workspace-changed"] is True
    assert events["workspace-flash"] == {
        "level": "success",
        "text": "Approved: the reply went through the send gate (Recorded, not sent (dry run)).",
    }
    assert request.message is not None
    request.message.refresh_from_db()
    assert request.message.status == "dry_run"


def test_edit_and_approve_is_a_proposal_shown_as_a_diff_that_another_approves(lead, sam, mia, olivia):
    request = held_reply(lead, sam)
    response = login(mia).post(decide_url(request, "edit"), {"body": SAFE, "note": "No price by text"})

    assert flashes(response) == [
        "Your edit is saved as your proposal: another manager or owner approves it before it goes."
    ]
    request.refresh_from_db()
    assert (request.status, request.proposed_by, request.payload["body"]) == ("pending", "mia", SAFE)
    assert "You proposed these words" in login(mia).get(thread_url(lead)).content.decode()

    page = login(olivia).get(thread_url(lead)).content.decode()
    decide = page[page.index(f'id="decide-{request.public_id}"') :]
    assert "The text now proposed, as mia reworded it" in decide
    assert "<span>We can do it for</span> <del>$199 tomorrow by 9am, guaranteed.</del>" in decide
    assert "<ins>you. Mia will call you shortly about the price.</ins>" in decide
    assert "The claims guard finds no promise in it." in decide

    approved = login(olivia).post(decide_url(request, "approve"), {"seen": ""})
    assert flashes(approved) == ["Approved: the reply went through the send gate (Recorded, not sent (dry run))."]
    message = request.message
    assert message is not None
    message.refresh_from_db()
    assert (message.status, message.body) == ("dry_run", SAFE)
    note = Note.objects.get(kind=Note.Kind.DECISION)
    assert note.addressee == sam.user and "approved with edits by olivia (reworded by mia)" in note.body


def test_an_edit_reads_as_whole_changes_not_as_confetti_of_shared_little_words():
    assert words_changed("Hi Rosa, the repair is $199, guaranteed.", "Hi Rosa, Mia will call about the price.") == [
        Change("same", "Hi Rosa,"),
        Change("removed", "the repair is $199, guaranteed."),
        Change("added", "Mia will call about the price."),
    ]
    assert words_changed("Call Tuesday morning please", "Call Wednesday morning please") == [
        Change("same", "Call"),
        Change("removed", "Tuesday"),
        Change("added", "Wednesday"),
        Change("same", "morning please"),
    ]


def test_later_messages_warn_the_approver_and_an_unseen_one_stops_the_approval(lead, sam, mia):
    request = held_reply(lead, sam)
    client = login(mia)
    client.get(thread_url(lead))  # mia looked before the confirmation went out
    confirmation = message_send(
        lead=lead,
        channel="sms",
        body="You are booked: Tuesday 9:00 AM with Acme. Reply STOP to opt out.",
        actor="agent:booking",
        idempotency_key="appointment.confirmation:test",
        automated=True,
    )

    refused = client.post(decide_url(request, "approve"), {"seen": ""})
    assert flashes(refused) == [
        "Not done: since you opened it, a message went out to the person after this reply was held: "
        "“You are booked: Tuesday 9:00 AM with Acme. Reply STOP to opt out.”. "
        "Read the conversation again, then decide."
    ]
    request.refresh_from_db()
    assert request.status == "pending"

    page = client.get(thread_url(lead)).content.decode()
    warning = page[page.index('class="later-sends"') :]
    assert "Since this reply was held, 1 message went out to the person." in warning
    assert "You are booked: Tuesday 9:00 AM" in warning and "Automated · booking" in warning
    assert f'name="seen" value="{confirmation.public_id}"' in page

    client.post(decide_url(request, "approve"), {"seen": confirmation.public_id})
    request.refresh_from_db()
    assert request.status == "approved"


def test_a_colleague_deciding_first_is_said_in_words(lead, sam, mia, olivia):
    request = held_reply(lead, sam)
    login(olivia).post(decide_url(request, "reject"), {"note": "Not like this."})

    response = login(mia).post(decide_url(request, "approve"), {"seen": ""})

    assert flashes(response) == ["Not done: someone was first: it was already rejected by olivia."]


def test_the_thread_costs_the_same_queries_for_one_or_four_held_replies(lead, sam, mia):
    held_reply(lead, sam, key="k0")
    client = login(mia)
    client.get(thread_url(lead))

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(thread_url(lead)).status_code == 200
        return len(ctx.captured_queries)

    few = count()
    for n in range(1, 4):
        held_reply(lead, sam, body=f"{RISKY} ({n})", key=f"k{n}")
    assert count() == few
