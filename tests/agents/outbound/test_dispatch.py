"""Sending through the real twilio SDK, with only its HTTP transport scripted:
exactly one provider call per intended message, whatever happens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import requests
from django.utils import timezone

from agents.outbound.dispatch import message_dispatch
from agents.outbound.gate import message_send
from agents.outbound.reconcile import messages_reconcile
from crm.models import ConsentState, Message, Timer
from crm.services.consent import consent_record
from tests.agents.outbound.fake_twilio import ScriptedTwilio, created, error
from tests.factories import lead_create

pytestmark = pytest.mark.django_db

NOON_NY = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)
SID = "SM" + "a" * 32


def later() -> datetime:
    # The sweep leaves an unknown outcome alone for a minute after its claim.
    return timezone.now() + timedelta(minutes=2)


@pytest.fixture(autouse=True)
def live(settings):
    settings.SEND_MODE = "live"
    settings.TWILIO_ACCOUNT_SID = "AC" + "0" * 32
    settings.TWILIO_AUTH_TOKEN = "token"
    settings.TWILIO_MESSAGING_SERVICE_SID = "MG" + "0" * 32
    settings.PUBLIC_BASE_URL = "https://backoffice.example.com"


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


def test_a_queued_text_is_sent_once_with_status_callback_and_validity_period(queued):
    twilio = ScriptedTwilio([created(SID)])
    assert message_dispatch(queued.pk, http_client=twilio) == "sent"
    assert message_dispatch(queued.pk, http_client=twilio) == "skipped"  # a redelivered task
    assert len(twilio.requests) == 1
    sent = twilio.requests[0]
    assert sent.method == "POST" and sent.url.endswith("/Messages.json")
    assert sent.data["To"] == "+12125550147" and sent.data["MessagingServiceSid"].startswith("MG")
    assert sent.data["StatusCallback"] == "https://backoffice.example.com/hooks/twilio/sms/status/"
    assert int(sent.data["ValidityPeriod"]) <= 600
    queued.refresh_from_db()
    assert (queued.status, queued.provider_sid) == ("sent", SID)


def test_twilio_api_base_url_points_the_sdk_at_another_server(queued, settings):
    settings.TWILIO_API_BASE_URL = "http://127.0.0.1:4010"
    twilio = ScriptedTwilio([created(SID)])
    message_dispatch(queued.pk, http_client=twilio)
    assert twilio.requests[0].url.startswith("http://127.0.0.1:4010/2010-04-01/Accounts/")


def test_error_21610_records_an_opt_out_and_never_retries(queued):
    twilio = ScriptedTwilio([error(400, 21610, "Attempt to send to unsubscribed recipient")])
    assert message_dispatch(queued.pk, http_client=twilio) == "failed"
    queued.refresh_from_db()
    assert (queued.error_code, queued.block_reason) == ("21610", "revoked")
    state = ConsentState.objects.get(contact_point=queued.contact_point, channel="sms")
    assert state.status == "revoked" and state.last_event.basis == "provider_error_21610"
    assert not Timer.objects.exists()


def test_a_throttled_send_is_retried_later_by_a_timer(queued):
    twilio = ScriptedTwilio([error(429, 20429, "Too Many Requests")])
    assert message_dispatch(queued.pk, http_client=twilio) == "queued"
    queued.refresh_from_db()
    assert (queued.status, queued.attempts) == ("queued", 1)
    assert Timer.objects.get().kind == "outbound.retry"
    twilio.answers.append(created(SID))
    assert message_dispatch(queued.pk, http_client=twilio) == "sent"
    assert len(twilio.requests) == 2


@pytest.mark.parametrize(
    "failure", [requests.exceptions.ReadTimeout("read timed out"), error(503, 20503, "unavailable")]
)
def test_an_ambiguous_outcome_is_unknown_and_reconciled_before_any_resend(queued, failure):
    twilio = ScriptedTwilio([failure])
    assert message_dispatch(queued.pk, http_client=twilio) == "unknown"
    # The provider's list shows it did go out: settle it, send nothing more.
    listing = ScriptedTwilio(
        [
            (
                200,
                {
                    "messages": [{"sid": SID, "body": "We got your request.", "to": "+12125550147"}],
                    "next_page_uri": None,
                },
            )
        ]
    )
    swept = messages_reconcile(now=later(), http_client=listing)
    assert (swept["found"], swept["requeued"]) == (1, 0)
    assert listing.requests[0].method == "GET" and listing.requests[0].params["To"] == "+12125550147"
    queued.refresh_from_db()
    assert (queued.status, queued.provider_sid) == ("sent", SID)


def test_an_unknown_send_the_provider_never_saw_is_sent_exactly_once_more(queued):
    message_dispatch(queued.pk, http_client=ScriptedTwilio([requests.exceptions.ConnectionError("reset")]))
    empty = ScriptedTwilio([(200, {"messages": [], "next_page_uri": None})])
    swept = messages_reconcile(now=later(), http_client=empty)
    assert (swept["found"], swept["requeued"]) == (0, 1)
    twilio = ScriptedTwilio([created(SID)])
    assert message_dispatch(queued.pk, http_client=twilio) == "sent"
    assert message_dispatch(queued.pk, http_client=twilio) == "skipped"
    assert Message.objects.get().provider_sid == SID and len(twilio.requests) == 1


def test_a_call_goes_through_the_gate_and_the_sdk_with_the_approved_script(business, settings):
    from crm.models import Call, Source

    Source.objects.create(business=business, key="line", provider="twilio", config={"phone_number": "+13125550100"})
    lead = lead_create(business, phone="+12125550148")
    consent_record(
        contact_point=lead.contact.points.get(), channel="voice", granted=True, basis="form_disclosure", actor="t"
    )
    message = message_send(
        lead=lead,
        channel="voice",
        body="Hi, this is Acme about your furnace.",
        actor="agent:voice",
        idempotency_key="call:1",
        automated=True,
        now=NOON_NY,
    )
    assert message.status == "queued" and message.from_number == "+13125550100"  # a number, not the Messaging Service
    twilio = ScriptedTwilio([(201, {"sid": "CA" + "c" * 32, "status": "queued"})])
    assert message_dispatch(message.pk, http_client=twilio) == "sent"
    request = twilio.requests[0]
    assert request.url.endswith("/Calls.json") and request.data["To"] == "+12125550148"
    assert "<Say>Hi, this is Acme about your furnace.</Say>" in request.data["Twiml"]
    call = Call.objects.get()
    assert (call.direction, call.provider_sid, call.lead) == ("out", "CA" + "c" * 32, lead)
