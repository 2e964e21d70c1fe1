"""The money records in the API and the admin: their own fields and times,
money as a string decimal with its currency, scoped like their lead, and a
person's forms that call the revenue services."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from agents.capture.base import PaymentHints
from agents.revenue.jobs import invoice_issue
from agents.revenue.payments import payment_manual_record, payment_receive, refund_add
from crm.models import ExceptionItem, Job, Payment, Receipt, Refund, Role
from crm.services import lead_sync
from crm.services.records import appointment_record, estimate_record, job_record
from tests.factories import lead_create, member_create
from tests.helpers.revenue import held_lead

pytestmark = pytest.mark.django_db


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def money_trail(lead, *, amount: str = "300.00"):
    now = timezone.now()
    appointment_record(lead=lead, starts_at=now, ends_at=now + timedelta(hours=1), actor="t")
    estimate_record(lead=lead, amount=Decimal(amount), currency="USD", actor="t", status="sent", sent_at=now)
    job = job_record(lead=lead, actor="t")
    invoice = invoice_issue(lead=lead, amount=Decimal(amount), currency="USD", actor="t", job=job)
    payment = payment_manual_record(
        lead=lead, amount=Decimal(amount), currency="USD", received_at=now, actor="t", invoice=invoice
    )
    refund_add(payment, amount=Decimal("12.34"), actor="t", reason="discount")
    return payment


def test_each_money_record_lists_with_its_contract_fields(business, manager):
    lead = held_lead(business, manager)
    payment = money_trail(lead)
    client = api(manager.user)
    expectations = {
        "appointments": {"id", "lead", "status", "starts_at", "ends_at"},
        "estimates": {"id", "lead", "status", "amount", "currency", "sent_at"},
        "jobs": {"id", "lead", "status", "completed_at"},
        "invoices": {"id", "lead", "status", "amount", "currency", "issued_at", "due_at"},
        "payments": {"id", "lead", "amount", "currency", "provider", "external_id", "match_status", "received_at"},
        "refunds": {"id", "lead", "payment", "amount", "currency", "refunded_at"},
    }
    for path, fields in expectations.items():
        response = client.get(f"/api/v1/{path}/", {"lead": lead.public_id})
        assert response.status_code == 200, path
        [row] = response.json()["results"]
        assert fields <= set(row), path
        assert row["lead"] == lead.public_id
    paid = client.get(f"/api/v1/payments/{payment.public_id}/").json()
    assert (paid["amount"], paid["currency"], paid["match_status"], paid["provider"]) == (
        "300.00",
        "USD",
        "matched",
        "manual",
    )
    refund = client.get("/api/v1/refunds/").json()["results"][0]
    assert (refund["amount"], refund["payment"]) == ("12.34", payment.public_id)


def test_money_records_follow_their_leads_visibility(business, other_business, manager):
    sam = member_create(business, Role.SETTER, username="sam")
    mine = lead_create(business)
    lead_sync.lead_assign(mine, sam, actor="t", reason="t")
    theirs = lead_create(business, phone="+13125550144")
    money_trail(mine)
    money_trail(theirs)
    foreign = lead_create(other_business)
    money_trail(foreign)
    unmatched = payment_receive(
        business,
        provider="stripe",
        external_id="pi_nobody",
        amount=Decimal("5.00"),
        currency="USD",
        received_at=timezone.now(),
        hints=PaymentHints(),
    ).payment
    setter_sees = {p["id"] for p in api(sam.user).get("/api/v1/payments/").json()["results"]}
    manager_sees = {p["id"] for p in api(manager.user).get("/api/v1/payments/").json()["results"]}
    assert setter_sees == {mine.payments.get().public_id}
    assert manager_sees == {mine.payments.get().public_id, theirs.payments.get().public_id, unmatched.public_id}
    assert api(sam.user).get(f"/api/v1/refunds/?lead={theirs.public_id}").json()["count"] == 0
    assert api(manager.user).get(f"/api/v1/invoices/{foreign.invoices.get().public_id}/").status_code == 404
    assert APIClient().get("/api/v1/payments/").status_code in (401, 403)


def test_a_page_of_payments_costs_the_same_queries_for_few_and_many(business, manager):
    client = api(manager.user)

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/api/v1/payments/").status_code == 200
            assert client.get("/api/v1/refunds/").status_code == 200
        return len(ctx.captured_queries)

    money_trail(held_lead(business, manager))
    count()  # the user's scope is read once, then kept for the user
    few = count()
    for i in range(6):
        money_trail(held_lead(business, manager, phone=f"+1312555{100 + i:04d}"))
    assert count() == few


def test_a_bad_lead_filter_value_is_simply_no_rows(business, manager):
    response = api(manager.user).get("/api/v1/jobs/", {"lead": "lead_nothing"})
    assert response.status_code == 200 and response.json()["count"] == 0


# ---------------------------------------------------------------------- admin


def test_a_manager_records_a_manual_payment_in_the_admin(business, manager):
    lead = held_lead(business, manager)
    invoice = invoice_issue(lead=lead, amount=Decimal("210.00"), currency="USD", actor="t")
    client = login(manager.user)
    assert client.get("/admin/crm/payment/add/").status_code == 200
    response = client.post(
        "/admin/crm/payment/add/",
        {
            "lead": lead.public_id,
            "amount": "210.00",
            "currency": "USD",
            "received_at": "2026-11-01 15:00",
            "invoice": invoice.public_id,
            "reference": "check 88",
        },
    )
    payment = Payment.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/{payment.pk}/change/")
    assert (payment.amount, payment.invoice, payment.external_id, payment.match_status) == (
        Decimal("210.00"),
        invoice,
        "check 88",
        "matched",
    )
    invoice.refresh_from_db()
    assert invoice.status == "paid"
    assert Receipt.objects.get(subject=payment.public_id, action="payment.recorded").actor == "mia"


def test_the_manual_payment_form_refuses_a_lead_the_user_cannot_see(business, other_business, manager):
    foreign = lead_create(other_business)
    response = login(manager.user).post(
        "/admin/crm/payment/add/",
        {"lead": foreign.public_id, "amount": "1.00", "currency": "USD", "received_at": "2026-11-01 15:00"},
    )
    assert response.status_code == 200 and "that you may see" in response.content.decode()
    assert not Payment.objects.exists()


def test_a_setter_may_not_record_payments(business):
    sam = member_create(business, Role.SETTER, username="sam")
    assert login(sam.user).get("/admin/crm/payment/add/").status_code == 403


def test_a_manager_links_an_unmatched_payment_from_its_candidates(business, manager):
    lead = held_lead(business, manager, email="pat@example.com")
    payment = payment_receive(
        business,
        provider="stripe",
        external_id="pi_dep",
        amount=Decimal("50.00"),
        currency="USD",
        received_at=timezone.now(),
        hints=PaymentHints(emails=("pat@example.com",)),
    ).payment
    client = login(manager.user)
    page = client.get(reverse("admin:crm_payment_change", args=[payment.pk])).content.decode()
    assert 'id="match-candidates"' in page and lead.public_id in page
    client.post(reverse("admin:crm_payment_link", args=[payment.pk]), {"lead": lead.public_id, "reason": "deposit"})
    payment.refresh_from_db()
    assert (payment.match_status, payment.lead) == ("matched", lead)
    assert ExceptionItem.objects.get(subject=payment.public_id).status == "resolved"


def test_a_manager_records_a_refund_on_the_payment_page(business, manager):
    lead = held_lead(business, manager)
    payment = payment_manual_record(
        lead=lead, amount=Decimal("80.00"), currency="USD", received_at=timezone.now(), actor="t"
    )
    client = login(manager.user)
    client.post(reverse("admin:crm_payment_refund", args=[payment.pk]), {"amount": "90.00", "reason": "too much"})
    assert not Refund.objects.exists()
    client.post(reverse("admin:crm_payment_refund", args=[payment.pk]), {"amount": "20.00", "reason": "goodwill"})
    assert [r.amount for r in Refund.objects.all()] == [Decimal("20.00")]


def test_the_admin_action_completes_jobs(business, manager):
    lead = held_lead(business, manager)
    job = job_record(lead=lead, actor="t")
    login(manager.user).post("/admin/crm/job/", {"action": "complete", "_selected_action": [job.pk]})
    job.refresh_from_db()
    assert job.status == Job.Status.COMPLETED


def test_a_manager_issues_an_invoice_in_the_admin(business, manager):
    lead = held_lead(business, manager)
    client = login(manager.user)
    response = client.post("/admin/crm/invoice/add/", {"lead": lead.public_id, "amount": "99.90", "currency": "USD"})
    invoice = lead.invoices.get()
    assert response.status_code == 302 and (invoice.status, invoice.amount) == ("issued", Decimal("99.90"))


@pytest.mark.parametrize("model", ["job", "invoice", "payment", "refund"])
def test_every_money_list_opens_for_a_manager(business, manager, model):
    money_trail(held_lead(business, manager))
    assert login(manager.user).get(f"/admin/crm/{model}/").status_code == 200
