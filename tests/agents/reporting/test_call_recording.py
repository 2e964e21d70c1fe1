"""Calls that can be scored: a business that turns recording on gets its
forwarded calls recorded (announced where every party must consent), the
recording transcribed by the server's speech to text, and the transcript
scored. Twilio's webhooks are signed as Twilio signs them; Twilio's media
host and the speech to text are real local HTTP servers that `requests` and
the `openai` SDK talk to.

Done when: a forwarded call with recording on ends with a transcript and a
score on the call."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from agents import tasks
from agents.consent.recording import ALL_PARTY_CONSENT_STATES, caller_state, recording_notice_reason
from agents.reporting.call_scoring import TRANSCRIBE_KIND
from crm.models import Business, Call, ModelCall, Receipt, Timer
from crm.services.business_file import BusinessFileError, business_file_parse, business_spec_apply
from crm.services.timers import timer_retry
from tests.helpers.capture import run_queued_events
from tests.helpers.speech import AUDIO, RecordingServer, SpeechServer, recording_server, speech_server
from tests.helpers.twilio import (
    BASE_URL,
    CALL_SID,
    FORWARD_TO,
    LINE,
    STATUS,
    TOKEN,
    VOICE,
    dial_ended,
    incoming,
    post,
)

pytestmark = pytest.mark.django_db

ACCOUNT = "AC00000000000000000000000000000001"
RECORDING_SID = "RE00000000000000000000000000000041"
RECORDING = "/hooks/twilio/voice/recording/"
# What the contractor and the caller said: a price, no booking asked for.
SAID = "Hi, thanks for calling Acme. Yeah the furnace repair will be $199 flat. Okay, talk soon, bye."
NOTICE = "This call may be recorded for quality and training."


def business_file(calls: str = "{record: true, transcription: model, states: [TX]}", extra: str = "") -> str:
    return f"""
business: {{slug: acme-calls, name: Acme Heating & Air, timezone: America/Chicago, region: US}}
sources:
  - {{key: main-line, provider: twilio, phone_number: "{LINE}", forward_to: "{FORWARD_TO}"}}
