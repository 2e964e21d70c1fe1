"""A decision comes back to whoever proposed the words: a rejection with its
note, an approval with edits and an expiry land in their conversation as a
decision addressed to them, unread for them alone until they read it; an
approver is not let approve over a message that went out after the held
reply without having been shown it."""

from __future__ import annotations

from datetime import time, timedelta

import pytest
from django.utils import timezone

from agents.followup.replies import reply_record
from agents.outbound.gate import message_send
from agents.playbook.copilot import reply_send
from approvals.models import ApprovalRequest
from approvals.selectors import approval_sent_since
from approvals.services import (
    SentSinceUnseen,
    approval_approve,
    approval_edit,
    approval_reject,
    approval_request_open,
    approvals_expire,
)
from crm.inbox import InboxQuery, inbox_page, unread_conversations
from crm.models import Business, Lead, Message, Note, Receipt, Role, TeamMember
from crm.services import lead_sync
from crm.services.conversations import conversation_read
from tests.factories import BusinessFactory, lead_create, member_create
from tests.helpers.followup import consent_all

pytestmark = pytest.mark.django_db

RISKY = "We can do it for $199 tomorrow by 9am, guaranteed."
SAFE = "Thanks Rosa! Mia will call you shortly about the price."


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
    return member_create(business, Role.SETTER, username="sam")


@pytest.fixture
def mia(business: Business) -> TeamMember:
    return member_create(business, Role.MANAGER, username="mia")


@pytest.fixture
def olivia(business: Business) -> TeamMember:
    return member_create(business, Role.OWNER, username="olivia")


@pytest.fixture
def lead(business: Business, sam: TeamMember) -> Lead:
    lead = lead_create(business, first_name="Rosa", last_name="Diaz", phone="+12125550147")
    lead = lead_sync.lead_assign(lead, sam, actor="test", reason="test owner")
    consent_all(lead, at=timezone.now())
    reply_record(lead, channel="sms", body="How much to fix the furnace?", actor="test")
    return lead


def held_reply(lead: Lead, member: TeamMember, body: str = RISKY, key: str = "risky") -> Message:
    message = reply_send(lead, user=member.user, body=body, form_key=key)
    assert message.status == Message.Status.PENDING_APPROVAL
    return message


def request_of(message: Message) -> ApprovalRequest:
    return ApprovalRequest.objects.get(message=message)


def row_unread(member: TeamMember, lead: Lead) -> int:
    """The unread count the inbox shows on the lead's row for `member`."""
    page = inbox_page(member.user, InboxQuery(who="team" if member.role != Role.SETTER else "mine"), now=timezone.now())
    return next(row.unread for row in page.rows if row.pk == lead.pk)


def everyone_has_read(lead: Lead, *members: TeamMember) -> None:
    for member in members:
        conversation_read(member.user, lead)
    assert [unread_conversations(m.user) for m in members] == [0] * len(members)


def test_a_rejection_and_its_note_reach_the_proposers_thread_unread_for_them_alone(lead, sam, mia):
    held = held_reply(lead, sam)
    everyone_has_read(lead, sam, mia)

    approval_reject(request_of(held), user=mia.user, note="No prices by text: call her instead.")

    held.refresh_from_db()
    assert (held.status, held.block_reason) == ("blocked", "rejected")
    decision = Note.objects.get(lead=lead, kind=Note.Kind.DECISION)
    assert (decision.addressee, decision.author) == (sam.user, "mia")
    assert "sam's reply “We can do it for $199 tomorrow by 9am, guaranteed.” was rejected by mia" in decision.body
    assert "“No prices by text: call her instead.”" in decision.body
    receipt = Receipt.objects.get(subject=decision.public_id)
    assert (receipt.action, receipt.actor, receipt.after["to"]) == ("note.added", "mia", "sam")
    # Unread for the proposer, in the badge and on the row; not for the manager who decided.
    assert (unread_conversations(sam.user), row_unread(sam, lead)) == (1, 1)
    assert (unread_conversations(mia.user), row_unread(mia, lead)) == (0, 0)

    conversation_read(sam.user, lead)
    assert (unread_conversations(sam.user), row_unread(sam, lead)) == (0, 0)


