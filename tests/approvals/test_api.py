"""`/api/v1/approvals/`: the queue, its filters, decisions and their errors (its OpenAPI schema: /api/schema/)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils.dateparse import parse_datetime
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from approvals.handlers import APPROVAL_HANDLERS
from approvals.models import ApprovalRequest
from approvals.services import approval_approve, approval_request_open
from crm.models import Business, Lead, Receipt, Role, TeamMember
from crm.services.lead_sync import lead_assign
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db

FIELDS = {
    "id",
    "kind",
    "status",
    "proposed_by",
    "decided_by",
    "lead",
    "summary",
    "payload",
    "original_payload",
    "decision_note",
    "created_at",
    "expires_at",
    "decided_at",
}
DRAFT = {"body": "Hi Pat, the repair is $120."}
_phones = (f"+1212555{n:04d}" for n in itertools.count(300))


@pytest.fixture(autouse=True)
def no_registered_handlers() -> Iterator[None]:
    with APPROVAL_HANDLERS.replaced():
        yield


def client_for(member: TeamMember) -> APIClient:
    client = APIClient()
    client.force_login(member.user)
    return client


def new_lead(business: Business) -> Lead:
    return lead_create(business, phone=next(_phones))


def proposal(business: Business, *, kind: str = "message_draft", **fields: Any) -> ApprovalRequest:
    """A request on a new lead of its own, unless `lead` says which (or None)."""
    fields.setdefault("proposed_by", "agent:sms_assistant")
    fields.setdefault("payload", dict(DRAFT))
    if "lead" not in fields:
        fields["lead"] = new_lead(business)
    return approval_request_open(business=business, kind=kind, summary="A price in the draft", **fields)


def url(request: ApprovalRequest, action: str = "") -> str:
    return f"/api/v1/approvals/{request.public_id}/" + (f"{action}/" if action else "")


def decisions_of(request: ApprovalRequest) -> list[str]:
    return list(
        Receipt.objects.filter(subject=request.public_id)
        .exclude(action="approval.requested")
        .values_list("action", flat=True)
    )


# ---------------------------------------------------------------------- reads


def test_the_list_shows_each_request_with_the_contract_fields(business: Business, manager: TeamMember) -> None:
    request = proposal(business)

    response = client_for(manager).get("/api/v1/approvals/")

    assert response.status_code == 200
    page = response.json()
    assert set(page) == {"count", "next", "previous", "results"}
    [row] = page["results"]
    assert set(row) == FIELDS
    assert row["id"] == request.public_id and row["id"].startswith("apr_")
    assert (row["kind"], row["status"], row["proposed_by"], row["decided_by"]) == (
        "message_draft",
        "pending",
        "agent:sms_assistant",
        None,
    )
    assert row["lead"] == request.lead.public_id
    assert (row["summary"], row["payload"], row["original_payload"]) == ("A price in the draft", DRAFT, None)
    created = parse_datetime(row["created_at"])
    assert created is not None and created.utcoffset() is not None
    assert row["decided_at"] is None


def test_the_list_filters_by_status_and_kind(business: Business, manager: TeamMember) -> None:
    draft = proposal(business)
    decided = proposal(business)
    approval_approve(decided, user=manager.user)
    merge = proposal(business, kind="merge_contacts", payload={"keep": "cont_a", "merge": ["cont_b"]})
    client = client_for(manager)

    def listed(**params: str) -> list[str]:
        response = client.get("/api/v1/approvals/", params)
        assert response.status_code == 200, response.content
        return [row["id"] for row in response.json()["results"]]

    assert listed(status="pending") == [merge.public_id, draft.public_id]
    assert listed(status="approved") == [decided.public_id]
    assert listed(kind="merge_contacts") == [merge.public_id]
    assert listed(status="pending", kind="message_draft") == [draft.public_id]
    assert listed(status="", kind="") == [merge.public_id, decided.public_id, draft.public_id]


def test_a_bad_filter_value_is_a_400_naming_the_field(business: Business, manager: TeamMember) -> None:
    response = client_for(manager).get("/api/v1/approvals/", {"status": "maybe"})

    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "bad_request" and "status" in body["detail"]


def test_one_request_by_its_public_id(business: Business, manager: TeamMember) -> None:
    request = proposal(business, lead=None)

    response = client_for(manager).get(url(request))

    assert response.status_code == 200
    assert response.json()["id"] == request.public_id and response.json()["lead"] is None


def test_a_setter_sees_only_the_requests_on_their_own_leads(
    business: Business, setter: TeamMember, manager: TeamMember
) -> None:
    mine = proposal(business, lead=lead_assign(new_lead(business), setter, actor="mia", reason="routing"))
    proposal(business)  # an unowned lead
    proposal(business, lead=None)  # no lead: managers and owners only

    response = client_for(setter).get("/api/v1/approvals/")

    assert [row["id"] for row in response.json()["results"]] == [mine.public_id]


def test_another_businesss_requests_are_not_found(business: Business, other_business: Business) -> None:
    stranger = member_create(other_business, Role.MANAGER, username="otto")
    request = proposal(business)
    client = client_for(stranger)

    assert client.get("/api/v1/approvals/").json()["count"] == 0
    for response in (
        client.get(url(request)),
        client.post(url(request, "approve")),
        client.post(url(request, "reject")),
    ):
        assert response.status_code == 404
        assert response.json()["error"] == "not_found"
    request.refresh_from_db()
    assert request.status == "pending" and decisions_of(request) == []


def test_an_unknown_id_is_a_404_json(business: Business, manager: TeamMember) -> None:
    response = client_for(manager).post("/api/v1/approvals/apr_NOPE/approve/")

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_without_credentials_nothing_is_shown_or_decided(business: Business) -> None:
    request = proposal(business)
    client = APIClient()

    assert client.get("/api/v1/approvals/").status_code == 401
    response = client.post(url(request, "approve"))
    assert response.status_code == 401 and response.json()["error"] == "not_authenticated"
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


# ------------------------------------------------------------------ decisions


def test_a_manager_approves_through_the_api(business: Business, manager: TeamMember) -> None:
    request = proposal(business)

    response = client_for(manager).post(url(request, "approve"), {"note": "price is from the list"}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["decided_by"], body["decision_note"]) == ("approved", "mia", "price is from the list")
    assert body["decided_at"] is not None
    request.refresh_from_db()
    assert (request.status, request.decided_by) == ("approved", manager.user)
    assert decisions_of(request) == ["approval.approved"]


def test_an_edited_payload_is_the_managers_proposal_for_another_to_approve(
    business: Business, manager: TeamMember
) -> None:
    request = proposal(business)
    edited = {"body": "Hi Pat, a technician will confirm the price on site."}

    response = client_for(manager).post(url(request, "approve"), {"payload": edited}, format="json")

    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["status"], body["proposed_by"], body["decided_by"]) == ("pending", "mia", None)
    assert (body["payload"], body["original_payload"]) == (edited, DRAFT)
    request.refresh_from_db()
    assert (request.payload, request.original_payload, request.proposed_by_user) == (edited, DRAFT, manager.user)
    colleague = client_for(member_create(business, Role.MANAGER, username="max"))
    approved = colleague.post(url(request, "approve"), format="json")
    assert (approved.status_code, approved.json()["status"], approved.json()["decided_by"]) == (200, "approved", "max")


def test_an_unknown_payload_key_is_a_400_naming_it(business: Business, manager: TeamMember) -> None:
    request = proposal(business)

    response = client_for(manager).post(url(request, "approve"), {"payload": {"to": "+19005550100"}}, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "error": "bad_request",
        "detail": {"payload": {"to": ["not editable on a message_draft request (editable: body)"]}},
    }
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


def test_an_approval_with_an_empty_body_approves_as_proposed(business: Business, manager: TeamMember) -> None:
    request = proposal(business)

    response = client_for(manager).post(url(request, "approve"))

    assert response.status_code == 200
    request.refresh_from_db()
    assert (request.status, request.payload, request.decision_note) == ("approved", DRAFT, "")


def test_a_form_post_with_only_a_note_approves_as_proposed(business: Business, manager: TeamMember) -> None:
    request = proposal(business)

    response = client_for(manager).post(url(request, "approve"), {"note": "fine"})

    assert response.status_code == 200, response.content
    request.refresh_from_db()
    assert (request.status, request.payload, request.decision_note) == ("approved", DRAFT, "fine")


def test_a_payload_that_is_not_an_object_is_a_400(business: Business, manager: TeamMember) -> None:
    request = proposal(business)

    response = client_for(manager).post(url(request, "approve"), {"payload": ["edited"]}, format="json")

    assert response.status_code == 400
    assert response.json()["error"] == "bad_request" and "payload" in response.json()["detail"]
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_body_without_a_content_type_is_a_415_and_decides_nothing(
    business: Business, manager: TeamMember, action: str
) -> None:
    request = proposal(business)

    response = client_for(manager).generic("POST", url(request, action), "note=x", content_type="")

    assert response.status_code == 415
    assert response.json()["error"] == "unsupported_media_type"
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


def test_a_manager_rejects_through_the_api_with_a_token(business: Business, manager: TeamMember) -> None:
    request = proposal(business)
    token = Token.objects.create(user=manager.user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")

    response = client.post(url(request, "reject"), {"note": "no prices by text"}, format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["status"], response.json()["decided_by"]) == ("rejected", "mia")
    request.refresh_from_db()
    assert (request.status, request.decision_note) == ("rejected", "no prices by text")
    assert decisions_of(request) == ["approval.rejected"]


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_deciding_a_decided_request_is_a_409_conflict(business: Business, manager: TeamMember, action: str) -> None:
    request = proposal(business)
    client = client_for(manager)
    assert client.post(url(request, "approve")).status_code == 200

    response = client.post(url(request, action))

    assert response.status_code == 409
    assert response.json()["error"] == "conflict" and "already approved" in response.json()["detail"]
    assert decisions_of(request) == ["approval.approved"]


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_a_setter_gets_403_forbidden_and_nothing_changes(business: Business, setter: TeamMember, action: str) -> None:
    request = proposal(business, lead=lead_assign(new_lead(business), setter, actor="mia", reason="routing"))

    response = client_for(setter).post(url(request, action), {"note": "looks fine"}, format="json")

    assert response.status_code == 403
    assert response.json()["error"] == "forbidden" and "managers and owners" in response.json()["detail"]
    request.refresh_from_db()
    assert request.status == "pending" and decisions_of(request) == []


def test_approving_your_own_proposal_is_a_403(business: Business, manager: TeamMember) -> None:
    request = proposal(business, proposed_by="mia", proposed_by_user=manager.user)

    response = client_for(manager).post(url(request, "approve"))

    assert response.status_code == 403
    assert response.json()["error"] == "forbidden" and "mia proposed" in response.json()["detail"]
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"


def test_listing_costs_the_same_queries_for_many_requests(
    business: Business, manager: TeamMember, django_assert_max_num_queries: Any
) -> None:
    for _ in range(8):
        approval_approve(proposal(business), user=manager.user)
    client = client_for(manager)

    # session, user, scope, count, page (lead and decider joined)
    with django_assert_max_num_queries(6):
        assert client.get("/api/v1/approvals/").json()["count"] == 8


def test_the_schema_documents_the_approval_endpoints(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"

    call_command("spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", "--file", str(out))

    schema = json.loads(out.read_text())
    paths = schema["paths"]
    assert {p["name"] for p in paths["/api/v1/approvals/"]["get"]["parameters"]} >= {"status", "kind", "page"}
    approve = paths["/api/v1/approvals/{id}/approve/"]["post"]
    assert set(approve["responses"]) >= {"200", "202", "400", "403", "404", "409"}
    edit = schema["components"]["schemas"]["ApprovalApprove"]["properties"]["payload"]
    assert edit == {"$ref": "#/components/schemas/ApprovalPayloadEdit"} or "ApprovalPayloadEdit" in str(edit)
    assert set(paths["/api/v1/approvals/{id}/reject/"]["post"]["responses"]) >= {"200", "403", "404", "409"}
    assert set(schema["components"]["schemas"]["Approval"]["properties"]) == FIELDS
