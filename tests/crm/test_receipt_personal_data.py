"""Receipts commit to personal data without holding it; the database refuses
a TRUNCATE of the chain; the consent ledger allows only erasing evidence."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.db import ProgrammingError, connection, transaction

from crm.models import Business, Receipt, ReceiptPersonalData
from crm.services.consent import consent_record
from crm.services.receipts import receipt_personal_data_erase, receipt_write, receipts_verify
from tests.factories import lead_create

pytestmark = pytest.mark.django_db


def _stored(receipt: Receipt) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reason, before::text, after::text FROM crm_receipt WHERE id = %s", [receipt.pk])
        return json.dumps(cursor.fetchone())


def test_personal_values_are_kept_out_of_the_hashed_row(business: Business) -> None:
    lead = lead_create(business, first_name="Rosa", last_name="Diaz", phone="+12125550147", email="rosa@example.com")
    created = Receipt.objects.get(subject=lead.contact.public_id, action="contact.created")

    stored = _stored(created)

    assert "Rosa" not in stored and "+12125550147" not in stored and "rosa@example.com" not in stored
    assert "[personal:" in stored
    values = ReceiptPersonalData.objects.get(receipt=created).values
    assert set(map(json.dumps, values.values())) >= {'"Rosa Diaz"', '["+12125550147"]', '["rosa@example.com"]'}


def test_a_receipt_read_through_the_orm_shows_its_personal_values(business: Business) -> None:
    lead = lead_create(business, first_name="Rosa", last_name="Diaz", phone="+12125550147")

    created = Receipt.objects.get(subject=lead.contact.public_id, action="contact.created")

    assert created.after == {"name": "Rosa Diaz", "phones": ["+12125550147"], "emails": []}


def test_a_reason_quoting_a_phone_number_or_a_moved_name_is_kept_out_of_the_row(business: Business) -> None:
    by_number = receipt_write(business=business, actor="t", action="t.noted", subject="x", reason="texted +12125550147")
    by_name = receipt_write(
        business=business,
        actor="t",
        action="t.noted",
        subject="y",
        reason="Rosa Diaz called",
        after={"name": "Rosa Diaz"},
    )
    plain = receipt_write(
        business=business, actor="t", action="t.noted", subject="z", reason="no first contact by 10:00"
    )

    assert "+12125550147" not in _stored(by_number) and "Rosa" not in _stored(by_name)
    assert Receipt.objects.get(pk=by_number.pk).reason == "texted +12125550147"
    assert plain.reason == "no first contact by 10:00"
    assert not ReceiptPersonalData.objects.filter(receipt=plain).exists()


def test_a_reason_naming_the_leads_person_is_kept_out_of_the_row(business: Business) -> None:
    lead = lead_create(business, first_name="Rosa", last_name="Diaz", phone="+12125550147")
    lead.contact  # noqa: B018 - loaded, as the callers that write such reasons have it

    receipt = receipt_write(
        business=business, lead=lead, actor="t", action="t.noted", subject="x", reason="Diaz called"
    )

    assert "Diaz" not in _stored(receipt)
    assert Receipt.objects.get(pk=receipt.pk).reason == "Diaz called"


def test_erasing_personal_data_leaves_the_chain_verifying_and_shows_erased(business: Business) -> None:
    lead = lead_create(business, first_name="Rosa", last_name="Diaz", phone="+12125550147")
    created = Receipt.objects.get(subject=lead.contact.public_id, action="contact.created")

    assert receipt_personal_data_erase([created.pk]) == 1

    assert receipts_verify() is None
    assert Receipt.objects.get(pk=created.pk).after == {"name": "[erased]", "phones": "[erased]", "emails": []}


def test_a_personal_value_altered_in_its_table_breaks_verification(business: Business) -> None:
    lead = lead_create(business, first_name="Rosa", last_name="Diaz", phone="+12125550147")
    created = Receipt.objects.get(subject=lead.contact.public_id, action="contact.created")
    personal = ReceiptPersonalData.objects.get(receipt=created)
    personal.values = {
        digest: ("Someone Else" if value == "Rosa Diaz" else value) for digest, value in personal.values.items()
    }
    personal.save()

    broken = receipts_verify(business)

    assert broken is not None and broken.receipt == created.public_id
    assert "a value was altered" in broken.problem


def test_truncate_of_the_receipts_is_refused_by_the_trigger(business: Business) -> None:
    receipt_write(business=business, actor="t", action="t.noted", subject="x")
    with connection.cursor() as cursor:
        # TRUNCATE waits for no deferred foreign-key check of this transaction.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")

    refusal = pytest.raises(ProgrammingError, match="crm_receipt is append-only: TRUNCATE refused")
    with refusal as refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("TRUNCATE crm_receipt CASCADE")

    assert isinstance(refused.value.__cause__, psycopg.errors.InsufficientPrivilege)
    assert Receipt.objects.filter(business=business).count() == 1


def test_the_consent_ledger_refuses_any_change_but_erasing_evidence(business: Business) -> None:
    point = lead_create(business).contact.points.get()
    event = consent_record(
        contact_point=point, channel="sms", granted=True, basis="manual", actor="t", evidence={"ip": "192.0.2.4"}
    )

    for sql in (
        "UPDATE crm_consentevent SET action = 'revoke' WHERE id = %s",
        'UPDATE crm_consentevent SET evidence = \'{"ip": "5.6.7.8"}\' WHERE id = %s',
        "UPDATE crm_consentevent SET evidence = '{\"erased\": true}', basis = 'keyword' WHERE id = %s",
        "DELETE FROM crm_consentevent WHERE id = %s",
    ):
        with pytest.raises(ProgrammingError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [event.pk])
    with connection.cursor() as cursor:
        cursor.execute("UPDATE crm_consentevent SET evidence = '{\"erased\": true}' WHERE id = %s", [event.pk])

    event.refresh_from_db()
    assert (event.action, event.evidence) == ("grant", {"erased": True})
