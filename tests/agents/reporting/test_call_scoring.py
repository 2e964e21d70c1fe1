"""Call scoring: Twilio's signed recording and transcription callbacks, the
rubric's explainable flags, the review queue and imported transcripts."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from twilio.request_validator import RequestValidator

from agents.capture.processing import event_process, event_replay
from agents.reporting.call_scoring import call_review_mark, call_score
from crm.models import Call, InboundEvent, Receipt, RejectedDelivery, Source
from crm.services.records import appointment_record

pytestmark = pytest.mark.django_db

BASE_URL = "https://backoffice.example.com"
TOKEN = "twilio-test-token-0123456789"
RECORDING = "/hooks/twilio/voice/recording/"
LINE = "+13125550100"
CALLER = "+12125550147"
SAMPLE = Path(__file__).parent / "samples" / "twilio_recording.txt"
CALL_SID = "CA00000000000000000000000000000032"  # the sample's


@pytest.fixture(autouse=True)
def twilio_settings(settings):
    settings.PUBLIC_BASE_URL = BASE_URL
    settings.TWILIO_AUTH_TOKEN = TOKEN


def post(path: str, params: dict[str, str], *, token: str = TOKEN):
    signature = RequestValidator(token).compute_signature(BASE_URL + path, params)
    return Client().post(
        path,
        data=urlencode(params),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_TWILIO_SIGNATURE=signature,
    )


def run_queued_events() -> list[str]:
    """What a worker does with each stored delivery (the test's transaction
    never commits, so the on-commit enqueue never happens)."""
    pending = InboundEvent.objects.filter(status="received").order_by("pk").values_list("pk", flat=True)
    return [event_process(pk) for pk in pending]


def recording_params(**overrides: str) -> dict[str, str]:
    lines = SAMPLE.read_text().splitlines()
    return {**dict(line.split("=", 1) for line in lines if line), **overrides}


@pytest.fixture
def call(business) -> Call:
    """A real inbound call, made by the call listener from signed webhooks."""
    Source.objects.create(business=business, key="main-line", provider="twilio", config={"phone_number": LINE})
    base = {
        "AccountSid": "AC00000000000000000000000000000001",
        "CallSid": CALL_SID,
        "From": CALLER,
        "To": LINE,
        "Direction": "inbound",
    }
    assert post("/hooks/twilio/voice/", {**base, "CallStatus": "ringing"}).status_code == 200
    status = {**base, "CallStatus": "completed", "CallDuration": "187"}
    assert post("/hooks/twilio/voice/status/", status).status_code == 200
    run_queued_events()
    return Call.objects.get(provider_sid=CALL_SID)


def transcribe(text: str, sid: str = "TR0001") -> None:
    params = {
        "AccountSid": "AC00000000000000000000000000000001",
        "CallSid": CALL_SID,
        "RecordingSid": "RE1",
        "TranscriptionSid": sid,
        "TranscriptionStatus": "completed",
        "TranscriptionText": text,
    }
    assert post(RECORDING, params).status_code == 204
    assert run_queued_events() == ["processed"]


def test_a_signed_recording_callback_is_stored_then_attached_to_its_call(call):
    response = post(RECORDING, recording_params())
    assert response.status_code == 204
    event = InboundEvent.objects.get(kind="recording")
    assert (event.provider, event.external_id, event.business_id) == (
        "twilio",
        "RE00000000000000000000000000000041:recording:completed",
        call.business_id,
    )
    assert run_queued_events() == ["processed"]
    call.refresh_from_db()
    assert call.recording_url.endswith("/Recordings/RE00000000000000000000000000000041")
    assert Receipt.objects.filter(subject=call.public_id, action="call.recording_added").count() == 1
    # Twilio retries: the same delivery is acknowledged, not stored again.
    assert post(RECORDING, recording_params()).status_code == 204
    assert InboundEvent.objects.filter(kind="recording").count() == 1


def test_a_bad_signature_is_refused_and_counted(call):
    response = post(RECORDING, recording_params(), token="not-the-token")
    assert response.status_code == 403
    assert response.json()["error"] == "invalid_signature"
    assert not InboundEvent.objects.filter(kind="recording").exists()
    assert RejectedDelivery.objects.get(provider="twilio").count == 1


def test_a_signed_body_without_its_recording_sid_is_kept_failed_and_answered_400(call):
    params = recording_params()
    del params["RecordingSid"]
    response = post(RECORDING, params)
    assert response.status_code == 400
    assert response.json() == {"error": "malformed_payload", "detail": "no RecordingSid or RecordingStatus"}
    assert InboundEvent.objects.get(kind="recording").status == "failed"


def test_a_recording_that_outruns_its_call_fails_and_replays(business):
    assert post(RECORDING, recording_params()).status_code == 204
    assert run_queued_events() == ["failed"]
    event = InboundEvent.objects.get(kind="recording")
    assert "no call with CallSid" in event.error
    Source.objects.create(business=business, key="main-line", provider="twilio", config={"phone_number": LINE})
    post("/hooks/twilio/voice/", {"CallSid": CALL_SID, "From": CALLER, "To": LINE, "CallStatus": "ringing"})
    run_queued_events()
    assert event_replay(event) == "processed"
    assert Call.objects.get(provider_sid=CALL_SID).recording_url


def test_a_promise_without_a_booking_ask_goes_to_review_with_its_reasons(call):
    transcribe("Yeah we can fix the furnace, it will be $199 flat. Anything else? OK bye.")
    call.refresh_from_db()
    codes = [f["code"] for f in call.flags]
    assert codes == ["no_booking_ask", "price_promised", "ended_unbooked"]
    promise = next(f for f in call.flags if f["code"] == "price_promised")
    assert "$199" in promise["evidence"]
    assert call.review_status == "pending"
    assert call.score["points"] == 100 - 30 - 25 - 10
    assert Receipt.objects.filter(subject=call.public_id, action="call.scored").count() == 1


def test_a_call_that_asks_for_the_booking_and_books_is_not_flagged(call):
    start = timezone.now() + timedelta(days=1)
    appointment_record(lead=call.lead, starts_at=start, ends_at=start + timedelta(hours=1), actor="sam")
    transcribe("Thanks for calling. What time works for you tomorrow so we can send a tech out?")
    call.refresh_from_db()
    assert call.flags == []
    assert call.review_status == ""
    assert call.score["points"] == 100


def test_complaint_words_and_a_short_call_are_flagged(call):
    Call.objects.filter(pk=call.pk).update(duration_seconds=12)
    transcribe("This is terrible service, I want a refund. When can you come out to fix it?")
    call.refresh_from_db()
    codes = [f["code"] for f in call.flags]
    assert "complaint_words" in codes and "too_short" in codes
    complaint = next(f for f in call.flags if f["code"] == "complaint_words")
    assert complaint["reason"] == "complaint word “terrible”"


def test_a_reviewed_call_stays_reviewed_when_scored_again(call):
    transcribe("It costs $50. Bye.")
    call.refresh_from_db()
    assert call_review_mark(call, actor="mia", note="coached") is True
    assert call_review_mark(call, actor="mia") is False  # already out of the queue
    call_score(call)
    call.refresh_from_db()
    assert call.review_status == "reviewed"
    assert Receipt.objects.filter(subject=call.public_id, action="call.reviewed").get().actor == "mia"


def test_an_imported_transcript_is_scored(call, tmp_path):
    path = tmp_path / "call.txt"
    path.write_text("I'll be honest, you'll get a discount of 20% if you book today. Can I schedule you for Friday?")
    out = StringIO()
    call_command("import_transcript", call.public_id, str(path), "--actor", "mia", stdout=out)
    call.refresh_from_db()
    assert call.transcript.startswith("I'll be honest")
    assert [f["code"] for f in call.flags] == ["price_promised", "ended_unbooked"]
    assert "flags: price_promised, ended_unbooked; review: pending" in out.getvalue()
    receipt = Receipt.objects.get(subject=call.public_id, action="call.transcript_added")
    assert (receipt.actor, receipt.after["source"]) == ("mia", "import")
    with pytest.raises(CommandError, match="no call"):
        call_command("import_transcript", "call_NOPE", str(path))
