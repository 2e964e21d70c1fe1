"""AI Voice Follow-Up: only for eligible leads, placed through the real twilio
SDK (its HTTP transport scripted), and the TwiML we serve, signed as Twilio
signs: the approved script, 1 for the owner, 9 to stop calls, voicemail only
from the playbook."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client
from twilio.request_validator import RequestValidator

from agents.followup.sequences.engine import enrollment_start
from agents.followup.voice import voice_eligibility
from agents.outbound.dispatch import message_dispatch
from crm.models import Call, ConsentState, Enrollment, InboundEvent, Lead, Message, MessageTemplate, Receipt, Task
from crm.services.consent import consent_record
from tests.agents.outbound.fake_twilio import ScriptedTwilio, created
from tests.helpers.followup import NOON_NY, run_at

pytestmark = pytest.mark.django_db

BASE_URL = "https://backoffice.example.com"
TOKEN = "twilio-test-token-0123456789"
CALL_SID = "CA" + "c" * 32
T4 = NOON_NY + timedelta(minutes=15, days=7)  # the voice step of the no_reply path


@pytest.fixture(autouse=True)
def signed(settings: Any) -> None:
    settings.PUBLIC_BASE_URL = BASE_URL
    settings.TWILIO_AUTH_TOKEN = TOKEN
    settings.TWILIO_ACCOUNT_SID = "AC" + "0" * 32


def run_path(lead: Lead) -> Enrollment:
    enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    assert enrollment is not None
    for days in (0, 1, 3, 7):
        run_at(NOON_NY + timedelta(minutes=15, days=days))
        # Live, a text or email counts as gone out once the provider took it:
        # hand each queued one over (the voice step comes after both).
        for message in lead.messages.filter(status="queued").exclude(channel="voice"):
            assert message_dispatch(message.pk, http_client=ScriptedTwilio([created(f"SM{message.pk:032x}")])) == "sent"
    return enrollment


def call_message(lead: Lead) -> Message:
    return lead.messages.get(direction="out", channel="voice")


def twilio_post(path: str, params: dict[str, str], *, token: str = TOKEN) -> Any:
    signature = RequestValidator(token).compute_signature(BASE_URL + path, params)
    return Client().post(
        path,
        data=urlencode(params),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_TWILIO_SIGNATURE=signature,
    )


def call_params(**more: str) -> dict[str, str]:
    return {
        "CallSid": CALL_SID,
        "AccountSid": "AC" + "0" * 32,
        "From": "+13125550100",
        "To": "+12125550147",
        "CallStatus": "in-progress",
        "Direction": "outbound-api",
        "ApiVersion": "2010-04-01",
        **more,
    }


def twiml(response: Any) -> ET.Element:
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/xml")
    return ET.fromstring(response.content)  # noqa: S314 - our own answer


# --- who gets a call ---------------------------------------------------------------------------


def test_an_eligible_lead_gets_the_call_after_sms_and_email_went_unanswered(lead: Lead) -> None:
    run_path(lead)
    message = call_message(lead)
    assert message.status == "dry_run" and message.template_key == "voice_script"
    assert message.body == "Hi Pat, this is Sam from Acme Heating & Air about your request."


def test_no_call_without_voice_consent_and_its_revocation_stops_the_texts_too(lead: Lead) -> None:
    """Calls revoked: no call, and (one revocation stops every automated
    text and call) the path's texts are blocked as well; its email goes."""
    consent_record(
        contact_point=lead.contact.points.get(kind="phone"), channel="voice", granted=False, basis="manual", actor="sam"
    )
    enrollment = run_path(lead)
    assert not lead.messages.filter(channel="voice").exists()
    assert lead.messages.get(channel="sms").block_reason == "revoked"
    assert lead.messages.filter(channel="email").exclude(status="blocked").exists()
    assert Receipt.objects.filter(subject=enrollment.public_id, action="voice.skipped").exists()


