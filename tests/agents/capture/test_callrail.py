"""CallRail webhooks: signed base64 HMAC-SHA1 over the raw bytes with the
company's key; a call lands as a `call` touch with the tracking number's
attribution and a Call with its recording and transcript; an unanswered call
is a missed call like our own line's; a text lands on the caller's lead."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents.capture.processing import event_replay
from agents.capture.providers.callrail import callrail_signature
from crm.models import Business, Call, InboundEvent, Lead, Message, MessageTemplate, Receipt, RejectedDelivery, Source
from tests.helpers.capture import run_queued_events
from tests.helpers.twilio import LINE

pytestmark = pytest.mark.django_db

CALL_SAMPLE = (Path(__file__).parent / "samples" / "callrail_post_call.json").read_bytes()
TEXT_SAMPLE = (Path(__file__).parent / "samples" / "callrail_text_message.json").read_bytes()
SIGNING_KEY = "9f8e7d6c5b4a39281706f5e4d3c2b1a0"
URL = "/hooks/callrail/callrail-acme/"
CALL_ID = "CAL8154748ae6bd4e278a7cddd38a662f4f"
CALLER, TRACKING = "+13125550147", "+13125550166"
PLAYER = "https://app.callrail.com/calls/CAL8154748ae6bd4e278a7cddd38a662f4f/recording?access_key=3b91d2c4e5f6a7b8c9d0"
TRANSCRIPT = "Hi, this is Rosa. My furnace is blowing cold air since last night. Please call me back at 312 555 0147."
TEXT_BACK = "Sorry we missed your call to {business}. We will call you back shortly. Reply STOP to opt out."


@pytest.fixture
def callrail_source(business: Business) -> Source:
    return Source.objects.create(
        business=business,
        key="callrail-acme",
        provider="callrail",
        secret=SIGNING_KEY,
        config={"company_id": "COM8154748ae6bd4e278a7cddd38a662f4f"},
    )


@pytest.fixture
def text_back_on(business: Business) -> Business:
    business.missed_call_text_back = True
    # Texts may go at any hour here: the test's clock decides nothing.
    business.quiet_hours_start, business.quiet_hours_end = time(0, 0), time.max
    business.save(update_fields=["missed_call_text_back", "quiet_hours_start", "quiet_hours_end"])
    MessageTemplate.objects.create(
        business=business, key="missed_call_sms", channel="sms", approved=True, body=TEXT_BACK
    )
    return business


def call(**changes: Any) -> dict[str, Any]:
    return {**json.loads(CALL_SAMPLE), **changes}


def post(body: bytes | dict[str, Any], *, key: str = SIGNING_KEY, signature: str | None = None):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Signature": callrail_signature(key, data) if signature is None else signature}
    return Client().post(URL, data=data, content_type="application/json", headers=headers)


def deliver(django_capture_on_commit_callbacks, body: bytes | dict[str, Any]):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(body)
    assert response.status_code == 200, response.content
    return response


def test_the_signature_is_the_base64_hmac_sha1_of_the_raw_body_under_the_company_key():
    expected = base64.b64encode(hmac.new(SIGNING_KEY.encode(), CALL_SAMPLE, hashlib.sha1).digest()).decode()
    assert callrail_signature(SIGNING_KEY, CALL_SAMPLE) == expected
    assert reverse("hook-callrail", kwargs={"source_key": "callrail-acme"}) == URL


def test_a_voicemail_lands_as_a_missed_call_with_its_attribution_recording_and_transcript(
    callrail_source, text_back_on, setter, manager, django_capture_on_commit_callbacks
):
    response = deliver(django_capture_on_commit_callbacks, CALL_SAMPLE)
    assert response.json()["status"] == "received"
    event = InboundEvent.objects.get()
    assert (event.provider, event.kind, event.source) == ("callrail", "call", callrail_source)
    assert event.external_id.startswith(f"call:{CALL_ID}:")
    assert event.headers["Signature"] == callrail_signature(SIGNING_KEY, CALL_SAMPLE)
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    assert (lead.contact.first_name, lead.contact.last_name) == ("Rosa", "Diaz")
    touch = lead.touches.get()
    assert (touch.channel, touch.provider, touch.source) == ("call", "callrail", callrail_source)
    assert touch.campaign_id == "Furnace Repair - Chicago"
    assert touch.landing_page == "https://acme.example/furnace-repair"
    assert touch.gclid == "Cj0KCQiA2eKtBhDcARIsAEGTG40z"
    assert touch.utm == {"source": "google", "medium": "cpc", "campaign": "furnace-fall", "term": "furnace repair"}
    stamped = touch.answers["callrail"]
    assert (stamped["tracking_number"], stamped["source"], stamped["keywords"]) == (
        TRACKING,
        "Google Ads",
        "furnace repair near me",
    )

    recorded = Call.objects.get()
    assert (recorded.provider_sid, recorded.from_number, recorded.to) == (CALL_ID, CALLER, TRACKING)
    assert (recorded.direction, recorded.status, recorded.duration_seconds) == ("in", "no-answer", 41)
    assert recorded.recording_url == PLAYER
    assert recorded.transcript == TRANSCRIPT
    assert recorded.score["points"] <= 100  # scored as any transcript is
    assert recorded.lead == lead and recorded.contact == lead.contact

    # Missed: the call back is the lead's next action; no Twilio line, no text.
    task = lead.tasks.get(status="open")
    assert task.kind == "next_action" and task.title.startswith(f"Call back Rosa Diaz ({CALLER})")
    assert recorded.callback_task == task
    missed = Receipt.objects.get(action="call.missed", subject=recorded.public_id)
    assert missed.after["text_back"] == "not sent: the business has no Twilio number or Messaging Service to text from"
    assert not Message.objects.filter(direction="out").exists()
    actions = set(Receipt.objects.filter(subject=recorded.public_id).values_list("action", flat=True))
    assert {"call.received", "call.recording_added", "call.transcript_added", "call.scored"} <= actions


def test_a_missed_call_gets_the_text_back_from_the_twilio_line_where_the_business_has_one(
    callrail_source, twilio_source, text_back_on, setter, manager, django_capture_on_commit_callbacks
):
    deliver(django_capture_on_commit_callbacks, call(start_time=timezone.now().isoformat()))
    assert run_queued_events() == ["processed"]

    (text,) = Message.objects.filter(direction="out")
    assert (text.actor, text.status, text.to) == ("agent:missed_call", "dry_run", CALLER)
    assert text.from_number == LINE  # CallRail's number is CallRail's to text from, not ours
    assert text.body == TEXT_BACK.format(business=text_back_on.name)
    assert Lead.objects.get().tasks.filter(status="open", kind="next_action").count() == 1


def test_an_answered_call_is_a_first_contact_and_no_call_back(callrail_source, django_capture_on_commit_callbacks):
    answered = call(answered=True, voicemail=False, call_type="inbound", duration=184, transcription=None)
    deliver(django_capture_on_commit_callbacks, answered)
    assert run_queued_events() == ["processed"]

    recorded = Call.objects.get()
    assert (recorded.status, recorded.duration_seconds, recorded.transcript) == ("completed", 184, "")
    lead = Lead.objects.get()
    assert lead.first_response_at is not None
    assert not Receipt.objects.filter(action="call.missed").exists()
    assert not lead.tasks.filter(title__startswith="Call back").exists()


def test_a_call_modified_delivery_brings_the_late_recording_to_the_same_call(
    callrail_source, django_capture_on_commit_callbacks
):
    deliver(django_capture_on_commit_callbacks, call(recording=None, recording_player=None, transcription=None))
    assert run_queued_events() == ["processed"]
    assert Call.objects.get().recording_url == ""

    later = deliver(django_capture_on_commit_callbacks, CALL_SAMPLE)
    assert later.json()["duplicate"] is False
    assert run_queued_events() == ["processed"]

    recorded = Call.objects.get()
    assert (recorded.recording_url, recorded.transcript) == (PLAYER, TRANSCRIPT)
    assert Lead.objects.get().touches.count() == 1
    assert Receipt.objects.filter(action="call.missed").count() == 1


def test_a_repeated_delivery_is_acknowledged_without_a_second_event(
    callrail_source, django_capture_on_commit_callbacks
):
    first = deliver(django_capture_on_commit_callbacks, CALL_SAMPLE)
    run_queued_events()
    again = deliver(django_capture_on_commit_callbacks, CALL_SAMPLE)
    assert again.json() == {**first.json(), "status": "processed", "duplicate": True}
    assert run_queued_events() == []
    assert InboundEvent.objects.count() == Call.objects.count() == Lead.objects.count() == 1


def test_a_wrong_or_missing_signature_is_refused_and_counted(callrail_source):
    wrong = post(CALL_SAMPLE, key="an-old-signing-key")
    missing = post(CALL_SAMPLE, signature="")
    assert wrong.status_code == missing.status_code == 401
    assert wrong.json() == {"error": "invalid_signature", "detail": "bad or missing Signature"}
    assert not InboundEvent.objects.exists()
    assert RejectedDelivery.objects.get(source=callrail_source).count == 2


def test_a_switched_off_source_or_an_unknown_key_is_refused(callrail_source):
    Source.objects.filter(pk=callrail_source.pk).update(is_active=False)
    assert post(CALL_SAMPLE).status_code == 403
    response = Client().post("/hooks/callrail/nobody/", data=CALL_SAMPLE, content_type="application/json")
    assert response.status_code == 404
    assert not InboundEvent.objects.exists()


def test_a_signed_call_without_its_id_is_stored_failed_answered_400_and_stays_replayable(callrail_source):
    body = json.dumps(call(resource_id=None)).encode()
    response = post(body)
    assert response.status_code == 400
    assert response.json()["detail"] == "stored as failed, not processed: no resource_id"
    event = InboundEvent.objects.get()
    assert (event.status, event.kind, bytes(event.body)) == ("failed", "call", body)
    assert event.external_id.startswith("sha256:") and event.error == "malformed payload: no resource_id"

    assert event_replay(event) == "failed"  # still unreadable, still there to look at
    assert not Call.objects.exists()


def test_a_signed_body_that_is_not_json_is_stored_failed_under_its_digest(callrail_source):
    response = post(
        b'{"resource_id": "CAL81547', signature=callrail_signature(SIGNING_KEY, b'{"resource_id": "CAL81547')
    )
    assert response.status_code == 400
    event = InboundEvent.objects.get()
    assert (event.status, event.kind) == ("failed", "delivery")
    assert event_replay(event) == "failed"


def test_a_text_message_lands_as_an_inbound_message_on_the_callers_lead(
    callrail_source, django_capture_on_commit_callbacks
):
    deliver(django_capture_on_commit_callbacks, CALL_SAMPLE)
    deliver(django_capture_on_commit_callbacks, TEXT_SAMPLE)
    assert run_queued_events() == ["processed", "processed"]

    lead = Lead.objects.get()
    (message,) = Message.objects.filter(direction="in")
    assert message.lead == lead and message.channel == "sms"
    assert (message.from_number, message.to) == (CALLER, TRACKING)
    assert message.body == "Hi, do you have anyone free tomorrow morning to look at my furnace?"
    assert message.provider_sid == "callrail:SMS2f1e0d9c8b7a46f5e4d3c2b1a0f9e8d7"
    event = InboundEvent.objects.get(kind="sms")
    assert event.external_id == "sms:SMS2f1e0d9c8b7a46f5e4d3c2b1a0f9e8d7"
    # A repeat of the text is the same event.
    assert deliver(django_capture_on_commit_callbacks, TEXT_SAMPLE).json()["duplicate"] is True


def test_an_outbound_call_and_a_form_submission_are_stored_and_ignored(
    callrail_source, django_capture_on_commit_callbacks
):
    deliver(django_capture_on_commit_callbacks, call(direction="outbound", resource_id="CAL" + "1" * 32))
    deliver(django_capture_on_commit_callbacks, {"resource_id": "FRM" + "2" * 32, "form_data": {"name": "Rosa"}})
    assert run_queued_events() == ["ignored", "ignored"]
    assert not Lead.objects.exists() and not Call.objects.exists()
