"""The exception path: out-of-area, emergency, commercial and warranty leads
are booked only after a person has decided."""

from __future__ import annotations

import pytest

from agents.booking.services import LeadNotBookable, appointment_book
from agents.events import lead_event
from agents.orchestrator import orchestrate_pending
from approvals.models import ApprovalRequest
from approvals.services import approval_approve, approval_reject
from crm.models import ServiceArea
from tests.helpers.booking import NOW, TUE_9

pytestmark = pytest.mark.django_db


@pytest.fixture
def far_away(shop, lead):
    ServiceArea.objects.create(business=shop, name="Metro", postal_codes=["606*"])
    lead.contact.postal_code = "99501"
    lead.contact.save()
    lead_event(lead, "qualification.answered", key="zip", data={"postal_code": "99501"})
    orchestrate_pending()
    lead.refresh_from_db()
    assert "out_of_area" in lead.exceptions
    return lead


def test_an_out_of_area_lead_is_not_booked_until_a_manager_approves(far_away, rule, manager) -> None:
    with pytest.raises(LeadNotBookable, match="out_of_area: a manager decides before any booking"):
        appointment_book(far_away, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)
    request = ApprovalRequest.objects.get(lead=far_away, kind="exception")
    approval_approve(request, user=manager.user, note="we drive there for this one")
    booked = appointment_book(far_away, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)
    assert booked.appointment.lead == far_away


def test_a_declined_exception_disqualifies_the_lead(far_away, rule, manager) -> None:
    request = ApprovalRequest.objects.get(lead=far_away, kind="exception")
    approval_reject(request, user=manager.user, note="outside our license area")
    far_away.refresh_from_db()
    assert far_away.stage == "disqualified"
    with pytest.raises(LeadNotBookable):
        appointment_book(far_away, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)
