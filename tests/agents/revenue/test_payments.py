"""Payment Matching: our ids link directly; one exact match by contact,
amount and time links itself; anything else waits for a person, as an
exception with an owner; a person's link resolves it."""

from __future__ import annotations

from decimal import Decimal
from functools import partial

import pytest
from django.test import Client
from django.utils import timezone

from agents.capture.base import PaymentHints
from agents.capture.processing import event_process
from agents.orchestrator import orchestrate_pending
from agents.revenue.jobs import invoice_issue
from agents.revenue.payments import (
    EXCEPTION_KIND,
    PaymentError,
    payment_link,
    payment_manual_record,
    payment_receive,
    refund_add,
)
from crm.models import ExceptionItem, InboundEvent, Invoice, Payment, Receipt, Refund, Stage, Task
from tests.factories import lead_create
from tests.helpers.races import run_together
from tests.helpers.revenue import (
    charge_event,
    days_ago,
    deliver,
    held_lead,
    intent_event,
    invoice_event,
    sign,
)

pytestmark = pytest.mark.django_db


def receive(business, amount: str, *, key: str = "pi_t", **hints):
    return payment_receive(
        business,
        provider="stripe",
        external_id=key,
        amount=Decimal(amount),
        currency="USD",
        received_at=timezone.now(),
        hints=PaymentHints(**hints),
    ).payment


def issued(lead, amount: str, **kw):
    return invoice_issue(lead=lead, amount=Decimal(amount), currency="USD", actor="mia", **kw)


def test_metadata_with_our_invoice_id_links_payment_lead_job_and_invoice(business, manager):
    lead = held_lead(business, manager)
    from crm.services.records import job_record

    job = job_record(lead=lead, actor="mia")
    invoice = issued(lead, "300.00", job=job)
    payment = receive(business, "300.00", metadata={"invoice": invoice.public_id})
    assert (payment.match_status, payment.lead, payment.invoice, payment.job) == ("matched", lead, invoice, job)
    invoice.refresh_from_db()
    assert invoice.status == Invoice.Status.PAID
    assert Receipt.objects.filter(subject=payment.public_id, action="payment.matched").exists()
    assert Receipt.objects.filter(subject=invoice.public_id, action="invoice.paid").exists()
    assert not ExceptionItem.objects.exists()


def test_the_one_exact_match_by_contact_amount_and_time_links_itself(business, manager):
    lead = held_lead(business, manager, email="ana.lopez@example.com")
    invoice = issued(lead, "180.00")
    lead_create(business, first_name="Ben", phone="+13125550111", email="ben@example.com")  # another payer
    payment = receive(business, "180.00", emails=("Ana.Lopez@Example.com",))
    assert (payment.match_status, payment.lead, payment.invoice) == ("matched", lead, invoice)
    assert "contact, amount and time" in Receipt.objects.get(subject=payment.public_id, action="payment.matched").reason


def test_an_exact_match_by_phone_in_another_format(business, manager):
    lead = held_lead(business, manager, phone="+12125550147")
    invoice = issued(lead, "95.10")
    payment = receive(business, "95.10", phones=("(212) 555-0147",))
    assert (payment.match_status, payment.invoice) == ("matched", invoice)


def test_two_exact_matches_are_ambiguous_and_go_to_the_manager(business, manager):
    lead = held_lead(business, manager, email="twice@example.com")
    first, second = issued(lead, "200.00"), issued(lead, "200.00")
    payment = receive(business, "200.00", emails=("twice@example.com",))
    assert payment.match_status == "ambiguous" and payment.lead is None
    assert {c["invoice"] for c in payment.match_candidates} == {first.public_id, second.public_id}
    assert all(c["exact"] for c in payment.match_candidates)
    item = ExceptionItem.objects.get(kind=EXCEPTION_KIND, subject=payment.public_id)
    assert (item.status, item.owner) == ("open", manager)
    assert "2 exact matches" in item.detail


def test_an_amount_without_a_known_payer_is_only_a_candidate(business, manager):
    lead = held_lead(business, manager)
    invoice = issued(lead, "75.00")
    payment = receive(business, "75.00", emails=("stranger@example.com",))
    assert payment.match_status == "unmatched"
    [candidate] = payment.match_candidates
    assert (candidate["invoice"], candidate["reasons"], candidate["exact"]) == (
        invoice.public_id,
        ["amount", "time"],
        False,
    )
    assert ExceptionItem.objects.get(subject=payment.public_id).status == "open"


def test_a_known_payer_with_nothing_owed_is_a_candidate_not_a_link(business, manager):
    lead = held_lead(business, manager, email="deposit@example.com")
    payment = receive(business, "50.00", emails=("deposit@example.com",))
    assert payment.match_status == "unmatched" and payment.lead is None
    assert payment.contact == lead.contact  # the payer is known, what it pays for is not
    assert [c["lead"] for c in payment.match_candidates] == [lead.public_id]