def test_a_revocation_on_another_channel_leaves_no_call(lead: Lead) -> None:
    """The texts and the email went out; then the person unsubscribed from
    email: the automated call is not made either."""
    enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    assert enrollment is not None
    for days in (0, 1, 3):
        run_at(NOON_NY + timedelta(minutes=15, days=days))
        for message in lead.messages.filter(status="queued").exclude(channel="voice"):
            assert message_dispatch(message.pk, http_client=ScriptedTwilio([created(f"SM{message.pk:032x}")])) == "sent"
    email = lead.contact.points.get(kind="email")
    consent_record(contact_point=email, channel="email", granted=False, basis="unsubscribe", actor="t", at=NOON_NY)

    run_at(T4)

    assert not lead.messages.filter(channel="voice").exists()
    skipped = Receipt.objects.get(subject=enrollment.public_id, action="voice.skipped")
    assert skipped.reason.startswith("no voice consent (revoked on email")


def test_no_call_when_the_email_path_never_ran(lead: Lead) -> None:
    consent_record(
        contact_point=lead.contact.points.get(kind="email"), channel="email", granted=False, basis="manual", actor="sam"
    )
    run_path(lead)
    assert lead.messages.get(channel="email").status == "blocked"
    assert not lead.messages.filter(channel="voice").exists()


def test_a_call_due_at_night_waits_for_the_recipients_morning(lead: Lead) -> None:
    late = NOON_NY + timedelta(hours=9, minutes=30)  # 21:30 in New York
    enrollment_start(lead, "no_reply", actor="test", now=late - timedelta(minutes=15))
    for days in (0, 1, 3, 7):
        run_at(late + timedelta(days=days))
        if days < 7:
            # 08:00 the next morning: the text deferred overnight goes out (re-gated at the run's time).
            run_at(late + timedelta(days=days, hours=10, minutes=30))
    assert lead.messages.get(channel="sms").status == "dry_run"
    call = call_message(lead)
    assert call.status == "deferred" and call.deferred_until.hour == 13  # 08:00 in New York


# --- placing the call --------------------------------------------------------------------------


def test_the_call_is_placed_with_our_twiml_and_machine_detection(lead: Lead, settings: Any) -> None:
    settings.SEND_MODE = "live"
    settings.TWILIO_MESSAGING_SERVICE_SID = ""
    enrollment = run_path(lead)
    message = call_message(lead)
    assert message.status == "queued"
    twilio = ScriptedTwilio([created(CALL_SID)])

    assert message_dispatch(message.pk, http_client=twilio) == "sent"
    assert message_dispatch(message.pk, http_client=twilio) == "skipped"  # a redelivered task

    assert len(twilio.requests) == 1
    placed = twilio.requests[0]
    assert placed.url.endswith("/Calls.json")
    assert placed.data["Url"] == f"{BASE_URL}/hooks/twilio/follow-up/{message.public_id}/"
    assert placed.data["MachineDetection"] == "DetectMessageEnd"
    assert placed.data["StatusCallback"] == f"{BASE_URL}/hooks/twilio/voice/status/"
    assert "Twiml" not in placed.data
    call = Call.objects.get(provider_sid=CALL_SID)
    assert (call.direction, call.enrollment_id, call.lead_id) == ("out", enrollment.pk, lead.pk)


@pytest.mark.parametrize("status", ["queued", "sending", "unknown", "failed"])
def test_a_text_the_provider_has_not_accepted_does_not_count_as_gone_out(lead: Lead, settings: Any, status) -> None:
    settings.SEND_MODE = "live"
    settings.TWILIO_MESSAGING_SERVICE_SID = ""
    run_path(lead)
    # Rewind the text to a state the provider never confirmed (a worker died, a sweep gave up).
    lead.messages.filter(channel="sms", direction="out").update(status=status, provider_sid=None)

    assert (
        voice_eligibility(lead, now=T4) == "no automated text went out: voice comes only after the SMS and email paths"
    )


