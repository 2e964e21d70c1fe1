"""Every named database constraint refuses what it promises to refuse.

Rows are built through services where a service exists; a constraint that a
service already guards is then reached with a direct write, because the point
is that the database refuses even code that forgot the rule.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import DatabaseError, IntegrityError, connection, models, transaction
from django.utils import timezone

from crm.ids import PublicIdField
from crm.models import (
    Business,
    ConsentEvent,
    Contact,
    ContactPoint,
    Enrollment,
    Estimate,
    InboundEvent,
    Invoice,
    Lead,
    Message,
    Payment,
    Receipt,
    Refund,
    Sequence,
    Stage,
    Task,
)
from crm.services.lead_sync import LeadSyncError, lead_transition
from crm.services.receipts import receipt_write
from crm.services.records import (
    appointment_record,
    contact_create,
    estimate_record,
    invoice_record,
    job_record,
    lead_open,
    payment_record,
    refund_record,
    task_create,
)
from crm.services.timers import timer_schedule
from tests.factories import ServiceLineFactory, lead_create

pytestmark = pytest.mark.django_db


def _contact(business: Business, phone: str = "+12125550101") -> Contact:
    return contact_create(business=business, actor="test", first_name="Pat", phones=[phone])


# Contact points


def test_the_same_phone_twice_in_one_business_is_refused(business: Business) -> None:
    _contact(business, "+12125550101")

    with pytest.raises(IntegrityError, match="crm_contactpoint_unique_value"), transaction.atomic():
        _contact(business, "(212) 555-0101")

    assert ContactPoint.objects.filter(business=business, value="+12125550101").count() == 1


def test_the_same_phone_in_another_business_is_allowed(business: Business, other_business: Business) -> None:
    _contact(business, "+12125550101")
    _contact(other_business, "+12125550101")

    assert ContactPoint.objects.filter(value="+12125550101").count() == 2


# One open lead per contact and service line


def test_a_second_open_lead_for_the_same_contact_without_a_service_line_is_refused(business: Business) -> None:
    lead = lead_create(business)

    with pytest.raises(IntegrityError, match="crm_lead_one_open_per_contact_service"), transaction.atomic():
        lead_open(contact=lead.contact, actor="test")

    assert Lead.objects.filter(contact=lead.contact).count() == 1


def test_a_second_open_lead_for_the_same_contact_and_service_line_is_refused(business: Business) -> None:
    line = ServiceLineFactory.create(business=business)
    lead = lead_create(business, service_line=line)

    with pytest.raises(IntegrityError, match="crm_lead_one_open_per_contact_service"), transaction.atomic():
        lead_open(contact=lead.contact, actor="test", service_line=line)

    assert Lead.objects.filter(contact=lead.contact).count() == 1


def test_an_open_lead_for_another_service_line_of_the_same_contact_is_allowed(business: Business) -> None:
    lead = lead_create(business, service_line=ServiceLineFactory.create(business=business))

    lead_open(contact=lead.contact, actor="test", service_line=ServiceLineFactory.create(business=business))
    lead_open(contact=lead.contact, actor="test")

    assert Lead.objects.filter(contact=lead.contact, closed_at__isnull=True).count() == 3


def test_a_new_lead_is_allowed_once_the_first_is_lost(business: Business) -> None:
    first = lead_create(business)
    lead_transition(first, Stage.LOST, actor="sam", reason="went with a competitor")

    second = lead_open(contact=first.contact, actor="test")

    assert second.stage == Stage.NEW
    assert set(Lead.objects.filter(contact=first.contact).values_list("stage", flat=True)) == {"new", "lost"}


def test_reopening_a_lost_lead_while_a_newer_one_is_open_is_refused(business: Business) -> None:
    first = lead_create(business)
    lead_transition(first, Stage.LOST, actor="sam", reason="went with a competitor")
    newer = lead_open(contact=first.contact, actor="test")
    receipts = Receipt.objects.count()

    with pytest.raises(LeadSyncError, match=f"{newer.public_id} is already the open lead"):
        lead_transition(first, Stage.ENGAGED, actor="sam", reason="replied")

    assert Lead.objects.get(pk=first.pk).stage == Stage.LOST
    assert Receipt.objects.count() == receipts


def test_the_database_refuses_a_second_open_lead_even_past_the_service(business: Business) -> None:
    first = lead_create(business)
    lead_transition(first, Stage.LOST, actor="sam", reason="went with a competitor")
    lead_open(contact=first.contact, actor="test")

    with pytest.raises(IntegrityError, match="crm_lead_one_open_per_contact_service"), transaction.atomic():
        Lead.objects.filter(pk=first.pk).update(stage=Stage.ENGAGED)


# Lead stage and next action


def test_a_stage_outside_the_stage_list_is_refused(business: Business) -> None:
    lead = lead_create(business)

    with pytest.raises(IntegrityError, match="crm_lead_stage_valid"), transaction.atomic():
        Lead.objects.filter(pk=lead.pk).update(stage="limbo")

    assert Lead.objects.get(pk=lead.pk).stage == Stage.NEW


def test_a_next_action_without_a_due_time_is_refused(business: Business) -> None:
    lead = lead_create(business)

    with pytest.raises(IntegrityError, match="crm_lead_next_action_has_due_time"), transaction.atomic():
        Lead.objects.filter(pk=lead.pk).update(next_action="Call back", next_action_due_at=None)

    assert Lead.objects.get(pk=lead.pk).next_action == ""


# Provider ids and idempotency keys


def _inbound(provider: str, external_id: str) -> InboundEvent:
    return InboundEvent.objects.create(
        provider=provider, external_id=external_id, body=b"{}", received_at=timezone.now()
    )


def test_the_same_provider_event_delivered_twice_is_refused() -> None:
    _inbound("meta", "leadgen-1")

    with pytest.raises(IntegrityError, match="crm_inboundevent_unique_external_id"), transaction.atomic():
        _inbound("meta", "leadgen-1")

    assert InboundEvent.objects.filter(external_id="leadgen-1").count() == 1


def test_the_same_event_id_from_another_provider_is_allowed() -> None:
    _inbound("meta", "1001")
    _inbound("typeform", "1001")

    assert InboundEvent.objects.filter(external_id="1001").count() == 2


def _message(business: Business, *, direction: str = "out", key: str | None = None) -> Message:
    return Message.objects.create(
        business=business,
        direction=direction,
        status="queued" if direction == "out" else "received",
        body="Hi",
        idempotency_key=key,
    )


def test_two_messages_with_one_idempotency_key_are_refused(business: Business) -> None:
    _message(business, key="lead_1:first_response")

    with pytest.raises(IntegrityError, match="crm_message_unique_idempotency_key"), transaction.atomic():
        _message(business, key="lead_1:first_response")

    assert Message.objects.filter(idempotency_key="lead_1:first_response").count() == 1


def test_an_outbound_message_without_an_idempotency_key_is_refused(business: Business) -> None:
    with pytest.raises(IntegrityError, match="crm_message_outbound_has_idempotency_key"), transaction.atomic():
        _message(business, direction="out", key=None)

    assert not Message.objects.exists()


def test_inbound_messages_need_no_idempotency_key(business: Business) -> None:
    _message(business, direction="in")
    _message(business, direction="in")

    assert Message.objects.filter(direction="in", idempotency_key__isnull=True).count() == 2


def test_the_same_provider_payment_recorded_twice_is_refused(business: Business) -> None:
    lead = lead_create(business)

    def record() -> Payment:
        return payment_record(
            lead=lead,
            amount=Decimal("100.00"),
            currency="USD",
            actor="stripe",
            received_at=timezone.now(),
            provider="stripe",
            external_id="pi_1",
        )

    record()

    with pytest.raises(IntegrityError, match="crm_payment_unique_external_id"), transaction.atomic():
        record()

    assert Payment.objects.filter(external_id="pi_1").count() == 1


def test_payments_entered_by_hand_need_no_provider_id(business: Business) -> None:
    lead = lead_create(business)
    for _ in range(2):
        payment_record(lead=lead, amount=Decimal("50.00"), currency="USD", actor="mia", received_at=timezone.now())

    assert Payment.objects.filter(provider="manual", external_id__isnull=True).count() == 2


def test_the_same_provider_refund_recorded_twice_is_refused(business: Business) -> None:
    lead = lead_create(business)
    payment = payment_record(lead=lead, amount=Decimal("100.00"), currency="USD", actor="t", received_at=timezone.now())
    refund_record(
        payment=payment,
        amount=Decimal("10.00"),
        actor="stripe",
        refunded_at=timezone.now(),
        provider="stripe",
        external_id="re_1",
    )

    with pytest.raises(IntegrityError, match="crm_refund_unique_external_id"), transaction.atomic():
        refund_record(
            payment=payment,
            amount=Decimal("10.00"),
            actor="stripe",
            refunded_at=timezone.now(),
            provider="stripe",
            external_id="re_1",
        )

    assert Refund.objects.filter(external_id="re_1").count() == 1


# Money


def _record_negative(kind: str, lead: Lead) -> None:
    now, minus = timezone.now(), Decimal("-0.01")
    if kind == "estimate":
        estimate_record(lead=lead, amount=minus, currency="USD", actor="t")
    elif kind == "invoice":
        invoice_record(lead=lead, amount=minus, currency="USD", actor="t")
    elif kind == "payment":
        payment_record(lead=lead, amount=minus, currency="USD", actor="t", received_at=now)
    else:
        payment = payment_record(lead=lead, amount=Decimal("5.00"), currency="USD", actor="t", received_at=now)
        refund_record(payment=payment, amount=minus, actor="t", refunded_at=now)


@pytest.mark.parametrize("kind", ["estimate", "invoice", "payment", "refund"])
def test_a_negative_amount_is_refused(business: Business, kind: str) -> None:
    lead = lead_create(business)

    with pytest.raises(IntegrityError, match=f"crm_{kind}_amount_nonnegative"), transaction.atomic():
        _record_negative(kind, lead)

    model: type[models.Model] = {"estimate": Estimate, "invoice": Invoice, "payment": Payment, "refund": Refund}[kind]
    assert not model._default_manager.filter(amount__lt=0).exists()


@pytest.mark.parametrize("model", [Estimate, Invoice, Payment, Refund])
def test_money_is_a_twelve_digit_decimal_beside_its_currency(model: type[models.Model]) -> None:
    amount = model._meta.get_field("amount")
    currency = model._meta.get_field("currency")

    assert isinstance(amount, models.DecimalField)
    assert (amount.max_digits, amount.decimal_places) == (12, 2)
    assert isinstance(currency, models.CharField)
    assert currency.max_length == 3


def test_money_comes_back_as_the_exact_decimal_with_its_currency(business: Business) -> None:
    lead = lead_create(business)
    estimate = estimate_record(lead=lead, amount=Decimal("1999.99"), currency="EUR", actor="mia")

    stored = Estimate.objects.get(pk=estimate.pk)
    receipt = lead.receipts.get(action="estimate.recorded")

    assert isinstance(stored.amount, Decimal)
    assert (stored.amount, stored.currency) == (Decimal("1999.99"), "EUR")
    # Receipts keep money as the exact decimal string, never a float.
    assert receipt.after == {"amount": "1999.99", "currency": "EUR"}


def test_a_matched_payment_without_a_lead_is_refused(business: Business) -> None:
    with pytest.raises(IntegrityError, match="crm_payment_matched_has_lead"), transaction.atomic():
        Payment.objects.create(
            business=business, amount=Decimal("20.00"), received_at=timezone.now(), match_status="matched"
        )

    Payment.objects.create(business=business, amount=Decimal("20.00"), received_at=timezone.now())
    assert list(Payment.objects.values_list("match_status", flat=True)) == ["unmatched"]


# Appointments, tasks, enrollments


@pytest.mark.parametrize("length", [timedelta(0), timedelta(minutes=-30)])
def test_an_appointment_that_does_not_end_after_it_starts_is_refused(business: Business, length: timedelta) -> None:
    lead = lead_create(business)
    starts = timezone.now() + timedelta(days=1)

    with pytest.raises(IntegrityError, match="crm_appointment_ends_after_start"), transaction.atomic():
        appointment_record(lead=lead, starts_at=starts, ends_at=starts + length, actor="sam")

    assert not lead.appointments.exists()


def test_a_second_open_next_action_task_for_a_lead_is_refused(business: Business) -> None:
    lead = lead_create(business)
    due = timezone.now() + timedelta(hours=1)
    task_create(lead=lead, title="Call back", due_at=due, actor="sam")

    # The service validates first (a clear message, nothing written)…
    with pytest.raises(ValidationError, match="crm_task_one_open_next_action"):
        task_create(lead=lead, title="Text back", due_at=due, actor="sam")
    # …and the database refuses whatever gets past it.
    with pytest.raises(IntegrityError, match="crm_task_one_open_next_action"), transaction.atomic():
        Task.objects.create(business=business, lead=lead, kind="next_action", title="Text back", due_at=due)

    task_create(lead=lead, title="Send photos", due_at=due, actor="sam", kind="follow_up")
    assert sorted(Task.objects.filter(lead=lead).values_list("kind", flat=True)) == ["follow_up", "next_action"]


def test_a_second_active_enrollment_for_a_contact_is_refused(business: Business) -> None:
    lead = lead_create(business)
    no_reply = Sequence.objects.create(business=business, key="no-reply", trigger="no_reply", steps=[])
    reminders = Sequence.objects.create(business=business, key="reminders", trigger="booked", steps=[])
    Enrollment.objects.create(business=business, lead=lead, contact=lead.contact, sequence=no_reply)

    with pytest.raises(IntegrityError, match="crm_enrollment_one_active_per_contact"), transaction.atomic():
        Enrollment.objects.create(business=business, lead=lead, contact=lead.contact, sequence=reminders)

    Enrollment.objects.create(business=business, lead=lead, contact=lead.contact, sequence=reminders, status="waiting")
    assert sorted(Enrollment.objects.filter(contact=lead.contact).values_list("status", flat=True)) == [
        "active",
        "waiting",
    ]


# Public ids


def _one_of_each(business: Business) -> dict[str, Any]:
    now = timezone.now()
    lead = lead_create(business)
    payment = payment_record(lead=lead, amount=Decimal("10.00"), currency="USD", actor="t", received_at=now)
    return {
        "biz": business,
        "lead": lead,
        "cont": lead.contact,
        "cp": lead.contact.points.get(),
        "tch": lead.touches.get(),
        "appt": appointment_record(lead=lead, starts_at=now, ends_at=now + timedelta(hours=1), actor="t"),
        "est": estimate_record(lead=lead, amount=Decimal("10.00"), currency="USD", actor="t"),
        "job": job_record(lead=lead, actor="t"),
        "inv": invoice_record(lead=lead, amount=Decimal("10.00"), currency="USD", actor="t"),
        "pay": payment,
        "rfnd": refund_record(payment=payment, amount=Decimal("1.00"), actor="t", refunded_at=now),
        "msg": _message(business, key=f"{lead.public_id}:hello"),
        "task": task_create(lead=lead, title="Call", due_at=now, actor="t"),
        "tmr": timer_schedule(business=business, kind="test.noop", due_at=now, lead=lead),
        "rcpt": receipt_write(business=business, actor="t", action="test.noted", subject=lead.public_id),
        "evt": _inbound("website", "form-1"),
    }


def test_every_record_carries_a_public_id_with_its_prefix(business: Business) -> None:
    records = _one_of_each(business)

    for prefix, record in records.items():
        assert re.match(rf"^{prefix}_[0-9A-Z]{{26}}$", record.public_id), (prefix, record.public_id)


def test_every_table_with_a_public_id_has_the_immutability_trigger() -> None:
    with_public_id = {
        model._meta.db_table
        for model in apps.get_models()
        if any(isinstance(field, PublicIdField) for field in model._meta.fields)
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE t.tgname = c.relname || '_public_id_immutable' AND t.tgenabled = 'O'"
        )
        guarded = {row[0] for row in cursor.fetchall()}

    assert with_public_id
    assert with_public_id - guarded == set()


@pytest.mark.parametrize("prefix", ["biz", "lead", "cont", "appt", "job", "inv", "pay", "rfnd", "msg", "tmr", "evt"])
def test_a_raw_sql_update_of_a_public_id_is_refused_by_the_trigger(business: Business, prefix: str) -> None:
    record = _one_of_each(business)[prefix]
    table = record._meta.db_table

    refused = pytest.raises(IntegrityError, match=f"public_id of {table} is immutable")
    with refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET public_id = %s WHERE id = %s", [f"{prefix}_FORGED", record.pk])

    assert type(record).objects.get(pk=record.pk).public_id == record.public_id


def test_a_consent_event_cannot_be_changed_or_removed_in_raw_sql(business: Business) -> None:
    point = _contact(business).points.get()
    event = ConsentEvent.objects.create(
        business=business,
        contact_point=point,
        channel="sms",
        action="grant",
        basis="form_disclosure",
        actor="website",
        at=timezone.now(),
    )

    for sql in (
        "UPDATE crm_consentevent SET action = 'revoke' WHERE id = %s",
        "DELETE FROM crm_consentevent WHERE id = %s",
    ):
        refused = pytest.raises(DatabaseError, match="crm_consentevent is append-only")
        with refused, transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [event.pk])

    assert ConsentEvent.objects.get(pk=event.pk).action == "grant"


def test_an_unparseable_phone_may_be_kept_by_two_contacts(business: Business) -> None:
    for name in ("Al", "Bo"):
        contact = Contact.objects.create(business=business, first_name=name)
        ContactPoint.objects.create(business=business, contact=contact, kind="phone", value="call me", is_valid=False)
    assert ContactPoint.objects.filter(value="call me").count() == 2
