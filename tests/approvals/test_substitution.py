"""A decision means what was proposed: it cannot be re-pointed at other records,
another business's records, or a message that already left the queue, and
whoever edits a payload has proposed it (through the real API and handlers)."""

from __future__ import annotations

import itertools
from datetime import time
from decimal import Decimal
from typing import Any

import pytest
from rest_framework.test import APIClient

from agents.followup.estimates import estimate_send
from agents.outbound.gate import message_send
from approvals.models import ApprovalRequest
from approvals.services import ApprovalInvalid, approval_approve, approval_request_open
from crm.models import Business, ConsentState, Estimate, Lead, Message, Receipt, Role, TeamMember
from crm.services.consent import consent_record
from crm.services.lead_sync import lead_assign
from crm.services.records import estimate_record
from tests.factories import ServiceLineFactory, lead_create, member_create

pytestmark = pytest.mark.django_db

_phones = (f"+1212555{n:04d}" for n in itertools.count(700))
_keys = (f"draft-{n}" for n in itertools.count())


def reachable_lead(business: Business) -> Lead:
    """A lead who may be texted at any hour (consent on record, quiet hours wide open)."""
    business.quiet_hours_start, business.quiet_hours_end = time(0, 0), time(23, 59, 59)
    business.save(update_fields=["quiet_hours_start", "quiet_hours_end"])
    lead = lead_create(business, phone=next(_phones))
    consent_record(
        contact_point=lead.contact.points.get(), channel="sms", granted=True, basis="form_disclosure", actor="t"
    )
    return lead


def draft(lead: Lead, body: str, *, by: TeamMember | None = None) -> tuple[Message, ApprovalRequest]:
    """A text waiting for a person, and its approval request."""
    message = message_send(
        lead=lead,
        channel="sms",
        body=body,
        actor=by.user.username if by else "agent:sms_assistant",
        idempotency_key=next(_keys),
        automated=False,
        needs_approval=True,
        requested_by=by.user if by else None,
    )
    assert message.status == "pending_approval"
    return message, ApprovalRequest.objects.get(kind="message_draft", payload__message=message.public_id)


def high_value_estimate(lead: Lead, *, by: TeamMember | None = None) -> tuple[Estimate, ApprovalRequest]:
    estimate = estimate_record(lead=lead, amount=Decimal("12500.00"), currency="USD", actor="t")
    estimate = estimate_send(
        estimate, actor=by.user.username if by else "agent:estimator", user=by.user if by else None
    )
    assert estimate.status == "pending_approval"
    return estimate, ApprovalRequest.objects.get(kind="high_value_estimate", payload__estimate=estimate.public_id)


@pytest.fixture
def quoted(business: Business) -> Lead:
    """A lead on a service line with a high-value amount."""
    line = ServiceLineFactory.create(business=business, slug="hvac", name="HVAC", high_value_amount=Decimal("10000"))
    lead = reachable_lead(business)
    Lead.objects.filter(pk=lead.pk).update(service_line=line)  # the qualifier's finding, set directly
    lead.refresh_from_db()
    return lead


@pytest.fixture
def max_(business: Business) -> TeamMember:
    return member_create(business, Role.MANAGER, username="max")


def client_for(member: TeamMember) -> APIClient:
    client = APIClient()
    client.force_login(member.user)
    return client


def approve(member: TeamMember, request: ApprovalRequest, **body: Any) -> Any:
    return client_for(member).post(f"/api/v1/approvals/{request.public_id}/approve/", body, format="json")


def status_of(record: Any) -> str:
    record.refresh_from_db()
    return str(record.status)


def decisions_of(request: ApprovalRequest) -> list[str]:
    return list(
        Receipt.objects.filter(subject=request.public_id)
        .exclude(action="approval.requested")
        .values_list("action", flat=True)
    )


# ------------------------------------------------------ within one business