# --- the TwiML we serve --------------------------------------------------------------------------


def test_a_person_hears_the_approved_script_and_the_two_choices(lead: Lead) -> None:
    run_path(lead)
    message = call_message(lead)
    path = f"/hooks/twilio/follow-up/{message.public_id}/"
    root = twiml(twilio_post(path, call_params(AnsweredBy="human")))

    gather = root.find("Gather")
    assert gather is not None and gather.get("numDigits") == "1"
    assert gather.get("action") == f"{BASE_URL}{path}gather/"
    said = [say.text or "" for say in gather.findall("Say")]
    assert said[0] == message.body
    assert "Press 1" in said[1] and "Press 9" in said[1]
    call = Call.objects.get(provider_sid=CALL_SID)
    assert (call.outcome, call.answered_by) == ("answered", "human")
    event = InboundEvent.objects.get(kind="followup_answer")
    assert (event.status, event.signature_ok) == ("processed", True)


def test_the_calls_prompts_are_the_playbooks_approved_voice_templates_else_our_wording(lead: Lead, business) -> None:
    run_path(lead)
    path = f"/hooks/twilio/follow-up/{call_message(lead).public_id}/"
    root = twiml(twilio_post(path, call_params(AnsweredBy="human")))
    assert [say.text for say in root.iter("Say")][1:] == [
        "Press 1 to talk to Sam now. Press 9 and we will not call you again.",
        "Thank you. Goodbye.",
    ]

    def approved(key: str, body: str, *, is_approved: bool = True) -> None:
        MessageTemplate.objects.create(business=business, key=key, channel="voice", approved=is_approved, body=body)

    approved("voice_menu", "Pulse 1 para hablar con {owner_first_name}. Pulse 9 y no le llamaremos más.")
    approved("voice_goodbye", "Gracias. Adiós.")
    approved("voice_callback", "{owner_first_name} le devolverá la llamada. Adiós.")
    approved("voice_no_answer", "Nobody at {business} could pick up.", is_approved=False)  # not approved: unused
    other = "CA" + "e" * 32
    root = twiml(twilio_post(path, call_params(AnsweredBy="human", CallSid=other)))
    assert [say.text for say in root.iter("Say")][1:] == [
        "Pulse 1 para hablar con Sam. Pulse 9 y no le llamaremos más.",
        "Gracias. Adiós.",
    ]
    twiml(twilio_post(path + "gather/", call_params(Digits="1", CallSid=other)))
    after = twiml(twilio_post(path + "dial/", call_params(DialCallStatus="busy", CallSid=other)))
    assert after.findtext("Say") == "Sorry, nobody could pick up. We will call you back shortly. Goodbye."

    # A menu that no longer offers 9 (how a person stops the calls) is not said.
    MessageTemplate.objects.filter(business=business, key="voice_menu").update(body="Press 1 for {owner_first_name}.")
    third = "CA" + "f" * 32
    root = twiml(twilio_post(path, call_params(AnsweredBy="human", CallSid=third)))
    assert [say.text for say in root.iter("Say")][1] == (
        "Press 1 to talk to Sam now. Press 9 and we will not call you again."
    )


def test_pressing_9_revokes_voice_consent_at_once_and_ends_every_path(lead: Lead) -> None:
    enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    for days in (0, 1, 3):
        run_at(NOON_NY + timedelta(minutes=15, days=days))
    run_at(T4)
    message = call_message(lead)
    path = f"/hooks/twilio/follow-up/{message.public_id}/"
    twilio_post(path, call_params(AnsweredBy="human"))

    root = twiml(twilio_post(path + "gather/", call_params(Digits="9")))

    assert "no more calls" in str(root.findtext("Say")) and root.find("Hangup") is not None
    state = ConsentState.objects.get(contact_point__kind="phone", channel="voice")
    assert (state.status, state.last_event.basis) == ("revoked", "keypress")
    assert Call.objects.get(provider_sid=CALL_SID).outcome == "opted_out"
    enrollment.refresh_from_db()
    assert (enrollment.status, enrollment.stop_reason) == ("stopped", "opt_out")
    # Twilio retrying the same request records nothing twice.
    twiml(twilio_post(path + "gather/", call_params(Digits="9")))
    assert state.contact_point.consent_events.filter(channel="voice", action="revoke").count() == 1


