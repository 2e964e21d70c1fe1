"""The estimate write API (`POST /api/v1/estimates/`, `/<id>/send/`,
`/<id>/accept/`, `/<id>/decline/`) and `POST /api/v1/appointments/<id>/held/`:
token and session authentication, the lead's visibility, the error shape,
the high-value approval gate and the customer's decision, end to end through
the orchestrator's steps."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.orchestrator import orchestrate_pending
from approvals.models import ApprovalRequest
from crm.models import Appointment, Business, Estimate, Lead, Receipt, Role, Stage, TeamMember
from crm.services import lead_sync
from crm.services.records import appointment_record, estimate_record
from tests.factories import ServiceLineFactory, lead_create, member_create
from tests.helpers.revenue import held_lead

pytestmark = pytest.mark.django_db
URL = "/api/v1/estimates/"
LEAD = object()  # stands for the fixture lead's id in a parametrized body


def token_client(member: TeamMember) -> APIClient:
    """Authenticated the way a tool is: `Authorization: Token <key>`."""
    client = APIClient()
    key = Token.objects.get_or_create(user=member.user)[0].key
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.fixture
def owner(business: Business) -> TeamMember:
    return member_create(business, Role.OWNER, username="olivia")


@pytest.fixture
def hvac_lead(business: Business, setter: TeamMember) -> Lead:
    """Sam's lead after a held visit, on a line whose high value is 10,000."""
    line = ServiceLineFactory.create(business=business, slug="hvac", name="HVAC", high_value_amount=Decimal("10000"))
    lead = held_lead(business, setter)
    Lead.objects.filter(pk=lead.pk).update(service_line=line)  # the qualifier's finding, set directly
    lead.refresh_from_db()
    return lead


def create(client: Any, lead: Lead, amount: str = "4200.00", **body: Any) -> Any:
    return client.post(URL, {"lead": lead.public_id, "amount": amount, "currency": "USD", **body}, format="json")


def test_writes_need_a_user(hvac_lead: Lead) -> None:
    response = create(APIClient(), hvac_lead, send=True)
    assert response.status_code == 401 and response.json()["error"] == "not_authenticated"
    key = APIClient()
    key.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert create(key, hvac_lead).status_code == 401
    assert not Estimate.objects.exists()


def test_a_sent_estimate_moves_the_held_lead_to_estimate_sent_with_receipts(
    hvac_lead: Lead, manager: TeamMember
) -> None:
    response = create(token_client(manager), hvac_lead, send=True, description="Replace the furnace blower")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["lead"], body["status"], body["amount"], body["currency"]) == (
        hvac_lead.public_id,
        "sent",
        "4200.00",
        "USD",
    )
    estimate = Estimate.objects.get(public_id=body["id"])
    assert estimate.amount == Decimal("4200.00") and estimate.description == "Replace the furnace blower"
    assert estimate.sent_at is not None
    actions = list(Receipt.objects.filter(subject=estimate.public_id).values_list("action", "actor"))
    assert actions == [("estimate.recorded", "mia"), ("estimate.sent", "mia")]

    orchestrate_pending()
    hvac_lead.refresh_from_db()
    assert hvac_lead.stage == Stage.ESTIMATE_SENT
    assert hvac_lead.next_action == f"Get a decision on estimate {estimate.public_id}"


def test_a_draft_stays_a_draft_until_it_is_sent_and_a_session_user_may_send_it(
    hvac_lead: Lead, manager: TeamMember
) -> None:
    session = APIClient(enforce_csrf_checks=False)
    session.force_login(manager.user)
    draft = create(session, hvac_lead, amount="950")
    assert draft.status_code == 201 and draft.json()["status"] == "draft" and draft.json()["sent_at"] is None
    sent = session.post(f"{URL}{draft.json()['id']}/send/")
    assert sent.status_code == 200 and sent.json()["status"] == "sent"
    again = session.post(f"{URL}{draft.json()['id']}/send/")  # a double click changes nothing
    assert again.status_code == 200 and again.json()["sent_at"] == sent.json()["sent_at"]
    # The read side is unchanged by the routes served ahead of crm's.
    listed = session.get(URL, {"lead": hvac_lead.public_id})
    assert [row["id"] for row in listed.json()["results"]] == [draft.json()["id"]]


