"""A status callback can outrun the send that it reports on: Twilio may call
back before our worker has saved the message's provider id. Such a callback
waits and is applied once the id is saved; one whose id never appears ends
failed with a clear error after bounded retries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.utils import timezone
from twilio.request_validator import RequestValidator

from agents.capture.processing import MAX_ATTEMPTS, event_process, inbound_events_sweep
from agents.outbound.dispatch import message_dispatch
from agents.outbound.gate import message_send
from crm.models import InboundEvent, Message, Receipt
from crm.services.consent import consent_record
from tests.agents.outbound.fake_twilio import ScriptedTwilio, created
from tests.factories import lead_create

pytestmark = pytest.mark.django_db

NOON_NY = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)
TOKEN = "token"
BASE = "https://backoffice.example.com"
PATH = "/hooks/twilio/sms/status/"
SID = "SM" + "c" * 32


@pytest.fixture(autouse=True)
def live(settings):
    settings.SEND_MODE = "live"
    settings.TWILIO_ACCOUNT_SID = "AC" + "0" * 32
    settings.TWILIO_AUTH_TOKEN = TOKEN
    settings.TWILIO_MESSAGING_SERVICE_SID = "MG" + "0" * 32
    settings.PUBLIC_BASE_URL = BASE


@pytest.fixture
def queued(business):
    lead = lead_create(business, phone="+12125550147")
    consent_record(
        contact_point=lead.contact.points.get(), channel="sms", granted=True, basis="form_disclosure", actor="t"
    )
    message = message_send(
        lead=lead,
        channel="sms",
        body="We got your request.",
        actor="agent:ack",
        idempotency_key="ack:1",
        automated=True,
        now=NOON_NY,
    )
    assert message.status == "queued"
    return message


def status_callback(status: str, sid: str = SID) -> InboundEvent:
    params = {"MessageSid": sid, "MessageStatus": status, "To": "+12125550147", "From": "+13125550100"}
    signature = RequestValidator(TOKEN).compute_signature(BASE + PATH, params)
    response = Client().post(
        PATH, urlencode(params), content_type="application/x-www-form-urlencoded", HTTP_X_TWILIO_SIGNATURE=signature
    )
    assert response.status_code == 204
    return InboundEvent.objects.get(external_id=f"{sid}:status:{status}")


def test_a_delivered_callback_that_outruns_the_saved_sid_is_applied_once_the_sid_is_saved(queued):
    early: list[str] = []

    def accept_and_call_back(data):
        # Twilio has the message and reports it delivered before its answer
        # to the send reaches our worker, so no message carries the SID yet.
        early.append(event_process(status_callback("delivered").pk))
        return created(SID)

    assert message_dispatch(queued.pk, http_client=ScriptedTwilio([accept_and_call_back])) == "sent"
    assert early == ["received"]  # waiting, not failed
    event = InboundEvent.objects.get(kind="sms_status")
    assert event.retry_at is not None and "no outbound message" in event.error
    queued.refresh_from_db()
    assert (queued.status, queued.provider_sid) == ("sent", SID)

    assert inbound_events_sweep(now=event.retry_at - timedelta(seconds=1)) == 0
    assert inbound_events_sweep(now=event.retry_at) == 1
    event.refresh_from_db()
    assert (event.status, event.error, event.retry_at) == ("processed", "", None)
    queued.refresh_from_db()
    assert queued.status == "delivered" and queued.delivered_at is not None
    assert Receipt.objects.filter(subject=queued.public_id, action="message.delivered").count() == 1


def test_a_callback_for_a_sid_that_never_appears_ends_failed_with_a_clear_error(business):
    event = status_callback("delivered", sid="SM" + "d" * 32)
    assert event_process(event.pk) == "received"
    start = timezone.now()
    for minute in range(0, 3 * 60, 5):
        inbound_events_sweep(now=start + timedelta(minutes=minute))
    event.refresh_from_db()
    assert (event.status, event.attempts, event.retry_at) == ("failed", MAX_ATTEMPTS, None)
    assert f"no outbound message with provider id 'SM{'d' * 32}'" in event.error
    assert f"gave up after {MAX_ATTEMPTS} attempts" in event.error
    assert not Message.objects.filter(status="delivered").exists()
