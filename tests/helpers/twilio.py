"""Calls and texts as Twilio sends them: form bodies signed with twilio's own
RequestValidator, posted to the real webhook endpoints. Test modules set
PUBLIC_BASE_URL and TWILIO_AUTH_TOKEN to BASE_URL and TOKEN (the
`twilio_settings` fixture)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client
from twilio.request_validator import RequestValidator

from crm.models import Business, Source
from tests.helpers.capture import run_queued_events

BASE_URL = "https://backoffice.example.com"
TOKEN = "twilio-test-token-0123456789"
VOICE = "/hooks/twilio/voice/"
STATUS = "/hooks/twilio/voice/status/"
SMS = "/hooks/twilio/sms/"
LINE = "+13125550100"
FORWARD_TO = "+13125550199"
CALLER = "+12125550147"
CALL_SID = "CA0123456789abcdef0123456789abcdef"


@pytest.fixture
def twilio_settings(settings):
    settings.PUBLIC_BASE_URL = BASE_URL
    settings.TWILIO_AUTH_TOKEN = TOKEN


@pytest.fixture
def twilio_source(business: Business) -> Source:
    return Source.objects.create(
        business=business, key="main-line", provider="twilio", config={"phone_number": LINE, "forward_to": FORWARD_TO}
    )


def post(path: str, params: dict[str, str], *, token: str = TOKEN, signature: str | None = None, **extra):
    """POST the form body Twilio would send, signed the way Twilio signs it."""
    if signature is None:
        signature = RequestValidator(token).compute_signature(BASE_URL + path, params)
    return Client().post(
        path,
        data=urlencode(params),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_TWILIO_SIGNATURE=signature,
        **extra,
    )


def incoming(caller: str = CALLER, to: str = LINE, sid: str = CALL_SID) -> dict[str, str]:
    return {
        "AccountSid": "AC00000000000000000000000000000001",
        "ApiVersion": "2010-04-01",
        "CallSid": sid,
        "CallStatus": "ringing",
        "Direction": "inbound",
        "From": caller,
        "Caller": caller,
        "To": to,
        "Called": to,
        "CallerCity": "NEW YORK",
    }


def dial_ended(status: str, duration: int | None = None, **more: str) -> dict[str, str]:
    """The <Dial> action: how the forward to the contractor's phone ended.
    `more` may override the call's own parameters (CallSid, From…)."""
    params = {**incoming(), "CallStatus": "in-progress", "DialCallStatus": status, "DialCallSid": "CA" + "d" * 32}
    if duration is not None:
        params["DialCallDuration"] = str(duration)
    return {**params, **more}


def caller_leg_ended(status: str, duration: int, sequence: str = "3") -> dict[str, str]:
    return {
        **incoming(),
        "CallStatus": status,
        "CallDuration": str(duration),
        "CallbackSource": "call-progress-events",
        "SequenceNumber": sequence,
    }


def text_in(body: str, *, sender: str = CALLER, sid: str = "SM" + "7" * 32, **more: str) -> dict[str, str]:
    return {
        "AccountSid": "AC00000000000000000000000000000001",
        "ApiVersion": "2010-04-01",
        "MessageSid": sid,
        "SmsSid": sid,
        "From": sender,
        "To": LINE,
        "Body": body,
        "NumMedia": "0",
        **more,
    }


def deliver(django_capture_on_commit_callbacks, path: str, params: dict[str, str]):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(path, params)
    assert response.status_code == 200, response.content
    return response


def call_comes_in(django_capture_on_commit_callbacks, params: dict[str, str] | None = None):
    response = deliver(django_capture_on_commit_callbacks, VOICE, params or incoming())
    assert run_queued_events() == ["processed"]
    return response


def call_missed(django_capture_on_commit_callbacks, *, sid: str, caller: str = CALLER) -> None:
    """One call from `caller` that rings out: the call, then its Dial action
    reporting no-answer, each processed as a worker would."""
    call_comes_in(django_capture_on_commit_callbacks, incoming(caller=caller, sid=sid))
    deliver(
        django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer", CallSid=sid, From=caller, Caller=caller)
    )
    assert run_queued_events() == ["processed"]
