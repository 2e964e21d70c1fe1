"""Estimates: the high-value approval gate, and Open-Estimate Follow-Up that
starts after the configured days and stops on a decision or a payment."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from agents.followup.estimates import (
    EstimateError,
    estimate_accept,
    estimate_decline,
    estimate_send,
)
from agents.orchestrator import orchestrate_pending
from approvals.models import ApprovalRequest
from approvals.services import SelfApproval, approval_approve, approval_reject
from crm.models import Business, Enrollment, Estimate, Lead, Receipt, Stage, Task, TeamMember
from crm.services import lead_sync
from crm.services.records import estimate_record, payment_record
from tests.factories import ServiceLineFactory
from tests.helpers.followup import NOON_NY, run_at

pytestmark = pytest.mark.django_db


@pytest.fixture
def quoted(lead: Lead, business: Business) -> Lead:
    """A lead whose visit happened: the next state is an estimate."""
    line = ServiceLineFactory.create(business=business, slug="hvac", name="HVAC", high_value_amount=Decimal("10000"))
    Lead.objects.filter(pk=lead.pk).update(service_line=line)  # the qualifier's finding, set directly for the test
    for stage in (Stage.BOOKED, Stage.APPOINTMENT_HELD):
        lead_sync.lead_transition(lead, stage, actor="test", reason="visit")
    lead.refresh_from_db()
    return lead


def _estimate(lead: Lead, amount: str) -> Estimate:
    return estimate_record(lead=lead, amount=Decimal(amount), currency="USD", actor="sam")


def test_an_estimate_above_high_value_waits_for_another_persons_approval(
    quoted: Lead, owner: TeamMember, manager: TeamMember
) -> None:
    estimate = estimate_send(_estimate(quoted, "12500.00"), actor="sam", user=owner.user, now=NOON_NY)
    assert estimate.status == "pending_approval" and estimate.sent_at is None
    request = ApprovalRequest.objects.get(kind="high_value_estimate")
    assert (request.status, request.proposed_by, request.payload["threshold"]) == ("pending", "sam", "10000.00")

    owner.role = "owner"  # even as an owner of the business, the proposer may not approve
    owner.save()
    with pytest.raises(SelfApproval):
        approval_approve(request, user=owner.user)
    estimate.refresh_from_db()
    assert estimate.status == "pending_approval"

    approval_approve(request, user=manager.user, note="price checked")
    estimate.refresh_from_db()
    assert estimate.status == "sent" and estimate.sent_at is not None
    assert Receipt.objects.filter(subject=estimate.public_id, action="estimate.sent", actor="mia").exists()
    orchestrate_pending()
    quoted.refresh_from_db()
    assert quoted.stage == Stage.ESTIMATE_SENT
    assert quoted.next_action == f"Get a decision on estimate {estimate.public_id}"


def test_a_rejected_high_value_estimate_goes_back_to_draft_for_the_owner(quoted: Lead, owner, manager) -> None:
    estimate = estimate_send(_estimate(quoted, "15000"), actor="sam", user=owner.user)
    approval_reject(ApprovalRequest.objects.get(), user=manager.user, note="discount too deep")
    estimate.refresh_from_db()
    assert estimate.status == "draft"
    assert Task.objects.filter(lead=quoted, kind="follow_up", title__contains="discount too deep").exists()


def test_an_estimate_at_or_below_high_value_is_sent_without_approval(quoted: Lead) -> None:
    estimate = estimate_send(_estimate(quoted, "10000.00"), actor="sam", now=NOON_NY)
    assert estimate.status == "sent"
    assert not ApprovalRequest.objects.exists()
    assert estimate_send(estimate, actor="sam").status == "sent"  # a double click changes nothing


def test_open_estimate_follow_up_starts_after_the_configured_days_and_stops_on_acceptance(
    quoted: Lead, business: Business
) -> None:
    business.estimate_follow_up_days = 3
    business.save()
    estimate = estimate_send(_estimate(quoted, "4200"), actor="sam", now=NOON_NY)
    orchestrate_pending()

    run_at(NOON_NY + timedelta(days=3) - timedelta(minutes=1))
    assert not Enrollment.objects.exists()  # not before the days have passed
    day3 = NOON_NY + timedelta(days=3)
    run_at(day3)
    enrollment = Enrollment.objects.get(lead=quoted)
    assert (enrollment.sequence.key, enrollment.status) == ("open_estimate", "active")
    run_at(day3 + timedelta(hours=1))
    assert (
        quoted.messages.get(direction="out").body == "Hi Pat, any questions about the estimate from Acme Heating & Air?"
    )

    estimate_accept(estimate, actor="sam", now=day3 + timedelta(hours=2))
    enrollment.refresh_from_db()
    assert (enrollment.status, enrollment.stop_reason) == ("stopped", "won")
    orchestrate_pending()
    quoted.refresh_from_db()
    assert quoted.stage == Stage.WON
    run_at(day3 + timedelta(days=10))
    assert quoted.messages.filter(direction="out").count() == 1
    assert not Task.objects.filter(lead=quoted, title="Call about the estimate").exists()


def test_a_decline_stops_the_follow_up_and_loses_the_lead(quoted: Lead) -> None:
    estimate = estimate_send(_estimate(quoted, "4200"), actor="sam", now=NOON_NY)
    orchestrate_pending()
    run_at(NOON_NY + timedelta(days=3))
    estimate_decline(estimate, actor="sam", reason="went with a cheaper quote")
    assert Enrollment.objects.get(lead=quoted).stop_reason == "declined"
    orchestrate_pending()
    quoted.refresh_from_db()
    assert quoted.stage == Stage.LOST
    with pytest.raises(EstimateError):
        estimate_accept(estimate, actor="sam")


def test_a_payment_stops_the_follow_up_before_its_next_step(quoted: Lead) -> None:
    estimate_send(_estimate(quoted, "4200"), actor="sam", now=NOON_NY)
    orchestrate_pending()
    day3 = NOON_NY + timedelta(days=3)
    run_at(day3)
    payment_record(lead=quoted, amount=Decimal("4200"), currency="USD", actor="stripe", received_at=day3)
    run_at(day3 + timedelta(hours=1))
    enrollment = Enrollment.objects.get(lead=quoted)
    assert (enrollment.status, enrollment.stop_reason) == ("stopped", "paid")
    assert not quoted.messages.filter(direction="out").exists()


def test_without_an_open_estimate_path_the_owner_gets_the_follow_up(quoted: Lead, playbook) -> None:
    playbook["open_estimate"].delete()
    estimate = estimate_send(_estimate(quoted, "900"), actor="sam", now=NOON_NY)
    orchestrate_pending()
    run_at(NOON_NY + timedelta(days=3))
    task = Task.objects.get(lead=quoted, kind="follow_up")
    assert task.title == f"Follow up on estimate {estimate.public_id}: no decision after 3 days"
    assert task.owner.user.username == "sam"


def test_an_estimate_expires_without_a_decision(quoted: Lead) -> None:
    estimate = _estimate(quoted, "900")
    Estimate.objects.filter(pk=estimate.pk).update(expires_at=NOON_NY + timedelta(days=2))
    estimate_send(estimate, actor="sam", now=NOON_NY)
    orchestrate_pending()
    run_at(NOON_NY + timedelta(days=2))
    estimate.refresh_from_db()
    assert estimate.status == "expired"
    assert Task.objects.filter(lead=quoted, title__startswith=f"Estimate {estimate.public_id} expired").exists()
    run_at(NOON_NY + timedelta(days=3))
    assert not Enrollment.objects.exists()  # an expired estimate is not followed up
