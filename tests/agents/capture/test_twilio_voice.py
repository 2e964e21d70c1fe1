"""Twilio calls: the TwiML answer, the Call row, and the missed-call detector."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.http import QueryDict
from django.test import Client
from django.utils import timezone
from twilio.request_validator import RequestValidator

from agents.capture.missed_call import (
    MISSED_CALL_MAX_SECONDS,
    call_status_record,
    status_update_from,
    text_back_key,
)
from agents.capture.processing import event_process, event_replay
from crm.models import Call, InboundEvent, Lead, Receipt, RejectedDelivery, Source, Task, TeamMember
from crm.services.lead_sync import lead_assign
from tests.factories import lead_create
from tests.helpers.capture import run_queued_events
from tests.helpers.twilio import (
    BASE_URL,
    CALL_SID,
    CALLER,
    FORWARD_TO,
    LINE,
    STATUS,
    TOKEN,
    VOICE,
    call_comes_in,
    caller_leg_ended,
    deliver,
    dial_ended,
    incoming,
    post,
)

pytestmark = pytest.mark.django_db

SAMPLES = Path(__file__).parent / "samples"


@pytest.fixture(autouse=True)
def _twilio_settings(twilio_settings):
    """Every request here is signed with TOKEN for BASE_URL."""


def sample(name: str) -> dict[str, str]:
    lines = (SAMPLES / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line)


def twiml_of(response) -> ET.Element:
    return ET.fromstring(response.content)  # noqa: S314 - our own answer, not outside input


def call_backs():
    """The call-back tasks: next actions that missed calls were added to."""
    return Task.objects.filter(missed_calls__isnull=False).distinct()


def test_the_published_signature_of_the_voice_status_sample_is_reproduced():
    vectors = json.loads((SAMPLES / "twilio_signature_vectors.json").read_text())
    vector = vectors["files"]["twilio_voice_status_noanswer.txt"]
    params = sample("twilio_voice_status_noanswer.txt")
    validator = RequestValidator(vectors["auth_token"])
    assert validator.compute_signature(vector["url"], params) == vector["X-Twilio-Signature"]
    # What Django parses from the wire body validates the same way.
    assert validator.validate(vector["url"], QueryDict(urlencode(params)), vector["X-Twilio-Signature"])


def test_an_incoming_call_is_forwarded_with_the_status_url_as_dial_action(
    twilio_source, django_capture_on_commit_callbacks
):
    response = deliver(django_capture_on_commit_callbacks, VOICE, incoming())

    assert response["Content-Type"].startswith("text/xml")
    root = twiml_of(response)
    dial = root.find("Dial")
    assert root.tag == "Response" and dial is not None
    assert dial.get("action") == BASE_URL + STATUS and dial.get("method") == "POST"
    assert dial.get("timeout") == "20" and dial.get("callerId") == CALLER
    assert [number.text for number in dial.findall("Number")] == [FORWARD_TO]
    event = InboundEvent.objects.get()
    assert (event.provider, event.kind, event.external_id) == ("twilio", "voice", f"{CALL_SID}:voice")
    assert (event.source, event.business) == (twilio_source, twilio_source.business)
    assert event.headers["X-Twilio-Signature"] and event.headers["X-LeadOps-Call-Answer"] == f"dial {FORWARD_TO}"


def test_an_incoming_call_from_a_new_number_opens_a_contact_lead_touch_and_call(
    twilio_source, django_capture_on_commit_callbacks
):
    call_comes_in(django_capture_on_commit_callbacks)

    lead = Lead.objects.get()
    assert list(lead.contact.points.values_list("value", flat=True)) == [CALLER]
    touch = lead.touches.get()
    assert (touch.channel, touch.provider, touch.source) == ("call", "twilio", twilio_source)
    assert touch.inbound_event == InboundEvent.objects.get()
    call = Call.objects.get()
    assert (call.lead, call.contact, call.direction, call.status) == (lead, lead.contact, "in", "ringing")
    assert (call.provider_sid, call.from_number, call.to) == (CALL_SID, CALLER, LINE)
    assert call.started_at == touch.received_at
    receipt = Receipt.objects.get(action="call.received")
    assert (receipt.subject, receipt.lead, receipt.after["sid"]) == (call.public_id, lead, CALL_SID)
    assert not call_backs().exists()


def test_a_call_from_a_known_number_is_a_touch_on_the_open_lead(
    business, twilio_source, django_capture_on_commit_callbacks
):
    lead = lead_create(business, phone=CALLER)

    call_comes_in(django_capture_on_commit_callbacks)

    assert Lead.objects.get() == lead
    assert sorted(lead.touches.values_list("channel", flat=True)) == ["call", "form"]
    assert Call.objects.get().lead == lead


def test_a_repeated_incoming_call_webhook_gets_the_same_answer_and_one_call(
    twilio_source, django_capture_on_commit_callbacks
):
    first = deliver(django_capture_on_commit_callbacks, VOICE, incoming())
    second = deliver(django_capture_on_commit_callbacks, VOICE, incoming())

    assert first.content == second.content
    assert run_queued_events() == ["processed"]
    assert InboundEvent.objects.count() == 1 and Call.objects.count() == 1


@pytest.mark.parametrize(
    "signature",
    ["", "bm90IGEgc2lnbmF0dXJl", RequestValidator("another-token").compute_signature(BASE_URL + VOICE, incoming())],
    ids=["missing", "garbage", "another-token"],
)
def test_a_bad_or_missing_signature_is_refused_with_403_and_counted(twilio_source, signature):
    response = post(VOICE, incoming(), signature=signature)

    assert response.status_code == 403
    assert response.json()["error"] == "invalid_signature"
    assert not InboundEvent.objects.exists()
    rejection = RejectedDelivery.objects.get()
    assert (rejection.provider, rejection.source, rejection.count) == ("twilio", twilio_source, 1)


def test_a_signature_over_another_host_is_refused(twilio_source):
    signature = RequestValidator(TOKEN).compute_signature("https://attacker.example" + VOICE, incoming())
    assert post(VOICE, incoming(), signature=signature).status_code == 403


def test_without_an_auth_token_every_request_is_refused(settings, twilio_source):
    settings.TWILIO_AUTH_TOKEN = ""
    response = post(VOICE, incoming(), token="")
    assert response.status_code == 403
    assert "TWILIO_AUTH_TOKEN" in response.json()["detail"]
    assert not InboundEvent.objects.exists()


def test_a_call_to_a_switched_off_line_is_answered_403_and_not_stored(twilio_source):
    Source.objects.filter(pk=twilio_source.pk).update(is_active=False)
    response = post(VOICE, incoming())
    assert response.status_code == 403 and response.json()["error"] == "source_inactive"
    assert not InboundEvent.objects.exists()


def test_a_body_over_one_mebibyte_is_refused_with_413(twilio_source):
    response = post(VOICE, {**incoming(), "Padding": "x" * (1024 * 1024)})
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"
    assert not InboundEvent.objects.exists()


def test_a_signed_call_without_a_call_sid_is_stored_failed_and_answered_400(twilio_source):
    params = {k: v for k, v in incoming().items() if k != "CallSid"}
    response = post(VOICE, params)
    assert response.status_code == 400 and response.json()["error"] == "malformed_payload"
    event = InboundEvent.objects.get()
    assert event.status == "failed" and event.error == "malformed payload: no CallSid"


def test_a_no_answer_makes_the_call_back_the_lead_owners_next_action_however_often_it_is_reported(
    business, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    lead = lead_create(business, phone=CALLER)
    lead_assign(lead, setter, actor="test", reason="setup")
    call_comes_in(django_capture_on_commit_callbacks)

    answer = deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer"))
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer"))  # Twilio retried
    # The caller's leg then completes: Twilio answered it with TwiML.
    deliver(django_capture_on_commit_callbacks, STATUS, caller_leg_ended("completed", 27))
    assert run_queued_events() == ["processed", "processed"]
    # The detector itself, handed the same outcome again (a redelivered task).
    assert (
        call_status_record(Call.objects.get(), status_update_from(dial_ended("no-answer")), at=timezone.now()) is None
    )

    task = call_backs().get()
    assert (task.lead, task.owner, task.status, task.kind) == (lead, setter, "open", "next_action")
    assert task.title.startswith(f"Call back Pat Doe ({CALLER}) (missed call at ")
    lead.refresh_from_db()
    assert lead.next_action == task.title
    missed = Receipt.objects.get(action="call.missed")
    assert missed.after["task"] == task.public_id and missed.after["owner"] == setter.user.username
    call = Call.objects.get()
    assert (call.status, call.duration_seconds) == ("no-answer", 27)
    assert twiml_of(answer).find("Say") is not None
    assert not lead.enrollments.exists()


def test_a_missed_call_on_a_lead_whose_owner_left_goes_to_the_first_active_manager(
    twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    call_comes_in(django_capture_on_commit_callbacks)
    run_queued_events()
    # The new lead's step, run with the capture, gave it to the setter; the
    # setter leaves before the call ends.
    assert Lead.objects.get().owner == setter
    TeamMember.objects.filter(pk=setter.pk).update(is_active=False)
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("busy"))
    run_queued_events()

    task = call_backs().get()
    assert task.owner == manager and task.lead == Lead.objects.get()


def test_a_completed_forty_second_call_is_not_missed(twilio_source, manager, django_capture_on_commit_callbacks):
    call_comes_in(django_capture_on_commit_callbacks)
    answer = deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("completed", 40))
    deliver(django_capture_on_commit_callbacks, STATUS, caller_leg_ended("completed", 46))
    assert run_queued_events() == ["processed", "processed"]

    assert not call_backs().exists()
    assert not Receipt.objects.filter(action="call.missed").exists()
    call = Call.objects.get()
    assert (call.status, call.duration_seconds) == ("completed", 40)
    assert twiml_of(answer).find("Say") is None
    # Someone answered the forwarded call: the lead's first human contact (speed to lead).
    lead = Lead.objects.get()
    assert lead.first_response_at is not None and lead.speed_to_lead_seconds is not None
    assert Receipt.objects.get(lead=lead, action="lead.first_contact").reason == f"answered call {call.public_id}"


def test_a_completed_two_second_call_is_missed(twilio_source, manager, django_capture_on_commit_callbacks):
    call_comes_in(django_capture_on_commit_callbacks)
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("completed", 2))
    run_queued_events()

    assert MISSED_CALL_MAX_SECONDS > 2
    task = call_backs().get()
    assert task.owner == manager
    assert "under 5 s" in Receipt.objects.get(action="call.missed").reason


@pytest.mark.parametrize(
    ("status", "duration", "recording", "missed"),
    [
        ("no-answer", None, "", True),
        ("busy", None, "", True),
        ("failed", None, "", True),
        ("canceled", None, "", True),
        ("completed", MISSED_CALL_MAX_SECONDS - 1, "", True),
        ("completed", MISSED_CALL_MAX_SECONDS, "", False),
        ("completed", 2, "https://api.twilio.com/2010-04-01/Accounts/AC1/Recordings/RE1", False),
    ],
)
def test_how_a_forward_ends_decides_whether_the_call_was_missed(
    twilio_source, manager, django_capture_on_commit_callbacks, status, duration, recording, missed
):
    call_comes_in(django_capture_on_commit_callbacks)
    extra = {"RecordingUrl": recording} if recording else {}
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended(status, duration, **extra))
    run_queued_events()

    assert call_backs().exists() is missed
    assert Call.objects.get().recording_url == recording


def test_a_call_without_a_forwarding_number_gets_a_message_and_is_recorded_missed(
    twilio_source, manager, django_capture_on_commit_callbacks
):
    twilio_source.config = {"phone_number": LINE}
    twilio_source.save(update_fields=["config"])

    response = call_comes_in(django_capture_on_commit_callbacks)
    root = twiml_of(response)
    assert root.find("Dial") is None and root.find("Hangup") is not None
    assert twilio_source.business.name in root.findtext("Say", "")
    # The caller heard the message for nine seconds: still nobody answered.
    deliver(django_capture_on_commit_callbacks, STATUS, caller_leg_ended("completed", 9))
    run_queued_events()

    task = call_backs().get()
    assert task.owner == manager
    assert Receipt.objects.get(action="call.missed").reason == "no forwarding number: nobody could answer"
    assert (Call.objects.get().status, Call.objects.get().duration_seconds) == ("completed", 9)


def test_a_second_missed_call_from_the_same_person_is_added_to_the_open_call_back(
    twilio_source, manager, django_capture_on_commit_callbacks
):
    for sid in ("CA" + "1" * 32, "CA" + "2" * 32):
        call_comes_in(django_capture_on_commit_callbacks, incoming(sid=sid))
        deliver(django_capture_on_commit_callbacks, STATUS, {**dial_ended("no-answer"), "CallSid": sid})
        run_queued_events()

    task = call_backs().get()
    receipts = Receipt.objects.filter(action="call.missed")
    assert receipts.count() == 2 and {r.after["task"] for r in receipts} == {task.public_id}
    assert "called 2 times" in task.title and task.status == "open"


def test_a_status_processed_before_its_call_still_records_one_call_and_one_miss(
    twilio_source, manager, django_capture_on_commit_callbacks
):
    deliver(django_capture_on_commit_callbacks, VOICE, incoming())
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer"))
    status_event = InboundEvent.objects.get(kind="voice_status")

    assert event_process(status_event.pk) == "processed"
    # Only the call is left for the intake loop: the status is processed.
    assert run_queued_events() == ["processed"]

    call = Call.objects.get()
    assert call.status == "no-answer" and call.lead == Lead.objects.get()
    assert call.lead.touches.count() == 1
    assert call_backs().count() == 1


def test_a_call_to_an_unknown_number_is_kept_and_fails_until_the_number_is_configured(
    business, manager, django_capture_on_commit_callbacks
):
    other_line = "+13125550111"
    response = deliver(django_capture_on_commit_callbacks, VOICE, incoming(to=other_line))
    assert twiml_of(response).find("Say") is not None
    event = InboundEvent.objects.get()
    assert (event.business, event.source) == (None, None)
    assert run_queued_events() == ["failed"]
    event.refresh_from_db()
    assert "UnknownNumber" in event.error and other_line in event.error
    assert not Lead.objects.exists()

    source = Source.objects.create(
        business=business, key="second-line", provider="twilio", config={"phone_number": other_line}
    )
    assert event_replay(event) == "processed"
    event.refresh_from_db()
    assert (event.business, event.source) == (business, source)
    assert Call.objects.get().lead == Lead.objects.get()


def test_an_outbound_calls_no_answer_is_not_a_missed_call(twilio_source, django_capture_on_commit_callbacks):
    # The published sample: our own outbound call (From is the business line) that went unanswered.
    deliver(django_capture_on_commit_callbacks, STATUS, sample("twilio_voice_status_noanswer.txt"))

    event = InboundEvent.objects.get()
    assert event.external_id == "CA00000000000000000000000000000031:status:no-answer:0"
    assert run_queued_events() == ["ignored"]
    assert not Task.objects.exists() and not Call.objects.exists()


def test_an_inactive_lead_owner_hands_the_call_back_to_the_manager(
    business, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    lead = lead_create(business, phone=CALLER)
    lead_assign(lead, setter, actor="test", reason="setup")
    TeamMember.objects.filter(pk=setter.pk).update(is_active=False)
    call_comes_in(django_capture_on_commit_callbacks)
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer"))
    run_queued_events()

    assert call_backs().get().owner == manager


def test_an_operator_replays_failed_events_from_the_admin(business, manager, django_capture_on_commit_callbacks):
    # An event for a number no business has configured belongs to no tenant
    # yet: only operators (superusers) see it, never another business's staff.
    from django.urls import reverse

    from tests.factories import UserFactory

    other_line = "+13125550122"
    deliver(django_capture_on_commit_callbacks, VOICE, incoming(to=other_line))
    assert run_queued_events() == ["failed"]
    event = InboundEvent.objects.get()
    staff = Client()
    staff.force_login(manager.user)
    assert event.public_id not in staff.get(reverse("admin:crm_inboundevent_changelist")).content.decode()
    admin = Client()
    admin.force_login(UserFactory.create(username="operator", is_superuser=True))
    listing = admin.get(reverse("admin:crm_inboundevent_changelist") + "?status__exact=failed")
    assert event.public_id in listing.content.decode()

    Source.objects.create(business=business, key="line-2", provider="twilio", config={"phone_number": other_line})
    for _ in range(2):  # the second replay finds nothing failed: no second lead, no second call
        admin.post(reverse("admin:crm_inboundevent_changelist"), {"action": "replay", "_selected_action": [event.pk]})
    event.refresh_from_db()
    assert (event.status, event.attempts) == ("processed", 2)
    assert Lead.objects.count() == 1 and Call.objects.count() == 1


def test_a_business_that_opts_in_texts_a_missed_caller_back_once_keyed_by_caller_and_window(
    business, twilio_source, manager, django_capture_on_commit_callbacks
):
    from crm.models import Message, MessageTemplate

    business.missed_call_text_back = True
    business.save()
    MessageTemplate.objects.create(
        business=business,
        key="missed_call_sms",
        channel="sms",
        approved=True,
        body="Sorry we missed your call to {business}. Reply STOP to opt out.",
    )
    call_comes_in(django_capture_on_commit_callbacks)
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer"))
    deliver(django_capture_on_commit_callbacks, STATUS, caller_leg_ended("completed", 27))
    run_queued_events()
    (text_back,) = Message.objects.filter(direction="out")
    call = Call.objects.select_related("contact").get()
    assert call.contact is not None
    assert text_back.idempotency_key == text_back_key(business, call.contact, call.started_at)
    assert text_back.idempotency_key.startswith(f"missed-call-text:{business.public_id}:{call.contact.public_id}:")
    assert text_back.body == f"Sorry we missed your call to {business.name}. Reply STOP to opt out."
    # The call is the conversation that allows the reply; the hour decides now or at opening time.
    assert (text_back.status, text_back.block_reason) in (("dry_run", ""), ("deferred", "quiet_hours"))


def test_without_the_opt_in_a_missed_call_sends_no_text(
    business, twilio_source, manager, django_capture_on_commit_callbacks
):
    from crm.models import Message

    call_comes_in(django_capture_on_commit_callbacks)
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer"))
    run_queued_events()
    assert call_backs().count() == 1
    assert not Message.objects.filter(direction="out").exists()