policy: {{quiet_hours: "00:00-24:00"}}
calls: {calls}
{extra}
"""


def load(text: str) -> Business:
    return business_spec_apply(business_file_parse(text, path="acme-calls.yaml")).business


@pytest.fixture(autouse=True)
def twilio_settings(settings: Any) -> None:
    settings.PUBLIC_BASE_URL = BASE_URL
    settings.TWILIO_AUTH_TOKEN = TOKEN


@pytest.fixture
def speech(settings: Any) -> Iterator[SpeechServer]:
    with speech_server(settings) as server:
        yield server


@pytest.fixture
def twilio_media(settings: Any) -> Iterator[RecordingServer]:
    with recording_server(settings, ACCOUNT, TOKEN) as server:
        yield server


def answer(capture: Any, params: dict[str, str]) -> str:
    """The TwiML the voice hook answers an incoming call with."""
    with capture(execute=True):
        response = post(VOICE, params)
    assert response.status_code == 200, response.content
    return response.content.decode()


def recording_params(media: RecordingServer, **more: str) -> dict[str, str]:
    return {
        "AccountSid": ACCOUNT,
        "CallSid": CALL_SID,
        "RecordingSid": RECORDING_SID,
        "RecordingUrl": media.recording_url(ACCOUNT, RECORDING_SID),
        "RecordingStatus": "completed",
        "RecordingDuration": "187",
        "RecordingChannels": "2",
        "RecordingSource": "DialVerb",
        **more,
    }


def run_transcriptions(capture: Any) -> list[str]:
    """The queued transcription tasks, run as a worker runs them."""
    outcomes = []
    for queued in OrmQ.objects.order_by("id"):
        task = SignedPackage.loads(queued.payload)
        if task["func"] != "agents.tasks.call_transcribe":
            continue
        with capture(execute=True):
            outcomes.append(tasks.call_transcribe(*task["args"]))
        queued.delete()
    return outcomes


def forwarded_call_recorded(capture: Any, media: RecordingServer) -> Call:
    """The call in, answered by the contractor for 187 s, and Twilio's
    recording callback: each signed and processed as a worker would."""
    answer(capture, incoming())
    with capture(execute=True):
        assert run_queued_events() == ["processed"]
    with capture(execute=True):
        assert post(STATUS, dial_ended("completed", 187)).status_code == 200
    with capture(execute=True):
        assert run_queued_events() == ["processed"]
    with capture(execute=True):
        assert post(RECORDING, recording_params(media)).status_code == 204
    with capture(execute=True):
        assert run_queued_events() == ["processed"]
    return Call.objects.get(provider_sid=CALL_SID)


# --- the TwiML -----------------------------------------------------------------


def test_a_business_that_does_not_record_forwards_the_call_unrecorded_and_unannounced(
    django_capture_on_commit_callbacks: Any,
) -> None:
    load(business_file("{record: false}"))
    twiml = answer(django_capture_on_commit_callbacks, incoming())
    assert "<Say" not in twiml
    assert "record=" not in twiml and "recordingStatusCallback" not in twiml
    assert f"<Number>{FORWARD_TO}</Number>" in twiml


def test_a_recorded_call_between_one_party_states_is_recorded_without_an_announcement(
    django_capture_on_commit_callbacks: Any,
) -> None:
    load(business_file())  # Texas; the caller's number is New York's
    twiml = answer(django_capture_on_commit_callbacks, incoming())
    assert "<Say" not in twiml
    dial = re.search(r"<Dial [^>]*>", twiml).group(0)
    assert 'record="record-from-answer-dual"' in dial
    assert 'recordingStatusCallback="https://backoffice.example.com/hooks/twilio/voice/recording/"' in dial
    assert 'recordingStatusCallbackEvent="completed"' in dial
    assert 'recordingStatusCallbackMethod="POST"' in dial
    assert 'action="https://backoffice.example.com/hooks/twilio/voice/status/"' in dial


@pytest.mark.parametrize(
    ("states", "params", "why"),
    [
        ("[IL]", {}, "the business operates in IL (all-party consent)"),
        ("[TX, CA]", {}, "the business operates in CA (all-party consent)"),
        ("[]", {}, "the business's states are unknown"),
        ("[TX]", {"From": "+14155550123", "Caller": "+14155550123"}, "the caller's number is from CA"),
        ("[TX]", {"FromState": "FL"}, "the caller's number is from FL"),
        ("[TX]", {"From": "anonymous", "Caller": "anonymous"}, "the caller's state is unknown"),
        ("[TX]", {"From": "+447911123456", "Caller": "+447911123456"}, "the caller's state is unknown"),
    ],
)
def test_the_announcement_comes_before_the_dial_where_all_parties_must_consent_or_nobody_can_tell(
    django_capture_on_commit_callbacks: Any, states: str, params: dict[str, str], why: str
) -> None:
    business = load(business_file(f"{{record: true, states: {states}}}"))
    call = {**incoming(), **params}
    assert recording_notice_reason(business, call, call["From"]).startswith(why)
    twiml = answer(django_capture_on_commit_callbacks, call)
    assert f"<Say>{NOTICE}</Say>" in twiml
    assert twiml.index("<Say>") < twiml.index("<Dial ")
    assert 'record="record-from-answer-dual"' in twiml


def test_the_announcement_is_the_playbooks_approved_wording_when_it_has_one(
    django_capture_on_commit_callbacks: Any,
) -> None:
    templates = """
templates:
  - key: recording_notice
    channel: voice
    approved: true
    body: "{business} records this call. Hang up now if you do not agree."