def test_pressing_1_connects_the_owner_and_a_missed_connection_leaves_a_call_back_task(lead: Lead) -> None:
    run_path(lead)
    message = call_message(lead)
    path = f"/hooks/twilio/follow-up/{message.public_id}/"
    twilio_post(path, call_params(AnsweredBy="unknown"))

    root = twiml(twilio_post(path + "gather/", call_params(Digits="1")))
    dial = root.find("Dial")
    assert dial is not None and dial.find("Number").text == "+13125550111"  # Sam's phone
    assert dial.get("action") == f"{BASE_URL}{path}dial/"

    after = twiml(twilio_post(path + "dial/", call_params(DialCallStatus="no-answer")))
    assert "call you back" in str(after.findtext("Say"))
    task = Task.objects.get(lead=lead, kind="call_back")
    assert task.owner.user.username == "sam"
    assert Call.objects.get(provider_sid=CALL_SID).outcome == "callback_task"


def test_an_answered_connection_is_recorded_connected(lead: Lead) -> None:
    run_path(lead)
    path = f"/hooks/twilio/follow-up/{call_message(lead).public_id}/"
    twilio_post(path, call_params(AnsweredBy="human"))
    twilio_post(path + "gather/", call_params(Digits="1"))
    root = twiml(twilio_post(path + "dial/", call_params(DialCallStatus="completed")))
    assert list(root) == []
    assert Call.objects.get(provider_sid=CALL_SID).outcome == "connected"
    assert not Task.objects.filter(lead=lead, kind="call_back").exists()


def test_a_machine_gets_only_the_approved_voicemail_or_nothing(lead: Lead, business) -> None:
    run_path(lead)
    path = f"/hooks/twilio/follow-up/{call_message(lead).public_id}/"
    root = twiml(twilio_post(path, call_params(AnsweredBy="machine_end_beep")))
    assert [child.tag for child in root] == ["Hangup"]  # no approved voicemail: nothing is said
    assert Call.objects.get(provider_sid=CALL_SID).outcome == "machine_skipped"

    MessageTemplate.objects.create(
        business=business,
        key="voice_script_voicemail",
        channel="voice",
        approved=True,
        body="Hi {first_name}, {business} returning your call. Call us at {business_phone}.",
    )
    other_sid = "CA" + "d" * 32
    root = twiml(twilio_post(path, call_params(AnsweredBy="machine_end_silence", CallSid=other_sid)))
    assert root.find("Say").text == "Hi Pat, Acme Heating & Air returning your call. Call us at +13125550100."
    assert root.find("Gather") is None
    assert Call.objects.get(provider_sid=other_sid).outcome == "voicemail"


def test_bad_signatures_unknown_calls_and_missing_call_sids_are_refused(lead: Lead) -> None:
    run_path(lead)
    path = f"/hooks/twilio/follow-up/{call_message(lead).public_id}/"
    forged = twilio_post(path + "gather/", call_params(Digits="9"), token="not-the-token")
    assert forged.status_code == 403 and forged.json()["error"] == "invalid_signature"
    assert not ConsentState.objects.filter(channel="voice", status="revoked").exists()

    unknown = twilio_post("/hooks/twilio/follow-up/msg_nope/", call_params())
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_call"

    params = call_params()
    del params["CallSid"]
    missing = twilio_post(path, params)
    assert missing.status_code == 400 and missing.json() == {"error": "malformed_payload", "detail": "no CallSid"}
    assert InboundEvent.objects.get(kind="followup_answer").status == "failed"  # kept for inspection