def test_a_manager_cannot_approve_anothers_draft_with_a_payload_pointing_at_their_own_draft(
    business: Business, max_: TeamMember
) -> None:
    lead = reachable_lead(business)
    own_message, own_request = draft(lead, "It's $199, guaranteed.", by=max_)
    _, others_request = draft(lead, "Hi, we can come by at 3pm.")

    response = approve(max_, others_request, payload={"message": own_message.public_id, "body": own_message.body})

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["error"] == "bad_request" and "message" in str(body["detail"])
    assert status_of(own_message) == "pending_approval"
    assert (status_of(own_request), status_of(others_request)) == ("pending", "pending")
    assert decisions_of(others_request) == [] and decisions_of(own_request) == []


def test_a_manager_cannot_approve_anothers_estimate_request_with_a_payload_pointing_at_their_own_estimate(
    quoted: Lead, max_: TeamMember
) -> None:
    own_estimate, own_request = high_value_estimate(quoted, by=max_)
    others_estimate, others_request = high_value_estimate(quoted)

    response = approve(max_, others_request, payload={"estimate": own_estimate.public_id})

    assert response.status_code == 400, response.content
    assert response.json()["error"] == "bad_request"
    assert (status_of(own_estimate), status_of(others_estimate)) == ("pending_approval", "pending_approval")
    assert (status_of(own_request), status_of(others_request)) == ("pending", "pending")


def test_an_estimate_request_takes_nothing_but_a_note(quoted: Lead, manager: TeamMember) -> None:
    estimate, request = high_value_estimate(quoted)

    refused = approve(manager, request, payload={"amount": "1.00"}, note="checked")
    approved = approve(manager, request, note="price checked with the owner")

    assert refused.status_code == 400 and "amount" in str(refused.json()["detail"])
    assert approved.status_code == 200, approved.content
    assert approved.json()["decision_note"] == "price checked with the owner"
    estimate.refresh_from_db()
    assert (estimate.status, estimate.amount) == ("sent", Decimal("12500.00"))


def test_a_draft_decision_refuses_keys_other_than_its_body(business: Business, manager: TeamMember) -> None:
    message, request = draft(reachable_lead(business), "We'll be there by 3pm.")

    response = approve(manager, request, payload={"body": "Hi!", "to": "+19005550100"})

    assert response.status_code == 400
    assert set(response.json()) == {"error", "detail"} and "to" in str(response.json()["detail"])
    assert (status_of(message), message.body, message.to) == (
        "pending_approval",
        "We'll be there by 3pm.",
        lead_to(message),
    )
    assert status_of(request) == "pending"


def lead_to(message: Message) -> str:
    assert message.lead is not None
    return str(message.lead.contact.points.get().value)


def test_an_opt_out_question_cannot_be_re_pointed_at_another_persons_number(
    business: Business, manager: TeamMember
) -> None:
    from agents.consent.keywords import revocation_ask

    lead, bystander = reachable_lead(business), reachable_lead(business)
    text = Message.objects.create(
        business=business,
        lead=lead,
        contact=lead.contact,
        direction="in",
        contact_point=lead.contact.points.get(),
        channel="sms",
        status="received",
        body="I think I'm done with all of this",
    )
    # The question a language model opens when it alone reads a stop (the
    # consent check records the stops it reads itself, and asks nobody).
    revocation_ask(text, lead, actor="agent:ai_assistant", why="The model reads this as a revocation. ")
    request = ApprovalRequest.objects.get(kind="opt_out_question")

    response = approve(manager, request, payload={"point": bystander.contact.points.get().value})

    assert response.status_code == 400
    assert ConsentState.objects.get(contact_point__contact=bystander.contact).status == "granted"
    assert ConsentState.objects.get(contact_point__contact=lead.contact).status == "granted"
    assert status_of(request) == "pending"


# ------------------------------------------------------------ across tenants


def test_a_payload_pointing_at_another_businesss_message_is_refused_and_that_message_is_untouched(
    business: Business, other_business: Business, manager: TeamMember
) -> None:
    foreign_message, foreign_request = draft(reachable_lead(other_business), "Your visit is on Tuesday.")
    _, request = draft(reachable_lead(business), "Hi, the repair is $120.")

    response = approve(manager, request, payload={"message": foreign_message.public_id, "body": "Pay at evil.example"})

    assert response.status_code == 400, response.content
    foreign_message.refresh_from_db()
    assert (foreign_message.status, foreign_message.body) == ("pending_approval", "Your visit is on Tuesday.")
    assert status_of(foreign_request) == "pending" and status_of(request) == "pending"