"""
    load(business_file("{record: true, states: [CA]}", templates))
    twiml = answer(django_capture_on_commit_callbacks, incoming())
    assert "<Say>Acme Heating &amp; Air records this call. Hang up now if you do not agree.</Say>" in twiml


def test_the_all_party_consent_list_and_the_callers_state() -> None:
    assert {"CA", "CT", "DE", "FL", "IL", "MD", "MA", "MI", "MT", "NV", "NH", "OR", "PA", "WA"} == (
        ALL_PARTY_CONSENT_STATES
    )
    assert caller_state({}, "+13125550100") == "IL"  # "Chicago, IL"
    assert caller_state({}, "+15035550100") == "OR"  # "Oregon"
    assert caller_state({"FromState": "tx"}, "+13125550100") == "TX"  # Twilio's own wins
    assert caller_state({}, "+447911123456") == ""


# --- the business file ------------------------------------------------------------


def test_the_business_files_calls_section_sets_recording_transcription_and_states(db: None) -> None:
    business = load(business_file("{record: true, transcription: model, states: [tx, IL, TX]}"))
    assert (business.call_recording, business.call_transcription, business.call_states) == (True, "model", ["TX", "IL"])
    # A bare `off` is YAML's false: it still means off.
    business = load(business_file("{record: true, transcription: off}"))
    assert (business.call_transcription, business.call_states) == ("off", [])
    # Left out, the section leaves the business as it is.
    business = load(business_file("{record: true}").replace("calls: {record: true}", ""))
    assert business.call_recording is True


@pytest.mark.parametrize(
    ("calls", "error"),
    [
        ("{record: true, transcription: whisper}", "bad transcription 'whisper' in calls (one of off, model)"),
        ("{record: true, states: [Texas]}", "'Texas' in calls states is not a two-letter US state code"),
        ("{record: yes please}", "'record' in calls"),
        ("{recording: true}", "unknown key 'recording' in calls"),
    ],
)
def test_a_bad_calls_section_is_refused_with_its_line(calls: str, error: str) -> None:
    with pytest.raises(BusinessFileError) as refused:
        business_file_parse(business_file(calls))
    assert error in str(refused.value)
    assert str(refused.value).startswith("line 6: ")


# --- transcription, end to end ------------------------------------------------------


def test_done_when_a_forwarded_call_with_recording_on_ends_with_a_transcript_and_a_score(
    speech: SpeechServer, twilio_media: RecordingServer, django_capture_on_commit_callbacks: Any
) -> None:
    business = load(business_file())
    speech.default = SAID
    call = forwarded_call_recorded(django_capture_on_commit_callbacks, twilio_media)
    assert call.recording_url == twilio_media.recording_url(ACCOUNT, RECORDING_SID)
    assert call.transcript == ""  # the speech to text runs after commit, in its own task

    assert run_transcriptions(django_capture_on_commit_callbacks) == ["done"]

    call.refresh_from_db()
    assert call.transcript == SAID
    assert call.score["points"] == 100 - 30 - 25 - 10
    assert [f["code"] for f in call.flags] == ["no_booking_ask", "price_promised", "ended_unbooked"]
    assert call.review_status == "pending"
    # The recording was fetched with the account's credentials and sent as it was.
    assert [s["path"] for s in twilio_media.seen] == [f"/2010-04-01/Accounts/{ACCOUNT}/Recordings/{RECORDING_SID}.mp3"]
    (sent,) = speech.posts()
    assert sent["fields"]["file"] == AUDIO
    assert sent["fields"]["model"] == b"whisper-test"
    assert sent["headers"]["authorization"] == "Bearer stt-test-key-not-secret"
    # Counted and receipted like every model call.
    model_call = ModelCall.objects.get(business=business)
    assert (model_call.purpose, model_call.status, model_call.call_id, model_call.model) == (
        "transcription",
        "ok",
        call.pk,
        "whisper-test",
    )
    assert model_call.prompt_digest and model_call.answer_digest
    receipt = Receipt.objects.get(subject=model_call.public_id)
    assert (receipt.action, receipt.reason) == ("ai.called", "openai/whisper-test transcribed the call's recording")
    actions = list(Receipt.objects.filter(subject=call.public_id).values_list("action", flat=True).order_by("pk"))
    assert actions[-3:] == ["call.recording_added", "call.transcript_added", "call.scored"]
    added = Receipt.objects.get(subject=call.public_id, action="call.transcript_added")
    assert added.after["source"] == "model"
    # Twilio retries the callback: nothing is transcribed twice.
    with django_capture_on_commit_callbacks(execute=True):
        assert post(RECORDING, recording_params(twilio_media)).status_code == 204
    assert run_queued_events() == []
    assert run_transcriptions(django_capture_on_commit_callbacks) == []
    assert len(speech.posts()) == 1


def test_without_a_speech_to_text_the_recording_is_kept_and_nothing_leaves_the_machine(
    twilio_media: RecordingServer, django_capture_on_commit_callbacks: Any
) -> None:
    load(business_file())
    call = forwarded_call_recorded(django_capture_on_commit_callbacks, twilio_media)
    assert call.recording_url and not call.transcript
    assert run_transcriptions(django_capture_on_commit_callbacks) == []
    assert not Timer.objects.filter(kind=TRANSCRIBE_KIND).exists()
    assert twilio_media.seen == []
    added = Receipt.objects.get(subject=call.public_id, action="call.recording_added")
    assert added.after["transcription"].startswith("off: no speech to text configured")


@pytest.mark.parametrize(("failure", "kind"), [(500, "provider_error"), ("stall", "timeout")])
def test_a_speech_to_text_failure_leaves_the_call_untranscribed_visible_and_retryable(
    speech: SpeechServer,
    twilio_media: RecordingServer,
    django_capture_on_commit_callbacks: Any,
    failure: str | int,
    kind: str,
) -> None:
    load(business_file())
    speech.plan = [failure]
    speech.default = SAID
    call = forwarded_call_recorded(django_capture_on_commit_callbacks, twilio_media)

    assert run_transcriptions(django_capture_on_commit_callbacks) == ["failed"]

    call.refresh_from_db()
    assert (call.transcript, call.score, call.flags) == ("", {}, [])
    model_call = ModelCall.objects.get(call=call)
    assert (model_call.status, model_call.error) == ("failed", kind)
    receipt = Receipt.objects.get(subject=model_call.public_id)
    assert receipt.action == "ai.failed"
    assert "the call stays without a transcript until its transcription is retried" in receipt.reason
    failed = Receipt.objects.get(subject=call.public_id, action="call.transcription_failed")
    assert f"gave no transcript ({kind}" in failed.reason
    timer = Timer.objects.get(kind=TRANSCRIBE_KIND)
    assert timer.status == "failed" and model_call.public_id in timer.error

    # The Timer admin's retry puts it back in line; the AI job's sweep runs it.
    assert timer_retry(timer, actor="user:mia")
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.ai_sweep()["done"] == 1
    call.refresh_from_db()
    assert call.transcript == SAID and call.score["points"] == 35


def test_a_recording_twilio_will_not_serve_fails_visibly_without_calling_the_speech_to_text(
    speech: SpeechServer, twilio_media: RecordingServer, django_capture_on_commit_callbacks: Any
) -> None:
    load(business_file())
    twilio_media.status = 404
    call = forwarded_call_recorded(django_capture_on_commit_callbacks, twilio_media)
    assert run_transcriptions(django_capture_on_commit_callbacks) == ["failed"]
    failed = Receipt.objects.get(subject=call.public_id, action="call.transcription_failed")
    assert failed.reason == "Twilio answered HTTP 404 for the recording"
    assert speech.posts() == []
    assert not ModelCall.objects.exists()


def test_the_accounts_credentials_go_to_twilio_only(
    speech: SpeechServer, twilio_media: RecordingServer, django_capture_on_commit_callbacks: Any
) -> None:
    load(business_file())
    answer(django_capture_on_commit_callbacks, incoming())
    with django_capture_on_commit_callbacks(execute=True):
        run_queued_events()
    elsewhere = "https://recordings.example.net/2010-04-01/Accounts/AC1/Recordings/RE1"
    with django_capture_on_commit_callbacks(execute=True):
        assert post(RECORDING, recording_params(twilio_media, RecordingUrl=elsewhere)).status_code == 204
    with django_capture_on_commit_callbacks(execute=True):
        run_queued_events()
    assert run_transcriptions(django_capture_on_commit_callbacks) == ["failed"]
    assert "is not on Twilio's API" in Timer.objects.get(kind=TRANSCRIBE_KIND).error
    assert twilio_media.seen == [] and speech.posts() == []


def test_transcription_counts_against_the_monthly_cap(
    speech: SpeechServer, twilio_media: RecordingServer, django_capture_on_commit_callbacks: Any
) -> None:
    load(business_file(extra="ai: {monthly_calls: 0}"))
    call = forwarded_call_recorded(django_capture_on_commit_callbacks, twilio_media)
    assert run_transcriptions(django_capture_on_commit_callbacks) == ["failed"]
    assert ModelCall.objects.get(call=call).status == "refused"
    assert speech.posts() == []
    assert Call.objects.get(pk=call.pk).transcript == ""
