"""Stripe webhooks: Stripe's signature, raw first, once per event, and the
same money whatever order the events arrive in."""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest
import stripe
from django.utils import timezone

from agents.capture.processing import event_replay
from agents.capture.providers.stripe import money_from_minor, stripe_signature
from crm.models import InboundEvent, Payment, Refund, RejectedDelivery, Source
from crm.services.inbound_handlers import MalformedPayload
from tests.factories import BusinessFactory, lead_create
from tests.helpers.capture import run_queued_events
from tests.helpers.revenue import (
    SAMPLES,
    SECRET,
    VECTORS,
    charge_event,
    deliver,
    intent_event,
    invoice_event,
    post,
    sign,
)

pytestmark = pytest.mark.django_db


def test_our_signer_and_the_stripe_package_reproduce_the_published_vector():
    body = (SAMPLES / "stripe_payment_intent_succeeded.json").read_bytes()
    published = VECTORS["files"]["stripe_payment_intent_succeeded.json"]["Stripe-Signature"]
    timestamp = int(published.split(",")[0].removeprefix("t="))
    assert sign(body, timestamp=timestamp) == published
    assert stripe_signature(body, SECRET, timestamp) == published


def test_the_published_sample_is_refused_as_stale_and_counted(business):
    # Signed correctly, but months ago: Stripe's 300-second tolerance refuses it.
    body = (SAMPLES / "stripe_payment_intent_succeeded.json").read_bytes()
    published = VECTORS["files"]["stripe_payment_intent_succeeded.json"]["Stripe-Signature"]
    response = post(body, signature=published)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_signature"
    assert "tolerance" in response.json()["detail"]
    assert not InboundEvent.objects.exists()
    assert RejectedDelivery.objects.get(provider="stripe").count == 1


def test_the_same_body_signed_now_is_stored_and_processed_once(business, django_capture_on_commit_callbacks):
    body = (SAMPLES / "stripe_payment_intent_succeeded.json").read_bytes()
    with django_capture_on_commit_callbacks(execute=True):
        first = post(body)
        again = post(body)
    assert first.status_code == again.status_code == 200
    assert (first.json()["duplicate"], again.json()["duplicate"]) == (False, True)
    assert run_queued_events() == ["processed"]
    event = InboundEvent.objects.get()
    assert (event.provider, event.external_id, event.kind) == (
        "stripe",
        "evt_3TestEventPISucceeded01",
        "payment_intent.succeeded",
    )
    assert bytes(event.body) == body and event.business == business
    payment = Payment.objects.get()
    assert (payment.amount, payment.currency, payment.external_id) == (
        Decimal("450.00"),
        "USD",
        "pi_3TestPaymentIntent0001",
    )
    assert payment.inbound_event == event


@pytest.mark.parametrize(
    "header",
    [
        "",
        "t=123",
        "garbage",
        lambda body: sign(body, secret="whsec_not_ours"),
        lambda body: sign(body, timestamp=int(time.time()) - 301),
        # Stripe's own check looks only at the past: a header dated an hour
        # ahead would stay replayable for the hour and five minutes after.
        lambda body: sign(body, timestamp=int(time.time()) + 3600),
    ],
    ids=["missing", "no-v1", "unparseable", "wrong-secret", "stale", "from-the-future"],
)
def test_a_bad_or_stale_signature_is_a_400_and_nothing_is_stored(business, header):
    body = json.dumps(intent_event(event_id="evt_bad", intent="pi_bad", amount=100)).encode()
    response = post(body, signature=header(body) if callable(header) else header)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_signature"
    assert not InboundEvent.objects.exists()


def test_a_body_changed_after_signing_is_refused(business):
    body = json.dumps(intent_event(event_id="evt_x", intent="pi_x", amount=100)).encode()
    header = sign(body)
    assert post(body.replace(b"100", b"900"), signature=header).status_code == 400


def test_without_a_secret_nothing_can_be_verified_and_stripe_is_told_to_retry(business, settings):
    settings.STRIPE_WEBHOOK_SECRET = ""
    response = post(intent_event(event_id="evt_y", intent="pi_y", amount=100))
    assert response.status_code == 503
    assert response.json()["error"] == "not_configured"


def test_a_signed_body_that_is_no_event_is_stored_failed_for_inspection(business):
    response = post(b'{"object": "event", "type": "payment_intent.succeeded"}')
    assert response.status_code == 400
    assert response.json()["error"] == "malformed_payload"
    event = InboundEvent.objects.get()
    assert event.status == "failed" and "no id" in event.error


