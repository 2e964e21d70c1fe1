"""Merges that happen: the identity resolver asks whether two records are one
person (`merge_contacts`), a manager decides, and the decision acts."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from agents.capture.base import Capture
from agents.capture.identity import Applied, capture_apply
from approvals.models import ApprovalRequest
from approvals.services import (
    ApprovalConflict,
    ApprovalNotPending,
    SelfApproval,
    approval_approve,
    approval_reject,
    approval_request_open,
)
from crm.models import Business, Contact, KeptApartPair, Lead, Receipt, TeamMember
from crm.services import lead_sync
from tests.factories import lead_create

pytestmark = pytest.mark.django_db

PHONE, EMAIL, OTHER_PHONE = "+12125550147", "pat@x.com", "+12125550188"


def capture(**kw) -> Capture:
    kw.setdefault("channel", "form")
    kw.setdefault("occurred_at", timezone.now())
    return Capture(**kw)


@dataclass
class Conflict:
    by_phone: Applied
    by_email: Applied
    both: Applied
    request: ApprovalRequest


@pytest.fixture
def conflict(business: Business) -> Conflict:
    """A phone-only and an email-only capture, then one form with both."""
    by_phone = capture_apply(business=business, capture=capture(first_name="Pat", phones=[PHONE]))
    by_email = capture_apply(business=business, capture=capture(emails=[EMAIL]))
    both = capture_apply(business=business, capture=capture(phones=[PHONE], emails=[EMAIL]))
    return Conflict(by_phone, by_email, both, ApprovalRequest.objects.get(kind="merge_contacts"))


def test_a_manager_approving_the_merge_request_merges_the_two_contacts(business, manager):
    by_phone = capture_apply(business=business, capture=capture(phones=["+12125550147"]))
    by_email = capture_apply(business=business, capture=capture(emails=["pat@x.com"]))
    capture_apply(business=business, capture=capture(phones=["+12125550147"], emails=["pat@x.com"]))
    request = ApprovalRequest.objects.get(kind="merge_contacts")

    approval_approve(request, user=manager.user)

    merged = Contact.objects.get(pk=by_email.contact.pk)
    assert merged.merged_into_id == by_phone.contact.pk
    assert not merged.points.exists()
    assert set(by_phone.contact.points.values_list("value", flat=True)) == {"+12125550147", "pat@x.com"}


def test_the_approval_merges_the_leads_clears_the_flag_and_writes_one_merge_receipt(conflict: Conflict, manager):
    keep, merged = conflict.by_phone.contact, conflict.by_email.contact
    assert "merge_conflict" in Lead.objects.get(pk=conflict.both.lead.pk).exceptions

    approval_approve(conflict.request, user=manager.user, note="same person, called to check")

    request = ApprovalRequest.objects.get(pk=conflict.request.pk)
    assert (request.status, request.decided_by) == ("approved", manager.user)
    # Both leads had no service line: one need, one lead (the older survives).
    kept, twin = Lead.objects.get(pk=conflict.by_phone.lead.pk), Lead.objects.get(pk=conflict.by_email.lead.pk)
    assert (twin.stage, twin.merged_into_id, twin.contact_id) == ("lost", kept.pk, keep.pk)
    assert kept.is_open and kept.touches.count() == 3
    assert Lead.objects.filter(contact=keep, exceptions__contains=["merge_conflict"]).count() == 0
    receipt = Receipt.objects.get(action="contact.merged")
    assert (receipt.subject, receipt.actor, receipt.lead_id) == (merged.public_id, "mia", kept.pk)
    assert receipt.reason == f"{request.public_id} approved"
    cleared = Receipt.objects.get(action="lead.exceptions_changed", actor="mia")
    assert cleared.after == {"exceptions": []} and cleared.reason == f"merged ({request.public_id} approved)"


def test_a_second_capture_while_the_merge_is_pending_attaches_to_the_same_request(business, conflict: Conflict):
    again = capture_apply(business=business, capture=capture(phones=[PHONE], emails=[EMAIL]))
    assert ApprovalRequest.objects.filter(kind="merge_contacts").count() == 1
    request = ApprovalRequest.objects.get(pk=conflict.request.pk)
    keep, merged = conflict.by_phone.contact.public_id, conflict.by_email.contact.public_id
    assert request.payload["merge"] == [merged]
    assert [e["lead"] for e in request.payload["evidence"]] == [conflict.both.lead.public_id, again.lead.public_id]
    extended = Receipt.objects.get(subject=request.public_id, action="approval.extended")
    assert extended.actor == "agent:identity_resolver" and request.proposed_by == "agent:identity_resolver"

    # A third record of the person (another number, the same email): it joins the request.
    third = capture_apply(business=business, capture=capture(phones=[OTHER_PHONE]))
    capture_apply(business=business, capture=capture(phones=[OTHER_PHONE], emails=[EMAIL]))

    request = ApprovalRequest.objects.get(pk=conflict.request.pk)
    assert ApprovalRequest.objects.filter(kind="merge_contacts").count() == 1
    assert request.payload["keep"] == keep
    assert request.payload["merge"] == [merged, third.contact.public_id]
    assert request.summary == f"Same person? {keep} and {merged}, {third.contact.public_id}"
    assert Receipt.objects.filter(subject=request.public_id, action="approval.extended").count() == 2


def test_approving_an_extended_request_merges_every_contact_it_names(business, conflict: Conflict, manager):
    third = capture_apply(business=business, capture=capture(phones=[OTHER_PHONE]))
    capture_apply(business=business, capture=capture(phones=[OTHER_PHONE], emails=[EMAIL]))

    approval_approve(conflict.request, user=manager.user)

    keep = conflict.by_phone.contact
    for other in (conflict.by_email.contact, third.contact):
        assert Contact.objects.get(pk=other.pk).merged_into_id == keep.pk
    assert set(keep.points.values_list("value", flat=True)) == {PHONE, EMAIL, OTHER_PHONE}
    assert Receipt.objects.filter(action="contact.merged").count() == 2
    assert Lead.objects.filter(contact=keep).exclude(stage="lost").count() == 1  # one need, one open lead


def test_rejecting_keeps_both_apart_and_stops_asking_about_that_pair(business, conflict: Conflict, manager):
    approval_reject(conflict.request, user=manager.user, note="two people sharing an email")

    keep, other = conflict.by_phone.contact, conflict.by_email.contact
    low, high = sorted((keep.pk, other.pk))
    pair = KeptApartPair.objects.get()
    assert (pair.contact_low_id, pair.contact_high_id) == (low, high)
    assert (pair.decided_by, pair.approval) == ("mia", conflict.request.public_id)
    assert Contact.objects.get(pk=other.pk).merged_into_id is None
    assert "merge_conflict" not in Lead.objects.get(pk=conflict.both.lead.pk).exceptions

    later = capture_apply(business=business, capture=capture(phones=[PHONE], emails=[EMAIL]))

    assert ApprovalRequest.objects.filter(kind="merge_contacts").count() == 1
    assert "merge_conflict" not in Lead.objects.get(pk=later.lead.pk).exceptions
    assert not Receipt.objects.filter(action="approval.extended").exists()


def test_a_pair_kept_apart_is_not_added_to_another_pending_request(business, conflict: Conflict, manager):
    approval_reject(conflict.request, user=manager.user)
    third = capture_apply(business=business, capture=capture(phones=[OTHER_PHONE]))
    # A capture ties the third record to the phone's: a new request, about that pair only.
    capture_apply(business=business, capture=capture(phones=[OTHER_PHONE], emails=["third@x.com"]))
    capture_apply(business=business, capture=capture(phones=[PHONE], emails=["third@x.com"]))
    pending = ApprovalRequest.objects.get(kind="merge_contacts", status="pending")
    assert pending.payload["keep"] == conflict.by_phone.contact.public_id
    assert pending.payload["merge"] == [third.contact.public_id]

    # The email's record, kept apart from the phone's, finds the third: it may
    # not join a request that would merge it into the phone's record.
    capture_apply(business=business, capture=capture(phones=[OTHER_PHONE], emails=[EMAIL]))

    pending.refresh_from_db()
    assert pending.payload["merge"] == [third.contact.public_id]
    asking = ApprovalRequest.objects.get(kind="merge_contacts", status="pending", payload__keep=third.contact.public_id)
    assert asking.payload["merge"] == [conflict.by_email.contact.public_id]

    # The same tie again joins that request, not a third one.
    capture_apply(business=business, capture=capture(phones=[OTHER_PHONE], emails=[EMAIL]))

    assert ApprovalRequest.objects.filter(kind="merge_contacts", status="pending").count() == 2
    asking.refresh_from_db()
    assert len(asking.payload["evidence"]) == 2


def test_a_persons_own_merge_proposal_is_not_extended_by_a_capture(business, manager):
    keep, other = lead_create(business, phone=PHONE), lead_create(business, phone=OTHER_PHONE, email=EMAIL)
    payload = {"keep": keep.contact.public_id, "merge": [other.contact.public_id]}
    theirs = approval_request_open(
        business=business, lead=keep, kind="merge_contacts", summary="Same?", proposed_by="sam", payload=payload
    )

    capture_apply(business=business, capture=capture(phones=[PHONE], emails=[EMAIL]))

    theirs.refresh_from_db()
    assert theirs.payload == payload
    assert ApprovalRequest.objects.filter(kind="merge_contacts", proposed_by="agent:identity_resolver").count() == 1


def test_the_proposer_cannot_approve_its_own_merge_proposal(business, manager: TeamMember):
    keep, other = lead_create(business, phone=PHONE), lead_create(business, phone=OTHER_PHONE)
    request = approval_request_open(
        business=business,
        lead=keep,
        kind="merge_contacts",
        summary="These two look like one person",
        proposed_by="mia",
        proposed_by_user=manager.user,
        payload={"keep": keep.contact.public_id, "merge": [other.contact.public_id]},
    )

    with pytest.raises(SelfApproval):
        approval_approve(request, user=manager.user)

    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"
    assert Contact.objects.get(pk=other.contact_id).merged_into_id is None


def test_approving_the_same_merge_twice_is_refused_the_second_time_and_changes_nothing(conflict: Conflict, manager):
    approval_approve(conflict.request, user=manager.user)
    receipts = Receipt.objects.count()

    with pytest.raises(ApprovalNotPending):
        approval_approve(conflict.request, user=manager.user)

    assert Receipt.objects.count() == receipts


def test_a_second_request_for_a_pair_merged_already_is_approved_without_a_second_merge(
    business, conflict: Conflict, manager
):
    keep, other = conflict.by_phone.contact, conflict.by_email.contact
    twin = approval_request_open(
        business=business,
        lead=conflict.by_email.lead,
        kind="merge_contacts",
        summary="Same person?",
        proposed_by="sam",
        payload={"keep": other.public_id, "merge": [keep.public_id]},
    )
    approval_approve(conflict.request, user=manager.user)

    approval_approve(twin, user=manager.user)

    assert ApprovalRequest.objects.get(pk=twin.pk).status == "approved"
    assert Receipt.objects.filter(action="contact.merged").count() == 1
    assert Contact.objects.get(pk=other.pk).merged_into_id == keep.pk


def test_a_request_naming_a_contact_of_no_one_cannot_be_approved_but_can_be_rejected(business, manager):
    lead = lead_create(business, phone=PHONE)
    request = approval_request_open(
        business=business,
        lead=lead,
        kind="merge_contacts",
        summary="Same person?",
        proposed_by="agent:identity_resolver",
        payload={"keep": lead.contact.public_id, "merge": ["cont_nobody"]},
    )

    with pytest.raises(ApprovalConflict, match="cont_nobody is not a contact of acme"):
        approval_approve(request, user=manager.user)
    assert ApprovalRequest.objects.get(pk=request.pk).status == "pending"

    approval_reject(request, user=manager.user)
    assert not KeptApartPair.objects.exists()


def test_a_capture_after_the_merge_finds_the_surviving_contact(business, conflict: Conflict, manager):
    approval_approve(conflict.request, user=manager.user)

    by_email = capture_apply(business=business, capture=capture(emails=[EMAIL]))

    assert by_email.contact == conflict.by_phone.contact
    assert by_email.lead == conflict.by_phone.lead
    assert ApprovalRequest.objects.filter(kind="merge_contacts").count() == 1


def test_the_merged_contacts_admin_page_redirects_to_the_surviving_contact(conflict: Conflict, manager):
    approval_approve(conflict.request, user=manager.user)
    client = Client()
    client.force_login(manager.user)

    response = client.get(f"/admin/crm/contact/{conflict.by_email.contact.pk}/change/")

    assert response.status_code == 302
    assert response["Location"] == f"/admin/crm/contact/{conflict.by_phone.contact.pk}/change/"
    page = client.get(response["Location"]).content.decode()
    assert f"Contact {conflict.by_email.contact.public_id} was merged into this one: the same person." in page


def test_the_closed_duplicate_leads_admin_page_stays_and_says_where_it_went(conflict: Conflict, manager):
    approval_approve(conflict.request, user=manager.user)
    client = Client()
    client.force_login(manager.user)

    response = client.get(f"/admin/crm/lead/{conflict.by_email.lead.pk}/change/")

    assert response.status_code == 200
    page = response.content.decode()
    kept = conflict.by_phone.lead.public_id
    assert f"This lead was merged into {kept}: its conversation continues there." in page
    assert f'href="/admin/crm/lead/{conflict.by_phone.lead.pk}/change/">{kept}</a>' in page


def test_the_merged_contacts_api_url_answers_a_permanent_redirect_to_the_survivor(conflict: Conflict, manager):
    approval_approve(conflict.request, user=manager.user)
    client = APIClient()
    client.force_login(manager.user)
    merged, keep = conflict.by_email.contact.public_id, conflict.by_phone.contact.public_id

    response = client.get(f"/api/v1/contacts/{merged}/")

    assert response.status_code == 301
    assert response["Location"] == f"http://testserver/api/v1/contacts/{keep}/"
    body = client.get(response["Location"]).json()
    assert body["id"] == keep and body["emails"] == [EMAIL]
    listed = [row["id"] for row in client.get("/api/v1/contacts/").json()["results"]]
    assert listed == [keep]


def test_a_setter_is_sent_to_the_survivor_only_when_they_may_see_it(business, conflict: Conflict, manager, setter):
    approval_approve(conflict.request, user=manager.user)
    client = APIClient()
    client.force_login(setter.user)
    url = f"/api/v1/contacts/{conflict.by_email.contact.public_id}/"

    assert client.get(url).status_code == 404

    lead_sync.lead_assign(conflict.by_phone.lead, setter, actor="mia", reason="test")
    response = client.get(url)

    assert response.status_code == 301
    assert response["Location"].endswith(f"/api/v1/contacts/{conflict.by_phone.contact.public_id}/")