def test_an_approval_with_edits_tells_the_proposer_what_went_out_instead(lead, sam, mia, olivia):
    held = held_reply(lead, sam)
    everyone_has_read(lead, sam, mia, olivia)

    request = approval_edit(request_of(held), user=mia.user, payload={"body": SAFE})
    assert request.status == "pending" and request.proposed_by == "mia"
    assert not Note.objects.filter(kind=Note.Kind.DECISION).exists(), "an edit is a proposal, not a decision"
    approval_approve(request, user=olivia.user, note="Better without the price.")

    held.refresh_from_db()
    assert (held.status, held.body) == ("dry_run", SAFE)
    decision = Note.objects.get(lead=lead, kind=Note.Kind.DECISION)
    assert (decision.addressee, decision.author) == (sam.user, "olivia")
    assert "was approved with edits by olivia (reworded by mia)" in decision.body
    assert f"What goes out instead: “{SAFE}”" in decision.body and "“Better without the price.”" in decision.body
    assert [unread_conversations(m.user) for m in (sam, mia, olivia)] == [1, 0, 0]
    assert [row_unread(m, lead) for m in (sam, mia, olivia)] == [1, 0, 0]


def test_a_plain_approval_says_nothing_more_than_the_reply_going_out(lead, sam, mia):
    held = held_reply(lead, sam)
    everyone_has_read(lead, sam, mia)

    approval_approve(request_of(held), user=mia.user)

    held.refresh_from_db()
    assert held.status == "dry_run"
    assert not Note.objects.filter(kind=Note.Kind.DECISION).exists()
    assert unread_conversations(sam.user) == 0


def test_an_expired_held_reply_is_not_sent_and_the_expiry_reaches_the_proposer(lead, sam, mia):
    held = held_reply(lead, sam)
    everyone_has_read(lead, sam, mia)
    request = request_of(held)
    # Held replies carry no deadline of their own yet: this one is given one.
    ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=timezone.now() + timedelta(minutes=30))

    assert approvals_expire(now=timezone.now() + timedelta(hours=1)) == 1

    request.refresh_from_db()
    held.refresh_from_db()
    assert request.status == "expired"
    assert (held.status, held.block_reason) == ("blocked", "expired")
    blocked = Receipt.objects.get(subject=held.public_id, action="message.blocked")
    assert (blocked.actor, blocked.reason) == ("agent:human_gatekeeper", "expired")
    decision = Note.objects.get(lead=lead, kind=Note.Kind.DECISION)
    assert (decision.addressee, decision.author) == (sam.user, "agent:human_gatekeeper")
    assert "was not sent: nobody decided on it in time, and the approval expired" in decision.body
    assert [unread_conversations(m.user) for m in (sam, mia)] == [1, 0]


def test_an_expired_proposal_without_a_message_reaches_its_proposer_too(business, lead, sam, mia):
    everyone_has_read(lead, sam, mia)
    approval_request_open(
        business=business,
        lead=lead,
        kind="message_draft",
        summary="Reply names a price",
        proposed_by="sam",
        proposed_by_user=sam.user,
        payload={"body": RISKY},
        expires_at=timezone.now() + timedelta(minutes=5),
    )

    assert approvals_expire(now=timezone.now() + timedelta(minutes=10)) == 1

    assert Note.objects.get(kind=Note.Kind.DECISION).addressee == sam.user
    assert [unread_conversations(m.user) for m in (sam, mia)] == [1, 0]


def test_a_models_draft_that_is_rejected_is_told_to_the_leads_owner(lead, sam, mia):
    draft = message_send(
        lead=lead,
        channel="sms",
        body="The repair is $450, we can come tomorrow.",
        actor="agent:sms_assistant",
        idempotency_key="ai-draft:test",
        automated=False,
        needs_approval=True,
        draft_reason="drafted by the ai assistant; not in the playbook: price “$450”",
    )
    everyone_has_read(lead, sam, mia)

    approval_reject(request_of(draft), user=mia.user, note="We never quote by text.")

    decision = Note.objects.get(kind=Note.Kind.DECISION)
    assert decision.addressee == sam.user
    assert decision.body.startswith("The reply drafted by the sms assistant “The repair is $450")
    assert [unread_conversations(m.user) for m in (sam, mia)] == [1, 0]


def test_approving_over_a_message_sent_since_that_the_approver_was_not_shown_is_refused(lead, sam, mia):
    held = held_reply(lead, sam)
    confirmation = message_send(
        lead=lead,
        channel="sms",
        body="You're booked: Tuesday 9:00 AM. Reply STOP to opt out.",
        actor="agent:booking",
        idempotency_key="appointment.confirmation:test",
        automated=True,
    )
    request = request_of(held)
    assert approval_sent_since(request) == [confirmation]

    with pytest.raises(SentSinceUnseen, match="You're booked: Tuesday 9:00 AM"):
        approval_approve(request, user=mia.user, seen=[])

    request.refresh_from_db()
    held.refresh_from_db()
    assert (request.status, held.status) == ("pending", "pending_approval")
    assert not Receipt.objects.filter(subject=request.public_id, action="approval.approved").exists()

    approval_approve(request, user=mia.user, seen=[confirmation.public_id])
    held.refresh_from_db()
    assert held.status == "dry_run"
