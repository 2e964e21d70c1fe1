"""The Reply Logger: a reply on any channel ends automation for the person at
once, lands in the lead's conversation and hands the owner the conversation."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client
from twilio.request_validator import RequestValidator

from agents.followup.replies import reply_record
from agents.followup.sequences.engine import enrollment_start
from agents.orchestrator import orchestrate_pending
from crm.models import Business, Lead, Message, Receipt, Source, Stage, Task
from tests.agents.capture.test_meta import APP_SECRET, sign
from tests.helpers.capture import run_queued_events
from tests.helpers.followup import LINE, NOON_NY, PHONE, run_at

pytestmark = pytest.mark.django_db

BASE_URL = "https://backoffice.example.com"
TOKEN = "twilio-test-token-0123456789"
T1 = NOON_NY + timedelta(minutes=15)


@pytest.fixture(autouse=True)
def signed(settings: Any) -> None:
    settings.PUBLIC_BASE_URL = BASE_URL
    settings.TWILIO_AUTH_TOKEN = TOKEN
    settings.META_APP_SECRET = APP_SECRET


def text_in(body: str, sid: str) -> int:
    params = {
        "MessageSid": sid,
        "AccountSid": "AC" + "1" * 32,
        "From": PHONE,
        "To": LINE,
        "Body": body,
        "NumMedia": "0",
        "SmsStatus": "received",
        "ApiVersion": "2010-04-01",
    }
    signature = RequestValidator(TOKEN).compute_signature(BASE_URL + "/hooks/twilio/sms/", params)
    response = Client().post(
        "/hooks/twilio/sms/",
        data=urlencode(params),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_TWILIO_SIGNATURE=signature,
    )
    return response.status_code


def test_a_text_reply_ends_the_path_and_the_owner_takes_over(lead: Lead, django_capture_on_commit_callbacks) -> None:
    enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    run_at(T1)  # the nudge went out

    with django_capture_on_commit_callbacks(execute=True):
        assert text_in("Yes, Thursday morning works", "SM" + "a" * 32) == 200
    assert run_queued_events() == ["processed"]

    enrollment.refresh_from_db()
    assert (enrollment.status, enrollment.stop_reason) == ("stopped", "reply")  # at once, before any step
    reply = lead.messages.get(direction="in")
    assert reply.body == "Yes, Thursday morning works"  # in the lead's conversation, after our nudge
    assert list(lead.messages.order_by("pk").values_list("direction", flat=True)) == ["out", "in"]

    orchestrate_pending()
    task = Task.objects.get(lead=lead, kind="take_over")
    assert task.owner.user.username == "sam" and "Thursday morning" in task.title
    lead.refresh_from_db()
    assert lead.stage == Stage.ENGAGED
    assert Receipt.objects.filter(lead=lead, action="orchestrator.step", reason="reply").exists()

    run_at(T1 + timedelta(days=30))
    assert lead.messages.filter(direction="out").count() == 1  # nothing automated after the reply

    # The same text delivered again changes nothing.
    with django_capture_on_commit_callbacks(execute=True):
        assert text_in("Yes, Thursday morning works", "SM" + "a" * 32) == 200
    run_queued_events()
    orchestrate_pending()
    assert Task.objects.filter(lead=lead, kind="take_over").count() == 1


def test_stop_ends_every_path_of_the_person_as_an_opt_out(lead: Lead, django_capture_on_commit_callbacks) -> None:
    enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    with django_capture_on_commit_callbacks(execute=True):
        assert text_in("STOP", "SM" + "b" * 32) == 200
    run_queued_events()
    enrollment.refresh_from_db()
    assert (enrollment.status, enrollment.stop_reason) == ("stopped", "opt_out")
    orchestrate_pending()
    assert not Task.objects.filter(lead=lead, kind="take_over").exists()  # they asked us to stop, not to talk
    run_at(T1)
    assert not lead.messages.filter(direction="out", enrollment=enrollment).exists()


def test_an_instagram_dm_reply_ends_the_path_too(
    business: Business, lead: Lead, django_capture_on_commit_callbacks
) -> None:
    Source.objects.create(business=business, key="ig", provider="instagram", config={"account_id": "17841400000000001"})
    from crm.models import ContactPoint

    ContactPoint.objects.create(business=business, contact=lead.contact, kind="instagram", value="1122334455667788")
    enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    body = json.dumps(
        {
            "object": "instagram",
            "entry": [
                {
                    "id": "17841400000000001",
                    "time": 1773500700000,
                    "messaging": [
                        {
                            "sender": {"id": "1122334455667788"},
                            "recipient": {"id": "17841400000000001"},
                            "timestamp": 1773500700000,
                            "message": {"mid": "mid.reply.1", "text": "Can you come Friday?"},
                        }
                    ],
                }
            ],
        }
    ).encode()
    with django_capture_on_commit_callbacks(execute=True):
        response = Client().post(
            "/hooks/meta/", body, content_type="application/json", HTTP_X_HUB_SIGNATURE_256=sign(body)
        )
    assert response.status_code == 200
    run_queued_events()
    enrollment.refresh_from_db()
    assert (enrollment.status, enrollment.stop_reason) == ("stopped", "reply")
    assert lead.messages.filter(direction="in", channel="dm", body="Can you come Friday?").exists()


def test_an_email_reply_logged_by_a_person_ends_the_path(lead: Lead) -> None:
    enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    message = reply_record(lead, channel="email", body="Call me after 5", actor="sam", sender="pat@example.com")
    assert (message.direction, message.status, message.contact_point.kind) == ("in", "received", "email")
    enrollment.refresh_from_db()
    assert enrollment.stop_reason == "reply"
    orchestrate_pending()
    assert Task.objects.filter(lead=lead, kind="take_over", status="open").count() == 1
    assert Message.objects.filter(lead=lead, direction="in").count() == 1
