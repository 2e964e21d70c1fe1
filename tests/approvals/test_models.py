from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.models import ApprovalRequest
from crm.models import Business
from tests.factories import UserFactory, lead_create

pytestmark = pytest.mark.django_db


def _proposal(business: Business, **fields: Any) -> ApprovalRequest:
    fields.setdefault("proposed_by", "agent:sms_assistant")
    return ApprovalRequest.objects.create(
        business=business,
        lead=lead_create(business),
        kind=ApprovalRequest.Kind.MESSAGE_DRAFT,
        summary="Reply with the approved booking link",
        payload={"body": "Here is the link to book a visit."},
        **fields,
    )


def _decide(proposal: ApprovalRequest, decided_by: Any, status: str = "approved") -> None:
    ApprovalRequest.objects.filter(pk=proposal.pk).update(
        status=status, decided_by=decided_by, decided_at=timezone.now()
    )


def test_a_person_cannot_approve_their_own_proposal(business: Business) -> None:
    sam = UserFactory(username="sam")
    proposal = _proposal(business, proposed_by="sam", proposed_by_user=sam)

    with pytest.raises(IntegrityError, match="approvals_approvalrequest_not_self_approved"), transaction.atomic():
        _decide(proposal, sam)

    proposal.refresh_from_db()
    assert (proposal.status, proposal.decided_by) == ("pending", None)


def test_a_person_cannot_reject_their_own_proposal_either(business: Business) -> None:
    sam = UserFactory(username="sam")
    proposal = _proposal(business, proposed_by="sam", proposed_by_user=sam)

    with pytest.raises(IntegrityError, match="approvals_approvalrequest_not_self_approved"), transaction.atomic():
        _decide(proposal, sam, status="rejected")


def test_another_person_may_decide_a_proposal(business: Business) -> None:
    sam, mia = UserFactory(username="sam"), UserFactory(username="mia")
    proposal = _proposal(business, proposed_by="sam", proposed_by_user=sam)

    _decide(proposal, mia)

    proposal.refresh_from_db()
    assert (proposal.status, proposal.decided_by) == ("approved", mia)


def test_a_person_may_decide_an_automated_proposal(business: Business) -> None:
    mia = UserFactory(username="mia")
    proposal = _proposal(business)

    _decide(proposal, mia)

    assert ApprovalRequest.objects.get(pk=proposal.pk).decided_by == mia


def test_a_pending_proposal_with_a_decision_time_is_refused(business: Business) -> None:
    with pytest.raises(IntegrityError, match="approvals_approvalrequest_decided_has_time"), transaction.atomic():
        _proposal(business, decided_at=timezone.now())

    assert not ApprovalRequest.objects.exists()


def test_a_decided_proposal_without_a_decision_time_is_refused(business: Business) -> None:
    proposal = _proposal(business)

    with pytest.raises(IntegrityError, match="approvals_approvalrequest_decided_has_time"), transaction.atomic():
        ApprovalRequest.objects.filter(pk=proposal.pk).update(status="approved", decided_by=UserFactory())

    assert ApprovalRequest.objects.get(pk=proposal.pk).status == "pending"


def test_an_unknown_kind_is_refused(business: Business) -> None:
    with pytest.raises(IntegrityError, match="approvals_approvalrequest_kind_valid"), transaction.atomic():
        ApprovalRequest.objects.create(business=business, kind="anything_goes", summary="?", proposed_by="agent:x")


def test_a_proposal_carries_an_apr_public_id(business: Business) -> None:
    assert _proposal(business).public_id.startswith("apr_")


def test_the_database_refuses_to_re_point_a_request_at_another_record(business: Business) -> None:
    proposal = _proposal(business)
    other_lead = lead_create(business, phone="+12125550199")

    with pytest.raises(IntegrityError, match="pinned records are fixed"), transaction.atomic():
        ApprovalRequest.objects.filter(pk=proposal.pk).update(lead=other_lead)

    proposal.refresh_from_db()
    assert proposal.lead_id != other_lead.pk


def test_the_database_refuses_a_pinned_record_of_another_business(business: Business, other_business: Business) -> None:
    foreign_lead = lead_create(other_business, phone="+12125550198")

    with pytest.raises(IntegrityError, match="belongs to another business"), transaction.atomic():
        ApprovalRequest.objects.create(
            business=business, lead=foreign_lead, kind="exception", summary="Borrowed", proposed_by="agent:fit"
        )

    assert not ApprovalRequest.objects.exists()