def test_a_payment_nobody_explains_is_unmatched_without_candidates(business, manager):
    held_lead(business, manager)
    payment = receive(business, "999.99", emails=("nobody@example.com",))
    assert (payment.match_status, payment.match_candidates) == ("unmatched", [])
    item = ExceptionItem.objects.get(subject=payment.public_id)
    assert "no candidate" in item.detail and item.owner == manager


def test_an_invoice_issued_long_before_is_outside_the_window(business, manager):
    lead = held_lead(business, manager, email="old@example.com")
    issued(lead, "60.00", issued_at=days_ago(200))
    payment = receive(business, "60.00", emails=("old@example.com",))
    assert payment.match_status == "unmatched"
    assert [c["invoice"] for c in payment.match_candidates] == [None]


def test_ids_that_disagree_go_to_a_person(business, manager):
    one, two = held_lead(business, manager), held_lead(business, manager, phone="+13125550100")
    invoice = issued(one, "10.00")
    payment = receive(business, "10.00", metadata={"invoice": invoice.public_id, "lead": two.public_id})
    assert payment.match_status == "unmatched" and payment.lead is None
    assert "different leads" in ExceptionItem.objects.get(subject=payment.public_id).detail


def test_ids_of_another_business_link_nothing(business, other_business, manager):
    foreign = lead_create(other_business)
    payment = receive(business, "10.00", metadata={"lead_id": foreign.public_id})
    assert payment.match_status == "unmatched" and payment.lead is None


def test_a_persons_link_resolves_the_exception_and_settles_the_invoice(business, manager):
    lead = held_lead(business, manager, email="late@example.com")
    invoice = issued(lead, "120.00")
    payment = receive(business, "120.00", emails=("someone.else@example.com",))
    assert payment.match_status == "unmatched"
    payment_link(payment, lead=lead, invoice=invoice, actor="mia", reason="called the customer")
    payment.refresh_from_db()
    invoice.refresh_from_db()
    assert (payment.match_status, payment.lead, payment.invoice, invoice.status) == ("matched", lead, invoice, "paid")
    item = ExceptionItem.objects.get(subject=payment.public_id)
    assert (item.status, item.resolved_by) == ("resolved", "mia")
    receipt = Receipt.objects.get(subject=payment.public_id, action="payment.matched")
    assert (receipt.actor, receipt.before["match_status"], receipt.reason) == (
        "mia",
        "unmatched",
        "called the customer",
    )


def test_a_link_across_leads_or_currencies_is_refused(business, manager):
    lead, other = held_lead(business, manager), held_lead(business, manager, phone="+13125550101")
    invoice = issued(other, "10.00")
    payment = receive(business, "10.00")
    with pytest.raises(PaymentError, match="not an invoice of"):
        payment_link(payment, lead=lead, invoice=invoice, actor="mia")
    euro = invoice_issue(lead=lead, amount=Decimal("10.00"), currency="EUR", actor="mia")
    with pytest.raises(PaymentError, match="EUR"):
        payment_link(payment, lead=lead, invoice=euro, actor="mia")
    payment.refresh_from_db()
    assert payment.match_status == "unmatched"


def test_a_later_event_with_our_id_completes_a_link_the_first_could_not(
    business, manager, django_capture_on_commit_callbacks
):
    lead = held_lead(business, manager)
    invoice = issued(lead, "80.00")
    deliver([intent_event(event_id="evt_a", intent="pi_late", amount=8000)], django_capture_on_commit_callbacks)
    payment = Payment.objects.get()
    assert payment.match_status == "unmatched"
    deliver(
        [
            invoice_event(
                event_id="evt_b",
                invoice="in_9",
                amount=8000,
                intent="pi_late",
                metadata={"leadops_invoice": invoice.public_id},
            )
        ],
        django_capture_on_commit_callbacks,
    )
    payment.refresh_from_db()
    assert (payment.match_status, payment.invoice) == ("matched", invoice)
    assert ExceptionItem.objects.get(subject=payment.public_id).status == "resolved"


def test_manual_payment_is_money_with_currency_and_settles_the_invoice(business, manager):
    lead = held_lead(business, manager)
    invoice = issued(lead, "250.00")
    first = payment_manual_record(
        lead=lead,
        amount=Decimal("100.00"),
        currency="usd",
        received_at=timezone.now(),
        actor="mia",
        invoice=invoice,
        reference="check 1001",
    )
    invoice.refresh_from_db()
    assert (first.amount, first.currency, first.provider, first.external_id) == (
        Decimal("100.00"),
        "USD",
        "manual",
        "check 1001",
    )
    assert invoice.status == "issued"
    payment_manual_record(
        lead=lead, amount=Decimal("150.00"), currency="USD", received_at=timezone.now(), actor="mia", invoice=invoice
    )
    invoice.refresh_from_db()
    assert invoice.status == "paid"
    with pytest.raises(PaymentError, match="money must be a Decimal"):
        payment_manual_record(lead=lead, amount=1.5, currency="USD", received_at=timezone.now(), actor="mia")  # type: ignore[arg-type]