def test_an_event_type_we_do_not_handle_is_kept_raw_and_ignored(business, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post({"id": "evt_cust", "object": "event", "type": "customer.created", "data": {"object": {}}})
    assert response.status_code == 200
    assert InboundEvent.objects.get().status == "ignored"
    assert run_queued_events() == []


def test_minor_units_become_decimal_money_with_the_currencys_own_exponent():
    assert money_from_minor(45000, "usd") == (Decimal("450.00"), "USD")
    assert money_from_minor(1, "eur") == (Decimal("0.01"), "EUR")
    assert money_from_minor(5000, "jpy") == (Decimal("5000.00"), "JPY")
    assert money_from_minor(12340, "kwd") == (Decimal("12.34"), "KWD")
    for bad in [(12345, "kwd"), (-1, "usd"), (1.5, "usd"), ("100", "usd"), (100, "dollars")]:
        with pytest.raises(MalformedPayload):
            money_from_minor(*bad)


def test_a_payment_intent_and_its_charge_and_invoice_are_one_payment(business, django_capture_on_commit_callbacks):
    lead = lead_create(business, email="jo@example.com")
    meta = {"lead_id": lead.public_id}
    codes = deliver(
        [
            intent_event(event_id="evt_1", intent="pi_1", amount=12550, metadata=meta, charge="ch_1"),
            charge_event(event_id="evt_2", charge="ch_1", intent="pi_1", amount=12550),
            invoice_event(event_id="evt_3", invoice="in_1", amount=12550, intent="pi_1"),
        ],
        django_capture_on_commit_callbacks,
    )
    assert codes == [200, 200, 200]
    payment = Payment.objects.get()
    assert (payment.amount, payment.lead, payment.match_status) == (Decimal("125.50"), lead, "matched")
    assert InboundEvent.objects.filter(status="processed").count() == 3


def test_partial_then_whole_refunds_are_netted_once_each(business, django_capture_on_commit_callbacks):
    lead = lead_create(business)
    meta = {"lead_id": lead.public_id}
    deliver(
        [intent_event(event_id="evt_p", intent="pi_r", amount=45000, metadata=meta, charge="ch_r")],
        django_capture_on_commit_callbacks,
    )
    partial = charge_event(
        event_id="evt_r1", charge="ch_r", intent="pi_r", amount=45000, refunded=10000, kind="charge.refunded"
    )
    whole = charge_event(
        event_id="evt_r2", charge="ch_r", intent="pi_r", amount=45000, refunded=45000, kind="charge.refunded"
    )
    deliver([partial, partial], django_capture_on_commit_callbacks)
    payment = Payment.objects.get()
    assert [r.amount for r in payment.refunds.all()] == [Decimal("100.00")]
    deliver([whole], django_capture_on_commit_callbacks)
    assert [r.amount for r in payment.refunds.order_by("pk")] == [Decimal("100.00"), Decimal("350.00")]
    assert all(r.currency == "USD" for r in payment.refunds.all())
    assert sum(r.amount for r in payment.refunds.all()) == payment.amount


def test_a_refund_delivered_before_its_payment_ends_the_same(business, django_capture_on_commit_callbacks):
    lead = lead_create(business)
    meta = {"lead_id": lead.public_id}
    refund = charge_event(
        event_id="evt_o2",
        charge="ch_o",
        intent="pi_o",
        amount=30000,
        refunded=5000,
        kind="charge.refunded",
        metadata=meta,
    )
    payment_first = intent_event(event_id="evt_o1", intent="pi_o", amount=30000, metadata=meta, charge="ch_o")
    assert deliver([refund], django_capture_on_commit_callbacks) == [200]
    payment = Payment.objects.get()
    assert (payment.amount, payment.lead, payment.refunds.get().amount) == (Decimal("300.00"), lead, Decimal("50.00"))
    deliver([payment_first], django_capture_on_commit_callbacks)
    assert Payment.objects.count() == 1 and Refund.objects.count() == 1
    assert InboundEvent.objects.filter(status="processed").count() == 2


def test_an_older_refund_total_arriving_late_adds_nothing(business, django_capture_on_commit_callbacks):
    lead = lead_create(business)
    meta = {"lead_id": lead.public_id}
    newer = charge_event(
        event_id="evt_n",
        charge="ch_n",
        intent="pi_n",
        amount=20000,
        refunded=15000,
        kind="charge.refunded",
        metadata=meta,
    )
    older = charge_event(
        event_id="evt_m",
        charge="ch_n",
        intent="pi_n",
        amount=20000,
        refunded=5000,
        kind="charge.refunded",
        metadata=meta,
    )
    deliver([newer, older], django_capture_on_commit_callbacks)
    assert [r.amount for r in Refund.objects.all()] == [Decimal("150.00")]
    assert InboundEvent.objects.filter(status="processed").count() == 2


def test_an_uncaptured_charge_records_no_money(business, django_capture_on_commit_callbacks):
    event = charge_event(event_id="evt_auth", charge="ch_auth", intent="pi_auth", amount=0)
    assert deliver([event], django_capture_on_commit_callbacks) == [200]
    assert not Payment.objects.exists()
    assert InboundEvent.objects.get().status == "ignored"


def test_with_several_businesses_the_payment_waits_until_someone_says_whose_it_is(
    business, django_capture_on_commit_callbacks
):
    BusinessFactory.create(slug="second")
    deliver([intent_event(event_id="evt_who", intent="pi_who", amount=9900)], django_capture_on_commit_callbacks)
    event = InboundEvent.objects.get()
    assert event.status == "failed" and "which business" in event.error
    assert not Payment.objects.exists()
    # The operator connects the Stripe account to a business; the replay records it.
    Source.objects.create(business=business, key="stripe", provider="stripe")
    assert event_replay(event) == "processed"
    payment = Payment.objects.get()
    assert payment.business == business and payment.match_status == "unmatched"
    event.refresh_from_db()
    assert event.business == business


def test_the_metadata_names_the_business_among_several(business, django_capture_on_commit_callbacks):
    other = BusinessFactory.create(slug="second")
    deliver(
        [intent_event(event_id="evt_b", intent="pi_b", amount=100, metadata={"business": "second"})],
        django_capture_on_commit_callbacks,
    )
    assert Payment.objects.get().business == other


def test_stripes_own_header_generator_is_accepted(business, django_capture_on_commit_callbacks):
    body = json.dumps(intent_event(event_id="evt_lib", intent="pi_lib", amount=2500)).encode()
    header = stripe.WebhookSignature.generate_signature_header(body.decode(), SECRET, int(timezone.now().timestamp()))
    with django_capture_on_commit_callbacks(execute=True):
        assert post(body, signature=header).status_code == 200
    assert run_queued_events() == ["processed"]
