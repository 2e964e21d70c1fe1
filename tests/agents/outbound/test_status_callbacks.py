"""Status callbacks as delivery proof: statuses only move forward."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client
from twilio.request_validator import RequestValidator

from agents.capture.processing import event_process
from crm.models import InboundEvent, Message, Receipt
from tests.factories import lead_create

pytestmark = pytest.mark.django_db

TOKEN = "status-test-token"
BASE = "https://backoffice.example.com"
PATH = "/hooks/twilio/sms/status/"
SID = "SM" + "b" * 32


@pytest.fixture(autouse=True)
def twilio_settings(settings):
    settings.TWILIO_AUTH_TOKEN = TOKEN
    settings.PUBLIC_BASE_URL = BASE


@pytest.fixture
def sent_message(business):
    lead = lead_create(business, phone="+12125550147")
    return Message.objects.create(
        business=business,
        lead=lead,
        contact=lead.contact,
        direction="out",
        channel="sms",
        status="sent",
        body="Hi",
        to="+12125550147",
        idempotency_key="k",
        provider_sid=SID,
    )


def callback(status: str, **more: str) -> str:
    params = {"MessageSid": SID, "MessageStatus": status, "To": "+12125550147", "From": "+13125550100", **more}
    signature = RequestValidator(TOKEN).compute_signature(BASE + PATH, params)
    response = Client().post(
        PATH, urlencode(params), content_type="application/x-www-form-urlencoded", HTTP_X_TWILIO_SIGNATURE=signature
    )
    assert response.status_code == 204
    event = InboundEvent.objects.filter(kind="sms_status").order_by("-pk").first()
    assert event is not None
    return event_process(event.pk)


def test_delivered_is_recorded_and_a_late_sent_changes_nothing(sent_message):
    assert callback("delivered") == "processed"
    assert callback("sent") == "ignored"
    sent_message.refresh_from_db()
    assert sent_message.status == "delivered" and sent_message.delivered_at is not None
    assert Receipt.objects.filter(subject=sent_message.public_id, action="message.delivered").count() == 1


def test_undelivered_keeps_the_error_code_and_writes_a_receipt(sent_message):
    assert callback("undelivered", ErrorCode="30003") == "processed"
    sent_message.refresh_from_db()
    assert (sent_message.status, sent_message.error_code) == ("undelivered", "30003")
    receipt = Receipt.objects.get(subject=sent_message.public_id, action="message.undelivered")
    assert receipt.reason == "Twilio error 30003" and receipt.lead == sent_message.lead


def test_a_callback_for_an_unrecorded_message_waits_and_is_applied_once_it_is_recorded(business):
    assert callback("delivered") == "received"  # waiting for the send to save its id, not failed
    event = InboundEvent.objects.get(kind="sms_status")
    assert "no outbound message" in event.error and event.retry_at is not None
    lead = lead_create(business, phone="+12125550147")
    Message.objects.create(
        business=business,
        lead=lead,
        contact=lead.contact,
        direction="out",
        channel="sms",
        status="sent",
        body="Hi",
        to="+12125550147",
        idempotency_key="k2",
        provider_sid=SID,
    )
    assert event_process(event.pk) == "processed"
    assert Message.objects.get().status == "delivered"


def test_an_unsigned_callback_is_refused(sent_message):
    response = Client().post(PATH, {"MessageSid": SID, "MessageStatus": "delivered"})
    assert response.status_code == 403
    sent_message.refresh_from_db()
    assert sent_message.status == "sent"