def test_a_refund_never_exceeds_what_is_left_and_reopens_the_invoice(business, manager):
    lead = held_lead(business, manager)
    invoice = issued(lead, "100.00")
    payment = payment_manual_record(
        lead=lead, amount=Decimal("100.00"), currency="USD", received_at=timezone.now(), actor="mia", invoice=invoice
    )
    refund_add(payment, amount=Decimal("30.00"), actor="mia", reason="scratched door")
    invoice.refresh_from_db()
    assert invoice.status == "issued"
    with pytest.raises(PaymentError, match=r"only 70\.00 USD"):
        refund_add(payment, amount=Decimal("70.01"), actor="mia")
    refund_add(payment, amount=Decimal("70.00"), actor="mia")
    assert sum(r.amount for r in Refund.objects.filter(payment=payment)) == payment.amount
    assert Receipt.objects.filter(subject=invoice.public_id, action="invoice.reopened").count() == 1


def test_a_matched_payment_wins_the_lead_and_closes_the_collection_task(
    business, manager, django_capture_on_commit_callbacks
):
    lead = held_lead(business, manager)
    invoice = issued(lead, "450.00")
    task = Task.objects.get(lead=lead, kind="payment")
    assert task.status == "open" and task.owner == manager
    deliver(
        [intent_event(event_id="evt_w", intent="pi_w", amount=45000, metadata={"invoice_id": invoice.public_id})],
        django_capture_on_commit_callbacks,
    )
    lead.refresh_from_db()
    task.refresh_from_db()
    assert lead.stage == Stage.WON
    assert (task.status, task.completed_by) == ("done", "agent:payment_matching")
    assert Receipt.objects.filter(lead=lead, action="orchestrator.step", after__event="payment").exists()


def test_a_payment_on_a_lead_that_cannot_be_won_yet_stops_for_a_person(business, manager):
    lead = lead_create(business)  # still new: nothing says the sale happened
    payment_manual_record(lead=lead, amount=Decimal("40.00"), currency="USD", received_at=timezone.now(), actor="mia")
    orchestrate_pending()
    lead.refresh_from_db()
    assert lead.stage == Stage.NEW
    task = Task.objects.get(lead=lead, kind="exception")
    assert "set the lead's outcome" in task.title and task.owner == manager


def test_a_whole_refund_asks_a_person_to_review_the_outcome(business, manager):
    lead = held_lead(business, manager)
    payment = payment_manual_record(
        lead=lead, amount=Decimal("40.00"), currency="USD", received_at=timezone.now(), actor="mia"
    )
    orchestrate_pending()
    refund_add(payment, amount=Decimal("15.00"), actor="mia")
    orchestrate_pending()
    assert not Task.objects.filter(lead=lead, kind="exception").exists()
    refund_add(payment, amount=Decimal("25.00"), actor="mia")
    orchestrate_pending()
    assert "refunded in full" in Task.objects.get(lead=lead, kind="exception").title


# --- real threads on PostgreSQL -----------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_racing_events_for_one_payment_make_one_payment_and_one_refund(business, manager):
    import json

    lead = held_lead(business, manager)
    meta = {"lead_id": lead.public_id}
    events = [
        intent_event(event_id="evt_r1", intent="pi_race", amount=50000, metadata=meta, charge="ch_race"),
        charge_event(event_id="evt_r2", charge="ch_race", intent="pi_race", amount=50000),
        charge_event(
            event_id="evt_r3", charge="ch_race", intent="pi_race", amount=50000, refunded=20000, kind="charge.refunded"
        ),
        invoice_event(event_id="evt_r4", invoice="in_race", amount=50000, intent="pi_race"),
    ]
    bodies = [json.dumps(e).encode() for e in events]

    def post(body):
        return (
            Client()
            .post(
                "/hooks/stripe/", data=body, content_type="application/json", headers={"Stripe-Signature": sign(body)}
            )
            .status_code
        )

    # Each delivered twice at once, then all four processed at once by "workers".
    assert run_together([partial(post, b) for b in bodies for _ in range(2)]) == [200] * 8
    ids = list(InboundEvent.objects.order_by("pk").values_list("pk", flat=True))
    assert len(ids) == 4
    assert run_together([partial(event_process, pk) for pk in ids]) == ["processed"] * 4
    payment = Payment.objects.get()
    assert (payment.amount, payment.lead_id, payment.match_status) == (Decimal("500.00"), lead.pk, "matched")
    assert [r.amount for r in Refund.objects.all()] == [Decimal("200.00")]