def test_a_browser_session_must_carry_its_csrf_token(hvac_lead: Lead, manager: TeamMember) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(manager.user)
    body = {"lead": hvac_lead.public_id, "amount": "100", "currency": "USD"}
    response = browser.post(URL, body, content_type="application/json")
    assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert not Estimate.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"amount": "4200", "currency": "USD"}, "lead"),
        ({"lead": "lead_doesnotexist", "amount": "4200"}, "lead"),
        ({"lead": LEAD, "currency": "USD"}, "amount"),
        ({"lead": LEAD, "amount": "forty"}, "amount"),
        ({"lead": LEAD, "amount": "-5.00"}, "amount"),
        ({"lead": LEAD, "amount": "0"}, "amount"),
        ({"lead": LEAD, "amount": "12.345"}, "amount"),
        ({"lead": LEAD, "amount": "100", "currency": "EUR"}, "currency"),
        ({"lead": LEAD, "amount": "100", "send": "perhaps"}, "send"),
        ({"lead": LEAD, "amount": "100", "expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
    ],
)
def test_a_bad_body_is_a_400_naming_the_field_and_writes_nothing(
    hvac_lead: Lead, manager: TeamMember, body: dict[str, Any], field: str
) -> None:
    payload = {k: hvac_lead.public_id if v is LEAD else v for k, v in body.items()}
    response = token_client(manager).post(URL, payload, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["error"] == "bad_request" and field in response.json()["detail"]
    assert not Estimate.objects.exists() and not Receipt.objects.filter(action__startswith="estimate.").exists()


def test_a_body_that_is_not_json_is_a_400(hvac_lead: Lead, manager: TeamMember) -> None:
    response = token_client(manager).post(URL, b'{"lead": "', content_type="application/json")
    assert response.status_code == 400 and response.json()["error"] == "bad_request"


@pytest.mark.parametrize("path", ["", "{id}/decline/"])
def test_a_body_without_a_content_type_is_a_415_in_the_error_shape(
    hvac_lead: Lead, setter: TeamMember, path: str
) -> None:
    estimate = estimate_record(lead=hvac_lead, amount=Decimal("100.00"), currency="USD", actor="test")
    response = token_client(setter).generic("POST", URL + path.format(id=estimate.public_id), "lead=x", content_type="")

    assert response.status_code == 415
    assert response.json() == {"error": "unsupported_media_type", "detail": 'Unsupported media type "" in request.'}


def test_only_leads_the_user_may_see_can_be_quoted_or_decided(
    hvac_lead: Lead, business: Business, other_business: Business, owner: TeamMember
) -> None:
    sara = member_create(business, Role.SETTER, username="sara")
    stranger = member_create(other_business, Role.MANAGER, username="otto")
    for member in (sara, stranger):  # another setter's lead; another business's lead
        response = create(token_client(member), hvac_lead)
        assert response.status_code == 400 and "no lead" in response.json()["detail"]["lead"][0]
    assert not Estimate.objects.exists()

    estimate = create(token_client(owner), hvac_lead, send=True).json()  # the owner sees the whole business
    for member in (sara, stranger):
        for verb in ("accept", "decline", "send"):
            response = token_client(member).post(f"{URL}{estimate['id']}/{verb}/")
            assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert Estimate.objects.get(public_id=estimate["id"]).status == "sent"


def test_an_estimate_above_high_value_waits_for_another_persons_approval(
    hvac_lead: Lead, setter: TeamMember, manager: TeamMember, owner: TeamMember
) -> None:
    response = create(token_client(manager), hvac_lead, amount="12500.00", send=True)
    assert response.status_code == 201 and response.json()["status"] == "pending_approval"
    request = ApprovalRequest.objects.get(kind="high_value_estimate", status="pending")
    assert request.proposed_by == "mia" and request.payload["estimate"] == response.json()["id"]

    # Not approvable by its proposer or a setter, nor decidable by the customer before it is sent.
    assert token_client(manager).post(f"/api/v1/approvals/{request.public_id}/approve/").status_code == 403
    assert token_client(setter).post(f"/api/v1/approvals/{request.public_id}/approve/").status_code == 403
    conflict = token_client(manager).post(f"{URL}{response.json()['id']}/accept/")
    assert conflict.status_code == 409 and "pending_approval" in conflict.json()["detail"]

    approve = f"/api/v1/approvals/{request.public_id}/approve/"
    approved = token_client(owner).post(approve, {"note": "price checked"}, format="json")
    assert approved.status_code == 200, approved.json()
    estimate = token_client(setter).get(f"{URL}{response.json()['id']}/").json()
    assert estimate["status"] == "sent" and estimate["sent_at"]
    assert Receipt.objects.filter(subject=estimate["id"], action="estimate.sent", actor="olivia").exists()


def test_accepting_wins_the_lead_once_and_a_decided_estimate_cannot_be_declined(
    hvac_lead: Lead, manager: TeamMember, django_assert_max_num_queries: Any
) -> None:
    client = token_client(manager)
    estimate = create(client, hvac_lead, send=True).json()
    orchestrate_pending()
    with django_assert_max_num_queries(25):
        accepted = client.post(f"{URL}{estimate['id']}/accept/")
    assert accepted.status_code == 200 and accepted.json()["status"] == "accepted" and accepted.json()["decided_at"]
    assert client.post(f"{URL}{estimate['id']}/accept/").json()["decided_at"] == accepted.json()["decided_at"]
    refused = client.post(f"{URL}{estimate['id']}/decline/", {"reason": "changed my mind"}, format="json")
    assert refused.status_code == 409 and refused.json()["error"] == "conflict"
    orchestrate_pending()
    hvac_lead.refresh_from_db()
    assert hvac_lead.stage == Stage.WON
    assert Receipt.objects.filter(subject=estimate["id"], action="estimate.accepted", actor="mia").count() == 1


def test_declining_loses_the_lead_with_the_customers_reason(hvac_lead: Lead, manager: TeamMember) -> None:
    client = token_client(manager)
    estimate = create(client, hvac_lead, send=True).json()
    declined = client.post(f"{URL}{estimate['id']}/decline/", {"reason": "went with a cheaper quote"}, format="json")
    assert declined.status_code == 200 and declined.json()["status"] == "declined"
    orchestrate_pending()
    hvac_lead.refresh_from_db()
    assert hvac_lead.stage == Stage.LOST
    receipt = Receipt.objects.get(subject=estimate["id"], action="estimate.declined")
    assert receipt.reason == "went with a cheaper quote"


def test_a_closed_lead_gets_no_new_estimate(business: Business, setter: TeamMember, manager: TeamMember) -> None:
    lead = lead_create(business)
    lead_sync.lead_assign(lead, setter, actor="test", reason="test")
    lead_sync.lead_transition(lead, Stage.DISQUALIFIED, actor="test", reason="out of area")
    response = create(token_client(manager), lead)
    assert response.status_code == 409 and "disqualified" in response.json()["detail"]
    assert not Estimate.objects.exists()


def test_a_visit_is_marked_held_once_it_started_and_the_lead_moves_on(
    business: Business, setter: TeamMember, manager: TeamMember
) -> None:
    lead = lead_create(business)
    lead_sync.lead_assign(lead, setter, actor="test", reason="test")
    lead_sync.lead_transition(lead, Stage.BOOKED, actor="test", reason="booked")
    now = timezone.now()
    started = appointment_record(lead=lead, starts_at=now - timedelta(hours=2), ends_at=now, actor="t")
    later = appointment_record(
        lead=lead, starts_at=now + timedelta(days=1), ends_at=now + timedelta(days=1, hours=1), actor="t"
    )
    client = token_client(setter)

    early = client.post(f"/api/v1/appointments/{later.public_id}/held/")
    assert early.status_code == 409 and "has not started" in early.json()["detail"]
    outsider = token_client(member_create(business, Role.SETTER, username="sara"))
    assert outsider.post(f"/api/v1/appointments/{started.public_id}/held/").status_code == 404
    assert APIClient().post(f"/api/v1/appointments/{started.public_id}/held/").status_code == 401

    held = client.post(f"/api/v1/appointments/{started.public_id}/held/")
    assert held.status_code == 200 and held.json()["status"] == "held" and held.json()["outcome_at"]
    again = client.post(f"/api/v1/appointments/{started.public_id}/held/")
    assert again.status_code == 409 and again.json()["error"] == "conflict"
    lead.refresh_from_db()
    assert lead.stage == Stage.APPOINTMENT_HELD
    assert Appointment.objects.get(pk=started.pk).status == "held"
    assert Receipt.objects.filter(subject=started.public_id, action="appointment.held", actor="sam").count() == 1

    # The next state follows through the same API: an estimate, sent by a manager.
    estimate = create(token_client(manager), lead, amount="300", send=True)
    assert estimate.status_code == 201 and estimate.json()["status"] == "sent"
    orchestrate_pending()
    lead.refresh_from_db()
    assert lead.stage == Stage.ESTIMATE_SENT


@pytest.mark.parametrize("role", [Role.SETTER, Role.TECHNICIAN])
def test_a_setter_or_technician_may_not_create_send_accept_or_decline_estimates(
    hvac_lead: Lead, business: Business, setter: TeamMember, manager: TeamMember, role: str
) -> None:
    # The lead's own setter (who sees it) or a technician with the visit: both are refused.
    member = setter if role == Role.SETTER else member_create(business, Role.TECHNICIAN, username="tom")
    if role == Role.TECHNICIAN:  # the technician of the lead's visit, who may see the lead
        now = timezone.now()
        visit = appointment_record(lead=hvac_lead, starts_at=now, ends_at=now + timedelta(hours=1), actor="t")
        Appointment.objects.filter(pk=visit.pk).update(assigned_to=member)
    client = token_client(member)
    assert client.get(f"/api/v1/leads/{hvac_lead.public_id}/").status_code == 200
    refused = create(client, hvac_lead, send=True)
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert not Estimate.objects.exists()
    estimate = create(token_client(manager), hvac_lead, send=True).json()
    for verb in ("send", "accept", "decline"):
        response = client.post(f"{URL}{estimate['id']}/{verb}/", {"reason": "no"}, format="json")
        expected = 403 if role == Role.SETTER else 404  # a technician does not see estimates at all
        assert response.status_code == expected, (verb, response.status_code)
    assert Estimate.objects.get(public_id=estimate["id"]).status == "sent"
    hvac_lead.refresh_from_db()
    assert hvac_lead.stage != Stage.WON
