"""A consent grant from a web form never overrides a STOP from the handset."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

import pytest
from django.test import Client
from twilio.request_validator import RequestValidator

from agents.capture.processing import event_process
from agents.outbound.gate import message_send
from crm.models import ConsentEvent, ConsentState, InboundEvent, Lead, Receipt, Source
from crm.services.consent import consent_record

pytestmark = pytest.mark.django_db


def process_latest() -> str:
    return event_process(InboundEvent.objects.order_by("-pk").first().pk)


TOKEN = "intake-token"
BASE = "https://backoffice.example.com"
LINE = "+13125550100"
PERSON = "+12125550147"
NOON_NY = datetime(2026, 6, 2, 16, 0, tzinfo=UTC)
_sids = iter(range(10_000))


@pytest.fixture(autouse=True)
def sources(settings, business):
    settings.TWILIO_AUTH_TOKEN = TOKEN
    settings.PUBLIC_BASE_URL = BASE
    Source.objects.create(business=business, key="line", provider="twilio", config={"phone_number": LINE})
    Source.objects.create(business=business, key="quote", provider="hosted_form")


def handset(body: str) -> None:
    params = {"MessageSid": f"SM{next(_sids):032d}", "From": PERSON, "To": LINE, "Body": body}
    signature = RequestValidator(TOKEN).compute_signature(BASE + "/hooks/twilio/sms/", params)
    response = Client().post(
        "/hooks/twilio/sms/",
        urlencode(params),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_TWILIO_SIGNATURE=signature,
    )
    assert response.status_code == 200
    assert event_process(InboundEvent.objects.order_by("-pk").first().pk) == "processed"


def form_grant(nonce: str) -> None:
    data = {"first_name": "Pat", "phone": PERSON, "consent": "yes", "nonce": nonce}
    assert Client().post("/f/quote/", data).status_code == 200
    assert process_latest() == "processed"


def sms_state() -> ConsentState:
    return ConsentState.objects.select_related("last_event").get(contact_point__value=PERSON, channel="sms")


def automated_text(key: str):
    lead = Lead.objects.get()
    return message_send(
        lead=lead, channel="sms", body="Hi again", actor="test", idempotency_key=key, automated=True, now=NOON_NY
    )


def test_stop_then_a_form_regrant_stays_revoked_and_sends_no_automated_text():
    form_grant("first")
    assert sms_state().status == "granted"
    handset("STOP")
    form_grant("again")  # anybody who knows the number can tick the box
    state = sms_state()
    assert state.status == "revoked" and state.last_event.basis == "keyword"
    regrant = (
        ConsentEvent.objects.filter(action="grant", basis="form_disclosure", channel="sms").order_by("-pk").first()
    )
    assert regrant is not None and "only an opt-in keyword" in regrant.evidence["state_unchanged"]
    assert Receipt.objects.filter(subject=regrant.public_id, action="consent.grant_ignored").exists()
    message = automated_text("after-regrant")
    assert (message.status, message.block_reason) == ("blocked", "revoked")


def test_start_from_the_handset_reopens_texts_after_stop():
    form_grant("first")
    handset("STOP")
    form_grant("again")
    handset("START")
    assert sms_state().status == "granted" and sms_state().last_event.basis == "keyword"
    assert automated_text("after-start").status == "dry_run"


def test_a_carrier_reported_opt_out_also_outlasts_a_form_grant():
    form_grant("first")
    point = ConsentState.objects.get(contact_point__value=PERSON, channel="sms").contact_point
    consent_record(contact_point=point, channel="sms", granted=False, basis="provider_error_21610", actor="t")
    form_grant("again")
    assert sms_state().status == "revoked"


def test_a_form_grant_after_a_revocation_by_staff_counts():
    form_grant("first")
    point = ConsentState.objects.get(contact_point__value=PERSON, channel="sms").contact_point
    consent_record(contact_point=point, channel="sms", granted=False, basis="manual", actor="t")
    form_grant("again")
    assert sms_state().status == "granted", "only the handset's own opt-out needs the handset to lift it"
