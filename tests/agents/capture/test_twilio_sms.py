"""Inbound texts through Twilio: new leads, replies on open leads, duplicates."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.http import QueryDict
from django.test import Client
from twilio.request_validator import RequestValidator

from crm.models import Business, InboundEvent, Lead, Message, Receipt, RejectedDelivery, Source
from tests.factories import lead_create
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

SAMPLES = Path(__file__).parent / "samples"
BASE_URL = "https://backoffice.example.com"
TOKEN = "twilio-test-token-0123456789"
SMS = "/hooks/twilio/sms/"
LINE = "+13125550100"
SENDER = "+12125550147"


@pytest.fixture(autouse=True)
def twilio_settings(settings):
    settings.PUBLIC_BASE_URL = BASE_URL
    settings.TWILIO_AUTH_TOKEN = TOKEN


@pytest.fixture
def twilio_source(business: Business) -> Source:
    return Source.objects.create(
        business=business,
        key="main-line",
        provider="twilio",
        config={"phone_number": LINE, "forward_to": "+13125550199"},
    )


def sample(name: str) -> dict[str, str]:
    lines = (SAMPLES / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line)


def post(path: str, params: dict[str, str], *, token: str = TOKEN, signed_url: str | None = None, **extra):
    """POST the form body Twilio would send, signed the way Twilio signs it."""
    signature = RequestValidator(token).compute_signature(signed_url or BASE_URL + path, params)
    return Client().post(
        path,
        data=urlencode(params),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_TWILIO_SIGNATURE=signature,
        **extra,
    )


def text(body: str, *, sid: str = "SM" + "1" * 32, sender: str = SENDER, to: str = LINE) -> dict[str, str]:
    return {
        "AccountSid": "AC00000000000000000000000000000001",
        "ApiVersion": "2010-04-01",
        "MessageSid": sid,
        "SmsSid": sid,
        "SmsMessageSid": sid,
        "From": sender,
        "To": to,
        "Body": body,
        "NumMedia": "0",
        "NumSegments": "1",
        "SmsStatus": "received",
        "FromCity": "NEW YORK",
    }


def twiml_of(response) -> ET.Element:
    return ET.fromstring(response.content)  # noqa: S314 - our own answer, not outside input


def deliver(django_capture_on_commit_callbacks, params: dict[str, str]):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(SMS, params)
    assert response.status_code == 200, response.content
    return response


def test_the_published_signature_of_the_inbound_sms_sample_is_reproduced():
    vectors = json.loads((SAMPLES / "twilio_signature_vectors.json").read_text())
    vector = vectors["files"]["twilio_inbound_sms.txt"]
    params = sample("twilio_inbound_sms.txt")
    validator = RequestValidator(vectors["auth_token"])
    assert validator.compute_signature(vector["url"], params) == vector["X-Twilio-Signature"]
    assert validator.validate(vector["url"], QueryDict(urlencode(params)), vector["X-Twilio-Signature"])
    assert not validator.validate(
        vector["url"], QueryDict(urlencode({**params, "Body": "changed"})), vector["X-Twilio-Signature"]
    )


def test_a_text_is_stored_raw_and_answered_with_empty_twiml(twilio_source, django_capture_on_commit_callbacks):
    params = text("Hi, is anyone available Tuesday?")
    response = deliver(django_capture_on_commit_callbacks, params)

    assert response["Content-Type"].startswith("text/xml")
    root = twiml_of(response)
    assert root.tag == "Response" and len(root) == 0
    event = InboundEvent.objects.get()
    assert (event.provider, event.kind, event.external_id) == ("twilio", "sms", params["MessageSid"])
    assert bytes(event.body) == urlencode(params).encode()
    assert (event.source, event.status) == (twilio_source, "received")


def test_a_text_from_an_unknown_number_opens_a_lead_with_the_inbound_message(
    twilio_source, django_capture_on_commit_callbacks
):
    deliver(django_capture_on_commit_callbacks, text("My AC stopped blowing cold air. Can someone come today?"))
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    assert list(lead.contact.points.values_list("value", flat=True)) == [SENDER]
    touch = lead.touches.get()
    assert (touch.channel, touch.provider, touch.source) == ("sms", "twilio", twilio_source)
    message = Message.objects.get()
    assert (message.lead, message.contact, message.direction, message.status) == (lead, lead.contact, "in", "received")
    assert message.body == "My AC stopped blowing cold air. Can someone come today?"
    assert (message.from_number, message.to, message.provider_sid) == (SENDER, LINE, "SM" + "1" * 32)
    assert message.inbound_event == InboundEvent.objects.get()
    assert Receipt.objects.filter(action="message.received", subject=message.public_id).exists()


def test_a_text_from_a_known_number_is_a_reply_on_its_open_lead(
    business, twilio_source, django_capture_on_commit_callbacks
):
    lead = lead_create(business, phone=SENDER)

    deliver(django_capture_on_commit_callbacks, text("Yes, Tuesday at 3pm works."))
    run_queued_events()

    assert Lead.objects.get() == lead
    assert list(lead.touches.values_list("channel", flat=True)) == ["form"]
    reply = Message.objects.get()
    assert (reply.lead, reply.direction, reply.body) == (lead, "in", "Yes, Tuesday at 3pm works.")


def test_the_same_message_sid_twice_is_a_duplicate_with_one_message(twilio_source, django_capture_on_commit_callbacks):
    first = deliver(django_capture_on_commit_callbacks, text("Hello?"))
    second = deliver(django_capture_on_commit_callbacks, text("Hello?"))

    assert first.content == second.content
    assert run_queued_events() == ["processed"]
    assert InboundEvent.objects.count() == 1 and Message.objects.count() == 1 and Lead.objects.count() == 1


def test_the_whole_body_is_kept_keywords_and_all(twilio_source, django_capture_on_commit_callbacks):
    body = "STOP\nActually no — send me the quote first, then stop. Ünïcode & <xml> ok?"
    deliver(django_capture_on_commit_callbacks, text(body))
    run_queued_events()

    assert Message.objects.get(direction="in").body == body


def test_the_published_sample_signed_for_our_endpoint_becomes_a_lead_with_its_message(
    business, django_capture_on_commit_callbacks
):
    params = sample("twilio_inbound_sms.txt")
    Source.objects.create(
        business=business, key="sample-line", provider="twilio", config={"phone_number": params["To"]}
    )

    deliver(django_capture_on_commit_callbacks, params)
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    assert list(lead.contact.points.values_list("value", flat=True)) == [params["From"]]
    message = Message.objects.get()
    assert (message.lead, message.body, message.provider_sid) == (lead, params["Body"], params["MessageSid"])


def test_a_bad_signature_is_refused_with_403_and_counted(twilio_source):
    response = post(SMS, text("Hello?"), token="another-token")

    assert response.status_code == 403
    assert response.json() == {"error": "invalid_signature", "detail": response.json()["detail"]}
    assert not InboundEvent.objects.exists()
    assert RejectedDelivery.objects.get().source == twilio_source


def test_the_query_string_is_part_of_what_is_signed(twilio_source):
    params = text("Hello?")
    signed_with_query = post(SMS + "?line=main", params, signed_url=f"{BASE_URL}{SMS}?line=main")
    signed_without_query = post(
        SMS + "?line=main", {**params, "MessageSid": "SM" + "2" * 32}, signed_url=BASE_URL + SMS
    )

    assert (signed_with_query.status_code, signed_without_query.status_code) == (200, 403)


def test_a_body_over_one_mebibyte_is_refused_with_413(twilio_source):
    response = post(SMS, text("x" * (1024 * 1024)))
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"
    assert not InboundEvent.objects.exists()


def test_a_text_to_an_unknown_number_is_kept_and_fails_with_a_clear_error(
    twilio_source, django_capture_on_commit_callbacks
):
    deliver(django_capture_on_commit_callbacks, text("Hello?", to="+13125550177"))

    event = InboundEvent.objects.get()
    assert (event.business, event.source) == (None, None)
    assert run_queued_events() == ["failed"]
    event.refresh_from_db()
    assert event.error.startswith("UnknownNumber: no active Twilio source has phone_number '+13125550177'")
    assert not Message.objects.exists()