def test_a_request_cannot_be_opened_on_another_businesss_message(business: Business, other_business: Business) -> None:
    foreign_message, _ = draft(reachable_lead(other_business), "Your visit is on Tuesday.")

    with pytest.raises(ApprovalInvalid, match="is not a message of acme"):
        approval_request_open(
            business=business,
            kind="message_draft",
            summary="Borrowed",
            proposed_by="agent:sms_assistant",
            payload={"message": foreign_message.public_id, "body": "Pay at evil.example"},
        )

    assert ApprovalRequest.objects.filter(business=business).count() == 0


# ------------------------------------------------------- a message that left


def test_approving_a_draft_whose_message_already_went_out_is_a_409_and_the_body_stays(
    business: Business, manager: TeamMember, max_: TeamMember
) -> None:
    message, first = draft(reachable_lead(business), "Hi, the repair is $120.")
    # The same text proposed twice (a retried role): both requests concern one message.
    second = approval_request_open(
        business=business,
        lead=message.lead,
        kind="message_draft",
        summary="Again",
        proposed_by="agent:sms_assistant",
        payload={"message": message.public_id, "body": message.body},
    )
    assert approve(manager, first).status_code == 200
    assert status_of(message) == "dry_run"

    edited = approve(max_, second, payload={"body": "Hi, the repair is $1,200."})
    plain = approve(max_, second)

    assert edited.status_code == 409, edited.content
    assert plain.status_code == 409 and plain.json()["error"] == "conflict"
    assert message.public_id in plain.json()["detail"]
    message.refresh_from_db()
    assert (message.status, message.body) == ("dry_run", "Hi, the repair is $120.")
    second.refresh_from_db()
    assert (second.status, second.payload["body"], second.proposed_by) == (
        "pending",
        "Hi, the repair is $120.",
        "agent:sms_assistant",
    )


# ----------------------------------------------------------- who may decide


def test_a_setter_approving_is_forbidden_even_when_they_own_another_business(
    business: Business, other_business: Business
) -> None:
    setter = member_create(business, Role.SETTER, username="sam")
    TeamMember.objects.create(business=other_business, user=setter.user, role=Role.OWNER, display_name="Sam")
    lead = lead_assign(reachable_lead(business), setter, actor="mia", reason="routing")
    message, request = draft(lead, "It's $199.")

    response = approve(setter, request)

    assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert (status_of(request), status_of(message)) == ("pending", "pending_approval")


# ------------------------------------------------ the editor is the proposer


def test_who_edits_a_draft_has_proposed_it_and_cannot_approve_it(
    business: Business, manager: TeamMember, max_: TeamMember
) -> None:
    message, request = draft(reachable_lead(business), "It's $199, guaranteed.")
    edited = "A technician will quote on site."

    proposed = approve(manager, request, payload={"body": edited}, note="no prices by text")
    again = approve(manager, request)

    assert proposed.status_code == 202, proposed.content
    assert (proposed.json()["status"], proposed.json()["proposed_by"], proposed.json()["decided_by"]) == (
        "pending",
        "mia",
        None,
    )
    assert again.status_code == 403 and "mia proposed" in again.json()["detail"]
    request.refresh_from_db()
    assert (request.status, request.proposed_by_user, request.payload["body"]) == ("pending", manager.user, edited)
    assert request.original_payload == {"message": message.public_id, "body": "It's $199, guaranteed."}
    assert status_of(message) == "pending_approval"

    approved = approve(max_, request)

    assert approved.status_code == 200, approved.content
    assert (approved.json()["status"], approved.json()["decided_by"]) == ("approved", "max")
    message.refresh_from_db()
    assert (message.status, message.body) == ("dry_run", edited)
    assert decisions_of(request) == ["approval.edited", "approval.approved"]


def test_an_edit_then_approve_by_one_person_through_the_service_leaves_it_pending(
    business: Business, manager: TeamMember
) -> None:
    message, request = draft(reachable_lead(business), "It's $199.")

    result = approval_approve(request, user=manager.user, edited_payload={"body": "We will call with a quote."})

    assert (result.status, result.decided_by) == ("pending", None)
    assert status_of(message) == "pending_approval"
