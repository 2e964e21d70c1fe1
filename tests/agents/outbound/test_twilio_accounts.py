"""Each business's Twilio traffic goes through its own Twilio account: texts,
calls and reconciliation against a local HTTP server in Twilio's REST shape
(scripts.fake_twilio: the real SDK and its real transport), and every signed request from Twilio
checked with the auth token of the business it is about."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from twilio.request_validator import RequestValidator

from agents.capture.processing import event_process
from agents.outbound.dispatch import message_dispatch
from agents.outbound.gate import message_send
from agents.outbound.reconcile import messages_reconcile
from crm.models import Business, Call, InboundEvent, Message, RejectedDelivery, Source
from crm.services.business_file import BusinessFileError, business_file_parse, business_spec_apply
from crm.services.consent import consent_record
from scripts.fake_twilio import FakeTwilio
from tests.factories import lead_create

pytestmark = pytest.mark.django_db

NOON_NY = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)
BASE_URL = "https://backoffice.example.com"
SHARED_SID, SHARED_TOKEN = "AC" + "0" * 32, "operator-shared-token"
SHARED_SERVICE = "MG" + "0" * 32
A_SID, A_TOKEN, A_SERVICE, A_LINE = "AC" + "a" * 32, "acme-own-token-1111", "MG" + "a" * 32, "+13125550100"
B_SID, B_TOKEN, B_SERVICE, B_LINE = "AC" + "b" * 32, "bravo-own-token-2222", "MG" + "b" * 32, "+13125550200"
CUSTOMER = "+12125550147"


@pytest.fixture
def twilio(settings: Any) -> Iterator[FakeTwilio]:
    fake = FakeTwilio({SHARED_SID: SHARED_TOKEN, A_SID: A_TOKEN, B_SID: B_TOKEN})
    fake.start()
    settings.SEND_MODE = "live"
    settings.PUBLIC_BASE_URL = BASE_URL
    settings.TWILIO_ACCOUNT_SID, settings.TWILIO_AUTH_TOKEN = SHARED_SID, SHARED_TOKEN
    settings.TWILIO_MESSAGING_SERVICE_SID = SHARED_SERVICE
    settings.TWILIO_API_BASE_URL = fake.url
    yield fake
    fake.stop()


def load(slug: str, name: str, source: str) -> Business:
    text = f"""
business: {{slug: {slug}, name: {name}, timezone: America/New_York, region: US}}
sources:
  - {source}
