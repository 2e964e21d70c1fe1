"""Inbound texts that change consent, through the real SMS webhook."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client
from twilio.request_validator import RequestValidator

from agents.capture.processing import event_process
from agents.consent.keywords import read_text
from approvals.models import ApprovalRequest
from crm.models import ConsentState, Contact, InboundEvent, Lead, Message, Source

pytestmark = pytest.mark.django_db

TOKEN = "kw-token"
BASE = "https://backoffice.example.com"
PATH = "/hooks/twilio/sms/"
LINE = "+13125550100"
PERSON = "+12125550147"


@pytest.fixture(autouse=True)
def twilio(settings, business):
    settings.TWILIO_AUTH_TOKEN = TOKEN
    settings.PUBLIC_BASE_URL = BASE
    Source.objects.create(business=business, key="line", provider="twilio", config={"phone_number": LINE})


_sids = iter(range(10_000))


def text(body: str, **more: str) -> str:
    params = {"MessageSid": f"SM{next(_sids):032d}", "From": PERSON, "To": LINE, "Body": body, **more}
    signature = RequestValidator(TOKEN).compute_signature(BASE + PATH, params)
    response = Client().post(
        PATH, urlencode(params), content_type="application/x-www-form-urlencoded", HTTP_X_TWILIO_SIGNATURE=signature
    )
    assert response.status_code == 200
    return event_process(InboundEvent.objects.order_by("-pk").first().pk)


def sms_consent() -> str:
    state = ConsentState.objects.filter(contact_point__value=PERSON, channel="sms").first()
    return state.status if state else "unknown"


def replies() -> list[Message]:
    return list(Message.objects.filter(direction="out").order_by("pk"))


@pytest.mark.parametrize("word", ["STOP", "stopall", " Unsubscribe ", "CANCEL", "end", "Quit", "REVOKE", "optout"])
def test_each_opt_out_keyword_revokes_and_is_confirmed_once(word):
    assert text(word) == "processed"
    assert sms_consent() == "revoked"
    (reply,) = replies()
    assert "unsubscribed" in reply.body and reply.status == "dry_run"


@pytest.mark.parametrize("word", ["START", "yes", "Unstop"])
def test_each_opt_in_keyword_grants_again(word):
    text("STOP")
    text(word)
    assert sms_consent() == "granted"
    assert [("unsubscribed" in r.body, "resubscribed" in r.body) for r in replies()] == [(True, False), (False, True)]


@pytest.mark.parametrize("word", ["HELP", "info"])
def test_help_keywords_get_help_and_change_no_consent(word):
    text(word)
    assert sms_consent() == "unknown"
    assert "Reply STOP" in replies()[0].body


def test_when_twilio_already_answered_we_record_and_stay_silent():
    text("STOP", OptOutType="STOP")
    assert sms_consent() == "revoked"
    assert replies() == []


def test_a_replayed_stop_sends_no_second_confirmation():
    text("STOP")
    event = InboundEvent.objects.get()
    InboundEvent.objects.filter(pk=event.pk).update(status="failed")
    assert event_process(event.pk) == "processed"
    assert len(replies()) == 1


def test_a_keyword_inside_a_sentence_is_not_a_keyword():
    assert read_text("Stop by on Tuesday?").kind == ""
    text("Please stop by Tuesday")
    assert sms_consent() == "unknown" and replies() == []


@pytest.mark.parametrize(
    "body",
    [
        "please stop texting me",
        "Take me off your list",
        "no more messages!",
        "Don't text me again",
        "por favor no me escriban más",
        "dejen de enviar mensajes",
        "No quiero más mensajes",
    ],
)
def test_free_text_revocations_are_recorded_paused_and_confirmed_once(body):
    text(body)
    contact = Contact.objects.get()
    assert contact.automation_paused
    # Treated as a stop at once: the ledger says revoked, and the one
    # confirmation goes out — no question to a person, no silence.
    assert sms_consent() == "revoked"
    (reply,) = replies()
    assert reply.body.endswith("You won't get more texts from us. Reply START to resume.")
    assert not ApprovalRequest.objects.filter(kind="opt_out_question").exists()


@pytest.mark.parametrize("body", ["This is harassment", "I'm reporting you to the FCC", "esto es acoso"])
def test_complaints_put_the_lead_on_hold_and_ask_a_person(body):
    text(body)
    lead = Lead.objects.get()
    assert lead.hold and "complaint" in lead.exceptions
    assert ApprovalRequest.objects.filter(kind="complaint").count() == 1
