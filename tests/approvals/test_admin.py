"""The approval queue in the admin: scoping, filters, bulk decisions, edit-then-approve."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import timezone

from approvals.handlers import APPROVAL_HANDLERS
from approvals.models import ApprovalRequest
from approvals.services import approval_approve, approval_request_open
from crm.models import Business, Receipt, Role, TeamMember
from crm.services.lead_sync import lead_assign
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db

QUEUE = "/admin/approvals/approvalrequest/"
DRAFT = {"body": "Hi Pat, we guarantee the repair for 5 years.", "channel": "sms"}
_phones = (f"+1212555{n:04d}" for n in itertools.count(500))


@pytest.fixture(autouse=True)
def no_registered_handlers() -> Iterator[None]:
    with APPROVAL_HANDLERS.replaced():
        yield


def admin_client(member: TeamMember) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def proposal(business: Business, *, kind: str = "message_draft", **fields: Any) -> ApprovalRequest:
    fields.setdefault("proposed_by", "agent:sms_assistant")
    fields.setdefault("payload", dict(DRAFT))
    if "lead" not in fields:
        fields["lead"] = lead_create(business, phone=next(_phones))
    return approval_request_open(business=business, kind=kind, summary=f"Check this {kind}", **fields)


def shown(client: Client, **params: str) -> set[str]:
    response = client.get(QUEUE, params)
    assert response.status_code == 200
    return {row.public_id for row in response.context["cl"].result_list}


def texts(response: Any) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]


def change_url(request: ApprovalRequest) -> str:
    return f"{QUEUE}{request.pk}/change/"


def decide_url(request: ApprovalRequest) -> str:
    return f"{QUEUE}{request.pk}/decide/"


def actions_of(request: ApprovalRequest) -> list[tuple[str, str, str]]:
    return list(
        Receipt.objects.filter(subject=request.public_id)
        .exclude(action="approval.requested")
        .values_list("action", "actor", "reason")
    )


# ------------------------------------------------------------------ the queue


def test_the_queue_shows_only_the_requests_of_the_users_business(
    business: Business, other_business: Business, manager: TeamMember
) -> None:
    ours, no_lead = proposal(business), proposal(business, lead=None)
    proposal(other_business)

    assert shown(admin_client(manager)) == {ours.public_id, no_lead.public_id}


def test_a_setter_sees_the_requests_on_their_own_leads_only(business: Business, setter: TeamMember) -> None:
    mine = proposal(
        business, lead=lead_assign(lead_create(business, phone=next(_phones)), setter, actor="t", reason="r")
    )
    proposal(business)

    assert shown(admin_client(setter)) == {mine.public_id}


def test_the_queue_filters_by_status_and_kind(business: Business, manager: TeamMember) -> None:
    draft, merge = proposal(business), proposal(business, kind="merge_contacts", payload={"keep": "a"})
    decided = proposal(business)
    approval_approve(decided, user=manager.user)
    client = admin_client(manager)

    assert shown(client, status__exact="pending") == {draft.public_id, merge.public_id}
    assert shown(client, status__exact="approved") == {decided.public_id}
    assert shown(client, kind__exact="merge_contacts") == {merge.public_id}


def test_the_age_filter_sorts_requests_by_how_long_they_have_waited(business: Business, manager: TeamMember) -> None:
    fresh, day_old, stale = proposal(business), proposal(business), proposal(business)
    now = timezone.now()
    # Backdate when they were proposed (created_at is stamped on insert).
    ApprovalRequest.objects.filter(pk=day_old.pk).update(created_at=now - timedelta(hours=5))
    ApprovalRequest.objects.filter(pk=stale.pk).update(created_at=now - timedelta(days=2))
    client = admin_client(manager)

    assert shown(client, age="lt1h") == {fresh.public_id}
    assert shown(client, age="1h-24h") == {day_old.public_id}
    assert shown(client, age="gt24h") == {stale.public_id}
    assert shown(client) == {fresh.public_id, day_old.public_id, stale.public_id}


def test_the_queue_offers_no_add_and_the_page_no_delete(business: Business, manager: TeamMember) -> None:
    request = proposal(business)
    client = admin_client(manager)

    assert client.get(f"{QUEUE}add/").status_code == 403
    assert client.get(f"{QUEUE}{request.pk}/delete/").status_code == 403
    assert ApprovalRequest.objects.filter(pk=request.pk).exists()


# -------------------------------------------------------------- bulk actions


def bulk(client: Client, action: str, *requests: ApprovalRequest) -> Any:
    return client.post(
        QUEUE, {"action": action, "_selected_action": [r.pk for r in requests], "index": "0"}, follow=True
    )


def test_bulk_approve_approves_the_pending_and_reports_each_refusal(business: Business, manager: TeamMember) -> None:
    pending_one, pending_two = proposal(business), proposal(business, kind="complaint", payload={})
    own = proposal(business, proposed_by="mia", proposed_by_user=manager.user)
    decided = proposal(business)
    colleague = member_create(business, Role.MANAGER, username="max")
    approval_approve(decided, user=colleague.user)

    response = bulk(admin_client(manager), "approve_selected", pending_one, pending_two, own, decided)

    statuses = dict(ApprovalRequest.objects.values_list("public_id", "status"))
    assert statuses == {
        pending_one.public_id: "approved",
        pending_two.public_id: "approved",
        own.public_id: "pending",
        decided.public_id: "approved",
    }
    messages = texts(response)
    assert ("success", "Approved 2 request(s).") in messages
    errors = [text for level, text in messages if level == "error"]
    assert len(errors) == 2
    assert any(f"mia proposed {own.public_id}" in text for text in errors)
    assert any(f"{decided.public_id} is already approved by max" in text for text in errors)
    assert actions_of(pending_one) == [("approval.approved", "mia", "approved in bulk from the admin queue")]


def test_bulk_reject_rejects_the_selected(business: Business, manager: TeamMember) -> None:
    first, second = proposal(business), proposal(business)

    response = bulk(admin_client(manager), "reject_selected", first, second)

    assert set(ApprovalRequest.objects.values_list("status", flat=True)) == {"rejected"}
    assert ("success", "Rejected 2 request(s).") in texts(response)
    assert actions_of(second) == [("approval.rejected", "mia", "rejected in bulk from the admin queue")]


def test_a_setter_is_offered_no_decision_and_cannot_force_one(business: Business, setter: TeamMember) -> None:
    request = proposal(
        business, lead=lead_assign(lead_create(business, phone=next(_phones)), setter, actor="t", reason="r")
    )
    client = admin_client(setter)

    page = client.get(QUEUE).content.decode()
    assert "approve_selected" not in page and "reject_selected" not in page
    bulk(client, "approve_selected", request)
    client.post(decide_url(request), {"decision": "approve", "body": DRAFT["body"]})

    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"
    assert actions_of(request) == []


# ------------------------------------------------------- edit-then-approve page


def test_the_request_page_shows_the_draft_for_editing_and_no_save_buttons(
    business: Business, manager: TeamMember
) -> None:
    request = proposal(business)

    response = admin_client(manager).get(change_url(request))

    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="decision-form"' in page and 'name="body"' in page
    assert DRAFT["body"] in page
    assert 'name="_save"' not in page and 'name="_continue"' not in page


@pytest.mark.parametrize("button", ["approve", "edit"])
def test_a_reworded_draft_from_the_page_is_the_editors_proposal_for_another_to_approve(
    business: Business, manager: TeamMember, button: str
) -> None:
    request = proposal(business)
    edited = "Hi Pat, our technician will explain the warranty options on site."

    response = admin_client(manager).post(
        decide_url(request), {"decision": button, "body": edited + "\r\n", "note": "no guarantee by text"}, follow=True
    )

    request.refresh_from_db()
    assert (request.status, request.decided_by, request.proposed_by, request.proposed_by_user) == (
        "pending",
        None,
        "mia",
        manager.user,
    )
    assert request.payload == {**DRAFT, "body": edited} and request.original_payload == DRAFT
    [receipt] = Receipt.objects.filter(subject=request.public_id, action="approval.edited")
    assert (receipt.actor, receipt.reason) == ("mia", "no guarantee by text")
    assert receipt.before["payload"] == DRAFT and receipt.after["payload"]["body"] == edited
    assert request.summary == f"Edited by mia — {edited}"
    saved = f"Your edit of {request.public_id} is saved as your proposal, with a receipt: "
    assert ("warning", saved + "another manager or owner approves it.") in texts(response)
    assert response.redirect_chain[-1][0] == change_url(request)

    refused = admin_client(manager).post(decide_url(request), {"decision": "approve", "body": edited}, follow=True)
    assert ("error", f"mia proposed {request.public_id} and may not decide it") in texts(refused)
    colleague = member_create(business, Role.MANAGER, username="max")
    admin_client(colleague).post(decide_url(request), {"decision": "approve", "body": edited})
    request.refresh_from_db()
    assert (request.status, request.decided_by, request.payload["body"]) == ("approved", colleague.user, edited)


def test_proposing_an_unchanged_draft_is_refused(business: Business, manager: TeamMember) -> None:
    request = proposal(business)

    response = admin_client(manager).post(decide_url(request), {"decision": "edit", "body": DRAFT["body"]}, follow=True)

    request.refresh_from_db()
    assert (request.status, request.proposed_by) == ("pending", "agent:sms_assistant")
    assert any("Nothing was edited" in text for level, text in texts(response) if level == "error")


def test_approving_the_draft_unchanged_records_no_edit(business: Business, manager: TeamMember) -> None:
    request = proposal(business)

    # As a browser sends an untouched textarea back: with a CRLF line end.
    admin_client(manager).post(decide_url(request), {"decision": "approve", "body": DRAFT["body"] + "\r\n"})

    request.refresh_from_db()
    assert (request.status, request.payload, request.original_payload) == ("approved", DRAFT, None)


def test_reject_from_the_page_keeps_the_draft_as_proposed(business: Business, manager: TeamMember) -> None:
    request = proposal(business)

    admin_client(manager).post(decide_url(request), {"decision": "reject", "body": "edited", "note": "off playbook"})

    request.refresh_from_db()
    assert (request.status, request.payload, request.decision_note) == ("rejected", DRAFT, "off playbook")
    assert actions_of(request) == [("approval.rejected", "mia", "off playbook")]


def test_an_emptied_draft_is_not_approved(business: Business, manager: TeamMember) -> None:
    request = proposal(business)

    response = admin_client(manager).post(decide_url(request), {"decision": "approve", "body": "  "}, follow=True)

    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"
    assert any("cannot be empty" in text for level, text in texts(response) if level == "error")


def test_the_page_refuses_approving_your_own_proposal(business: Business, manager: TeamMember) -> None:
    request = proposal(business, proposed_by="mia", proposed_by_user=manager.user)

    response = admin_client(manager).post(
        decide_url(request), {"decision": "approve", "body": DRAFT["body"]}, follow=True
    )

    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"
    assert ("error", f"mia proposed {request.public_id} and may not decide it") in texts(response)


def test_a_request_without_a_draft_is_decided_without_a_text_box(business: Business, manager: TeamMember) -> None:
    keep, other = lead_create(business, phone=next(_phones)), lead_create(business, phone=next(_phones))
    payload = {"keep": keep.contact.public_id, "merge": [other.contact.public_id]}
    request = proposal(business, kind="merge_contacts", lead=keep, payload=payload)
    client = admin_client(manager)

    page = client.get(change_url(request)).content.decode()
    assert 'id="decision-form"' in page and 'name="body"' not in page
    client.post(decide_url(request), {"decision": "approve"})

    request.refresh_from_db()
    assert (request.status, request.payload) == ("approved", payload)


def test_what_a_contact_wrote_is_shown_but_not_offered_for_editing(business: Business, manager: TeamMember) -> None:
    request = proposal(business, kind="opt_out_question", payload={"body": "pls stop texting"})
    client = admin_client(manager)

    page = client.get(change_url(request)).content.decode()
    assert 'id="decision-form"' in page and 'name="body"' not in page and "pls stop texting" in page
    client.post(decide_url(request), {"decision": "approve", "body": "edited"})

    request.refresh_from_db()
    assert (request.status, request.payload["body"], request.original_payload) == ("approved", "pls stop texting", None)


def test_a_decided_request_shows_no_decision_form(business: Business, manager: TeamMember) -> None:
    request = proposal(business)
    approval_approve(request, user=member_create(business, Role.MANAGER, username="max").user)

    page = admin_client(manager).get(change_url(request)).content.decode()

    assert 'id="decision-form"' not in page
    assert "Approved" in page


def test_another_businesss_request_page_is_not_found(business: Business, other_business: Business) -> None:
    stranger = member_create(other_business, Role.MANAGER, username="otto")
    request = proposal(business)
    client = admin_client(stranger)

    assert client.post(decide_url(request), {"decision": "approve"}).status_code == 404
    assert client.post(f"{QUEUE}not-a-number/decide/", {"decision": "approve"}).status_code == 404
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"