"""
    business_spec_apply(business_file_parse(text, path=f"{slug}.yaml"))
    return Business.objects.get(slug=slug)


def own_account(slug: str, sid: str, token: str, line: str, service: str = "") -> Business:
    extra = f', messaging_service_sid: "{service}"' if service else ""
    return load(
        slug,
        slug.title(),
        f'{{key: {slug}-line, provider: twilio, phone_number: "{line}", '
        f'account_sid: "{sid}", auth_token: "{token}"{extra}}}',
    )


@pytest.fixture
def acme(twilio: FakeTwilio) -> Business:
    return own_account("acme", A_SID, A_TOKEN, A_LINE, A_SERVICE)


@pytest.fixture
def bravo(twilio: FakeTwilio) -> Business:
    return own_account("bravo", B_SID, B_TOKEN, B_LINE, B_SERVICE)


def queue(business: Business, channel: str = "sms", *, key: str = "1") -> Message:
    lead = lead_create(business, phone=CUSTOMER)
    consent_record(
        contact_point=lead.contact.points.get(), channel=channel, granted=True, basis="form_disclosure", actor="t"
    )
    message = message_send(
        lead=lead,
        channel=channel,
        body=f"Hello from {business.name}.",
        actor="agent:ack",
        idempotency_key=f"{business.slug}:{key}",
        automated=True,
        now=NOON_NY,
    )
    assert message.status == "queued"
    return message


def sign(path: str, params: dict[str, str], token: str) -> str:
    return str(RequestValidator(token).compute_signature(BASE_URL + path, params))


def post(path: str, params: dict[str, str], *, token: str) -> Any:
    return Client().post(
        path,
        data=urlencode(params),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_TWILIO_SIGNATURE=sign(path, params, token),
    )


def inbound_text(to: str, account_sid: str, sid: str = "SM" + "1" * 32) -> dict[str, str]:
    return {
        "AccountSid": account_sid,
        "MessageSid": sid,
        "SmsSid": sid,
        "From": CUSTOMER,
        "To": to,
        "Body": "Is Tuesday OK?",
        "NumMedia": "0",
        "SmsStatus": "received",
    }


# --- sending ---------------------------------------------------------------------------


def test_each_business_texts_through_its_own_account_sid_and_auth_token(acme, bravo, twilio):
    a_message, b_message = queue(acme), queue(bravo)

    assert message_dispatch(b_message.pk) == "sent"
    assert message_dispatch(a_message.pk) == "sent"

    b_request, a_request = twilio.seen
    assert b_request.path == f"/2010-04-01/Accounts/{B_SID}/Messages.json"
    assert (b_request.username, b_request.password) == (B_SID, B_TOKEN)
    assert b_request.form["MessagingServiceSid"] == B_SERVICE and b_request.form["Body"] == "Hello from Bravo."
    assert a_request.path == f"/2010-04-01/Accounts/{A_SID}/Messages.json"
    assert (a_request.username, a_request.password) == (A_SID, A_TOKEN)
    assert a_request.form["MessagingServiceSid"] == A_SERVICE
    assert b_request.form["StatusCallback"] == f"{BASE_URL}/hooks/twilio/sms/status/"
    assert set(twilio.sent) == {A_SID, B_SID}


def test_a_business_without_its_own_account_sends_through_the_operators_shared_account(twilio):
    shared = load("corner", "Corner Plumbing", '{key: corner-line, provider: twilio, phone_number: "+13125550300"}')

    assert message_dispatch(queue(shared).pk) == "sent"

    [request] = twilio.seen
    assert request.path == f"/2010-04-01/Accounts/{SHARED_SID}/Messages.json"
    assert (request.username, request.password) == (SHARED_SID, SHARED_TOKEN)
    assert request.form["MessagingServiceSid"] == SHARED_SERVICE


def test_a_business_with_its_own_account_never_texts_through_the_operators_messaging_service(twilio):
    own = own_account("delta", "AC" + "d" * 32, "delta-token", "+13125550400")
    twilio.accounts["AC" + "d" * 32] = "delta-token"

    message = queue(own)
    assert message.from_number == "+13125550400"
    assert message_dispatch(message.pk) == "sent"

    [request] = twilio.seen
    assert request.path == f"/2010-04-01/Accounts/{'AC' + 'd' * 32}/Messages.json"
    assert request.form["From"] == "+13125550400" and "MessagingServiceSid" not in request.form


def test_a_call_is_placed_through_the_account_of_the_business_that_owns_the_calling_number(acme, bravo, twilio):
    message = queue(bravo, "voice")
    assert message.from_number == B_LINE

    assert message_dispatch(message.pk) == "sent"

    [request] = twilio.seen
    assert request.path == f"/2010-04-01/Accounts/{B_SID}/Calls.json"
    assert (request.username, request.password) == (B_SID, B_TOKEN)
    assert request.form["StatusCallback"] == f"{BASE_URL}/hooks/twilio/voice/status/"
    assert Call.objects.get().business == bravo


def test_reconciliation_asks_each_business_account_for_its_own_messages(acme, bravo, twilio):
    twilio.storm(["5xx-taken"])  # taken, answered 503: an ambiguous outcome
    b_message = queue(bravo)
    assert message_dispatch(b_message.pk) == "unknown"

    swept = messages_reconcile(now=timezone.now() + timedelta(minutes=2))
    assert (swept["found"], swept["requeued"]) == (1, 0)

    listing = twilio.seen[-1]
    assert listing.method == "GET" and listing.path == f"/2010-04-01/Accounts/{B_SID}/Messages.json"
    assert (listing.username, listing.password) == (B_SID, B_TOKEN)
    b_message.refresh_from_db()
    assert b_message.status == "sent" and b_message.provider_sid == twilio.sent[B_SID][0]["sid"]


# --- signatures --------------------------------------------------------------------------


def test_an_inbound_text_signed_with_another_tenants_token_for_its_number_is_refused(acme, bravo):
    forged = post("/hooks/twilio/sms/", inbound_text(B_LINE, A_SID), token=A_TOKEN)

    assert forged.status_code == 403
    assert "own Twilio auth token" in forged.json()["detail"]
    assert not InboundEvent.objects.exists()
    assert RejectedDelivery.objects.get().source == Source.objects.get(key="bravo-line")


def test_an_inbound_text_is_checked_with_the_auth_token_of_the_business_it_is_addressed_to(acme, bravo):
    assert post("/hooks/twilio/sms/", inbound_text(B_LINE, SHARED_SID), token=SHARED_TOKEN).status_code == 403

    accepted = post("/hooks/twilio/sms/", inbound_text(B_LINE, B_SID), token=B_TOKEN)

    assert accepted.status_code == 200
    event = InboundEvent.objects.get()
    assert (event.business, event.source.key) == (bravo, "bravo-line")


def test_a_number_of_a_business_on_the_shared_account_is_checked_with_the_operators_token(twilio):
    load("corner", "Corner Plumbing", '{key: corner-line, provider: twilio, phone_number: "+13125550300"}')

    assert post("/hooks/twilio/sms/", inbound_text("+13125550300", SHARED_SID), token=SHARED_TOKEN).status_code == 200


def test_a_status_callback_is_checked_with_the_token_of_the_business_that_sent_the_message(acme, bravo, twilio):
    message = queue(bravo)
    message_dispatch(message.pk)
    message.refresh_from_db()
    status = {
        "AccountSid": A_SID,
        "MessageSid": str(message.provider_sid),
        "MessageStatus": "delivered",
        "From": B_LINE,
        "To": CUSTOMER,
    }

    assert post("/hooks/twilio/sms/status/", status, token=A_TOKEN).status_code == 403
    assert post("/hooks/twilio/sms/status/", {**status, "AccountSid": B_SID}, token=B_TOKEN).status_code == 204

    event = InboundEvent.objects.get()
    assert event.business == bravo
    assert event_process(event.pk) == "processed"
    message.refresh_from_db()
    assert message.status == "delivered"


def test_a_status_for_a_message_not_stored_yet_is_checked_under_the_account_its_account_sid_names(acme, bravo):
    early = {"AccountSid": B_SID, "MessageSid": "SM" + "9" * 32, "MessageStatus": "sent", "To": CUSTOMER}

    assert post("/hooks/twilio/sms/status/", early, token=A_TOKEN).status_code == 403
    assert post("/hooks/twilio/sms/status/", early, token=B_TOKEN).status_code == 204
    assert InboundEvent.objects.get().business == bravo


def test_a_status_accepted_under_one_account_never_moves_another_businesss_message(acme, bravo, twilio):
    message = queue(bravo)
    message_dispatch(message.pk)
    message.refresh_from_db()
    # Acme signs, under its own account, a status naming Bravo's message before it is stored.
    sid = str(message.provider_sid)
    Message.objects.filter(pk=message.pk).update(provider_sid="")
    status = {"AccountSid": A_SID, "MessageSid": sid, "MessageStatus": "failed", "To": CUSTOMER}
    assert post("/hooks/twilio/sms/status/", status, token=A_TOKEN).status_code == 204
    Message.objects.filter(pk=message.pk).update(provider_sid=sid)

    event = InboundEvent.objects.get()
    assert event.business == acme
    assert event_process(event.pk) == "failed"
    message.refresh_from_db()
    assert message.status == "sent"


def test_a_follow_up_twiml_request_is_checked_with_the_token_of_the_business_that_placed_the_call(acme, bravo, twilio):
    message = queue(bravo, "voice")
    message_dispatch(message.pk)
    call = Call.objects.get()
    path = f"/hooks/twilio/follow-up/{message.public_id}/"
    answered = {
        "AccountSid": B_SID,
        "CallSid": str(call.provider_sid),
        "CallStatus": "in-progress",
        "AnsweredBy": "human",
        "From": B_LINE,
        "To": CUSTOMER,
        "Direction": "outbound-api",
    }

    assert post(path, {**answered, "AccountSid": A_SID}, token=A_TOKEN).status_code == 403
    assert post(path, answered, token=SHARED_TOKEN).status_code == 403
    response = post(path, answered, token=B_TOKEN)

    assert response.status_code == 200 and b"<Gather" in response.content


def test_a_recording_callback_is_checked_with_the_token_of_the_calls_business(acme, bravo, twilio):
    message_dispatch(queue(bravo, "voice").pk)
    call = Call.objects.get()
    recording = {
        "AccountSid": B_SID,
        "CallSid": str(call.provider_sid),
        "RecordingSid": "RE" + "4" * 32,
        "RecordingStatus": "completed",
        "RecordingDuration": "42",
        "RecordingUrl": f"https://api.twilio.com/2010-04-01/Accounts/{B_SID}/Recordings/RE{'4' * 32}",
    }

    assert post("/hooks/twilio/voice/recording/", {**recording, "AccountSid": A_SID}, token=A_TOKEN).status_code == 403
    assert post("/hooks/twilio/voice/recording/", recording, token=B_TOKEN).status_code == 204
    assert InboundEvent.objects.get().business == bravo


def test_a_call_status_is_checked_with_the_token_of_the_business_that_placed_the_call(acme, bravo, twilio):
    message_dispatch(queue(bravo, "voice").pk)
    call = Call.objects.get()
    status = {
        "AccountSid": A_SID,
        "CallSid": str(call.provider_sid),
        "CallStatus": "completed",
        "From": B_LINE,
        "To": CUSTOMER,
        "Direction": "outbound-api",
        "CallDuration": "61",
    }

    assert post("/hooks/twilio/voice/status/", status, token=A_TOKEN).status_code == 403
    assert post("/hooks/twilio/voice/status/", {**status, "AccountSid": B_SID}, token=B_TOKEN).status_code == 200


# --- the business file -----------------------------------------------------------------------


def test_the_business_file_stores_the_twilio_auth_token_encrypted_in_the_sources_secret(acme):
    source = Source.objects.get(key="acme-line")

    assert source.secret == A_TOKEN
    assert source.config == {"phone_number": A_LINE, "account_sid": A_SID, "messaging_service_sid": A_SERVICE}
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret, config::text FROM crm_source WHERE id = %s", [source.pk])
        secret, config = cursor.fetchone()
    assert A_TOKEN not in secret and A_TOKEN not in config


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ('{key: x, provider: twilio, account_sid: "AC123", auth_token: "t"}', "bad account_sid 'AC123'"),
        ('{key: x, provider: twilio, messaging_service_sid: "PN' + "0" * 32 + '"}', "bad messaging_service_sid"),
        ('{key: x, provider: twilio, phone_number: "+13125550100", auth_token: "t"}', "needs the 'account_sid'"),
        ('{key: x, provider: website, auth_token: "t"}', "'auth_token' is for twilio sources"),
        (f'{{key: x, provider: twilio, account_sid: "{A_SID}", auth_token: "t", secret: "s"}}', "not both"),
    ],
)
def test_the_business_file_refuses_a_twilio_account_it_cannot_use(db, source, reason):
    text = f"business: {{slug: x, name: X, timezone: America/New_York}}\nsources:\n  - {source}\n"
    with pytest.raises(BusinessFileError) as refused:
        business_file_parse(text, path="x.yaml")
    assert reason in str(refused.value)
