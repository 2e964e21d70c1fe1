"""The lead audit catches each broken promise, and passes a clean record."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from agents.audit import lead_audit
from agents.routing.assign import lead_reassign
from crm.models import Enrollment, Lead, Message, Role, Sequence
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.next_action import next_action_set
from crm.services.records import payment_record, refund_record
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def worked(business, setter):
    lead = lead_sync.lead_assign(lead_create(business), setter, actor="t", reason="t")
    next_action_set(lead, "Call", timezone.now() + timedelta(hours=1), actor="t", reason="t")
    return lead


def _checks(business) -> set[str]:
    return {v.check for v in lead_audit(business).violations}


def test_a_clean_record_passes_and_money_reconciles(business, worked) -> None:
    payment = payment_record(
        lead=worked, amount=Decimal("250.00"), currency="USD", actor="t", received_at=timezone.now()
    )
    refund_record(payment=payment, amount=Decimal("40.10"), actor="t", refunded_at=timezone.now())
    audit = lead_audit(business)
    assert audit.violations == []
    assert audit.money == {"USD": (Decimal("209.90"), Decimal("209.90"))}
    assert sum(audit.first_breaks.values()) == 1
    out = StringIO()
    call_command("audit_leads", "--business", business.slug, stdout=out)
    assert "audit passed" in out.getvalue()


def test_an_unowned_lead_and_a_missing_next_action_are_violations(business, worked) -> None:
    lead_create(business, phone="+12125550148")
    assert _checks(business) == {"ownership", "next_action"}
    with pytest.raises(CommandError, match="2 violation"):
        call_command("audit_leads", "--business", business.slug, stdout=StringIO())


def test_an_owner_who_cannot_see_the_lead_is_a_violation(business, worked) -> None:
    # Written as an older release (or a raw UPDATE) could leave it: the
    # services now refuse such an owner.
    technician = member_create(business, Role.TECHNICIAN, username="tom")
    Lead.objects.filter(pk=worked.pk).update(owner=technician)
    violations = lead_audit(business).violations
    assert [(v.check, v.subject) for v in violations] == [("ownership", worked.public_id)]
    assert "cannot see" in violations[0].detail


def test_a_lead_cannot_be_given_to_a_technician(business, worked) -> None:
    technician = member_create(business, Role.TECHNICIAN, username="tom")
    with pytest.raises(lead_sync.LeadSyncError, match="cannot own"):
        lead_reassign(worked, technician, actor="mia", reason="t")
    worked.refresh_from_db()
    assert worked.owner is not None and worked.owner.role == Role.SETTER


def test_a_path_message_after_a_reply_is_a_violation(business, worked) -> None:
    contact = worked.contact
    point = contact.points.get()
    sequence = Sequence.objects.create(business=business, key="no_reply", trigger="no_reply", steps=[])
    enrollment = Enrollment.objects.create(business=business, lead=worked, contact=contact, sequence=sequence)
    t0 = timezone.now()

    def message(direction: str, at, **kw) -> Message:
        return Message.objects.create(
            business=business,
            lead=worked,
            contact=contact,
            contact_point=point,
            direction=direction,
            status="received" if direction == "in" else "dry_run",
            created_at=at,
            idempotency_key=None if direction == "in" else f"k{at.timestamp()}",
            **kw,
        )

    message("out", t0 + timedelta(minutes=1), automated=True)
    message("in", t0 + timedelta(minutes=2))
    assert _checks(business) == set()
    message("out", t0 + timedelta(minutes=3), automated=True, enrollment=enrollment)
    assert _checks(business) == {"stop_rule"}


def test_an_automated_text_after_an_opt_out_is_a_violation(business, worked) -> None:
    point = worked.contact.points.get()
    consent_record(
        contact_point=point,
        channel="sms",
        granted=False,
        basis="keyword",
        actor="t",
        at=timezone.now() - timedelta(minutes=5),
    )
    Message.objects.create(
        business=business,
        lead=worked,
        contact=worked.contact,
        contact_point=point,
        direction="out",
        channel="sms",
        status="sent",
        automated=True,
        idempotency_key="after-stop",
    )
    assert _checks(business) == {"stop_rule"}


def test_an_acknowledgement_after_a_booking_is_a_violation(business, worked) -> None:
    from crm.services.records import appointment_record

    now = timezone.now()
    appointment_record(
        lead=worked, starts_at=now + timedelta(days=1), ends_at=now + timedelta(days=1, hours=1), actor="t"
    )
    Message.objects.create(
        business=business,
        lead=worked,
        contact=worked.contact,
        direction="out",
        channel="sms",
        status="dry_run",
        automated=True,
        idempotency_key=f"ack:{worked.public_id}",
        created_at=now + timedelta(seconds=5),
    )
    assert _checks(business) == {"stop_rule"}
