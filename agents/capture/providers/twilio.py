"""Twilio: incoming calls (`/hooks/twilio/voice/`), their status callbacks
(`/hooks/twilio/voice/status/`, the missed-call detector's input) and inbound
texts (`/hooks/twilio/sms/`).

Every request is checked with twilio's own RequestValidator against
PUBLIC_BASE_URL + the path and query Twilio requested (never the Host header,
which a proxy may rewrite) and every POSTed parameter, with the auth token of
the business the request is about (agents.outbound.twilio_accounts): the
business of the stored call or message a status reports on, else of the
source of the number it is addressed to, else (status callbacks only) the
business whose account `AccountSid` names; the operator's TWILIO_AUTH_TOKEN
when that business has no account of its own, or no business is known. A
request signed with one tenant's token about another tenant's number is
refused. The source is the
Twilio source whose `phone_number` is the business side of the call or text:
`To`, or `From` for the status of an outbound call. A number no active source
claims is still stored (business unknown), so nothing is lost; its processing
fails saying so, and a replay after the number is configured succeeds.

Tracking numbers are twilio sources too, one per number, each with its
`campaign` (and optional `utm_source`, `utm_medium`, `keyword`): the number
called or texted finds its source as any line's does, its calls forward to
its own `forward_to`, and the touch carries its campaign (`tracking_touch`).
The first number a person reaches is pinned as their sender (`sender_pin`),
so a missed call's text-back comes from the number they called.

Answers (TwiML, text/xml, which Twilio reads):
- voice, with the source's `forward_to`: `<Dial action="{PUBLIC_BASE_URL}/hooks/twilio/voice/status/"
  timeout="20" callerId="{caller}"><Number>{forward_to}</Number></Dial>`: the
  contractor's phone rings showing the customer's number, and the outcome comes
  back to the missed-call detector. Without `forward_to` (or for an unknown
  number) nobody can pick up: a short `<Say>` promising a call back and
  `<Hangup/>`, and the call is recorded missed at once. No voicemail: the
  call-back task is the follow-up.
- a business that records calls (`calls: {record: true}`) gets the same
  `<Dial>` with `record="record-from-answer-dual"` and its recording status
  callback (`/hooks/twilio/voice/recording/`, agents/reporting/call_scoring.py),
  after a `<Say>` of the recording notice (its `recording_notice` voice
  template, else ours) where agents/consent/recording.py says all parties
  must consent or cannot tell.
- voice status: an empty `<Response/>` (which ends the call after a `<Dial>`),
  with a short apology `<Say>` first when the forward was not answered.
- sms: an empty `<Response/>`; replies are the messaging roles' job.
- 403 JSON for a missing or bad signature (and when no auth token is set for
  it: nothing could be checked) and for a number whose source is switched off
  (like every other source), 413 over 1 MiB, 400 JSON for a signed body
  without its CallSid, MessageSid or status (stored failed, for inspection).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, QueryDict
from django.urls import path, reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from twilio.request_validator import RequestValidator
from twilio.twiml import TwiML
from twilio.twiml.messaging_response import MessagingResponse
from twilio.twiml.voice_response import VoiceResponse

from agents.capture.base import Capture
from agents.capture.identity import capture_apply
from agents.capture.missed_call import call_missed_record, call_status_record, status_update_from
from agents.capture.webhooks import WebhookError, accept, body_digest, raw_body, reject
from agents.consent.recording import recording_notice_reason
from agents.outbound.status import status_callback_process
from agents.outbound.twilio_accounts import TwilioAccount, account_by_sid, business_account, shared_account
from agents.playbook.voice_prompts import voice_prompt
from crm.locks import xact_lock
from crm.models import Business, Call, Contact, InboundEvent, Message, Provider, Source
from crm.phones import phone_to_e164
from crm.services.contact_numbers import number_refusal
from crm.services.inbound_handlers import MalformedPayload, handler_register, message_arrived
from crm.services.receipts import receipt_write

ACTOR = "agent:call_listener"
TWIML_CONTENT_TYPE = "text/xml"
DIAL_TIMEOUT_SECONDS = 20
# What the voice view told Twilio to do, kept on the stored event so that
# processing knows whether anyone could have answered.
ANSWER_HEADER = "X-LeadOps-Call-Answer"
ANSWER_MESSAGE = "message"
E164 = re.compile(r"\+[1-9]\d{6,14}")
UNANSWERED_DIAL = ("no-answer", "busy", "failed")


class UnknownNumber(LookupError):
    """No active Twilio source has this phone number."""


def source_for_number(number: str, *, include_inactive: bool = False) -> Source | None:
    if not number:
        return None
    sources = Source.objects.select_related("business").filter(provider=Provider.TWILIO, config__phone_number=number)
    if not include_inactive:
        sources = sources.filter(is_active=True)
    return sources.order_by("-is_active", "pk").first()


def business_number(params: QueryDict | dict[str, str]) -> str:
    """Our side of the call or text: `To`, except on an outbound call's status."""
    outbound = str(params.get("Direction", "")).startswith("outbound")
    return str(params.get("From" if outbound else "To", ""))


def signature_url(request: HttpRequest) -> str:
    return settings.PUBLIC_BASE_URL.rstrip("/") + request.get_full_path()


def signing_account(
    params: QueryDict, *, stored: Call | Message | None = None, source: Source | None = None, status: bool = False
) -> TwilioAccount:
    """The account whose auth token must have signed a request about
    `stored` (the call or message it reports on), else about `source`'s
    number, else — a status callback only, whose record may not be stored
    yet — about the account its `AccountSid` names; else the shared one."""
    if stored is not None:
        number = stored.from_number if stored.direction == "out" else stored.to
        return business_account(stored.business_id, number=number)
    if source is not None:
        return business_account(source.business_id, number=str((source.config or {}).get("phone_number") or ""))
    if status:
        return account_by_sid(str(params.get("AccountSid", ""))) or shared_account()
    return shared_account()


def signature_problem(request: HttpRequest, params: QueryDict, account: TwilioAccount) -> str:
    """Why the request's X-Twilio-Signature cannot be trusted under `account`, or ""."""
    token = account.auth_token
    signature = request.META.get("HTTP_X_TWILIO_SIGNATURE", "")
    if not token:
        return "TWILIO_AUTH_TOKEN is not set: no signature can be checked"  # an empty key signs anything
    if not signature:
        return "missing X-Twilio-Signature"
    if not RequestValidator(token).validate(signature_url(request), params, signature):
        whose = "the operator's TWILIO_AUTH_TOKEN" if account.shared else "the business's own Twilio auth token"
        return f"X-Twilio-Signature does not match PUBLIC_BASE_URL + path and the parameters under {whose}"
    return ""


def _verified(request: HttpRequest, *, status: bool = False) -> tuple[bytes, QueryDict, Source | None, Business | None]:
    """The raw body, its parameters, its source and its business, once the
    signature holds under that business's account."""
    body = raw_body(request)
    params = request.POST  # parsed from the body already read, so the same bytes
    source = source_for_number(business_number(params), include_inactive=True)
    stored = _stored_record(params) if status else None
    account = signing_account(params, stored=stored, source=source, status=status)
    problem = signature_problem(request, params, account)
    if problem:
        raise reject(request, provider=Provider.TWILIO, source=source, reason=problem, status=403)
    business_id = stored.business_id if stored is not None else account.business_id
    if source is not None and business_id not in (None, source.business_id):
        source = None  # the number is another business's: this request is not about it
    if source is not None and not source.is_active:
        raise WebhookError(403, "source_inactive", f"source {source.key!r} is switched off")
    if source is not None:
        return body, params, source, source.business
    business = Business.objects.filter(pk=business_id).first() if business_id else None
    return body, params, None, business


def _stored_record(params: QueryDict) -> Call | Message | None:
    """The call or outbound message a status callback reports on, if stored."""
    if params.get("CallSid"):
        return Call.objects.filter(provider_sid=params["CallSid"]).first()
    sid = params.get("MessageSid") or params.get("SmsSid", "")
    return Message.objects.filter(provider_sid=sid, direction="out").first() if sid else None


def _store(
    request: HttpRequest,
    *,
    body: bytes,
    source: Source | None,
    business: Business | None,
    kind: str,
    external_id: str,
    missing: str = "",
    extra_headers: dict[str, str] | None = None,
) -> None:
    """Store the delivery; a signed body `missing` what identifies it is
    stored failed under its digest and answered 400."""
    accept(
        request,
        provider=Provider.TWILIO,
        external_id=f"{kind}:{body_digest(body)}" if missing else external_id,
        body=body,
        source=source,
        business=business,
        kind=kind,
        malformed=f"no {missing}" if missing else "",
        extra_headers=extra_headers,
    )
    if missing:
        raise WebhookError(400, "malformed_payload", f"no {missing}")


def public_url(name: str) -> str:
    return settings.PUBLIC_BASE_URL.rstrip("/") + reverse(name)


def twiml(response: TwiML) -> HttpResponse:
    return HttpResponse(str(response), content_type=TWIML_CONTENT_TYPE)


def voice_answer(source: Source | None, params: QueryDict) -> tuple[VoiceResponse, str]:
    """The TwiML for an incoming call, and what it does (for ANSWER_HEADER)."""
    response = VoiceResponse()
    forward_to = str((source.config or {}).get("forward_to") or "").strip() if source else ""
    if source is not None and forward_to:
        forward_to = phone_to_e164(forward_to, source.business.region) or forward_to
    # However the setting got there (the admin, a shell), a call is never
    # forwarded to a number the business may not call (premium-rate, abroad).
    if source is not None and forward_to and not number_refusal(source.business, forward_to, "voice"):
        caller = params.get("From", "")
        business = source.business
        recording: dict[str, str] = {}
        if business.call_recording:
            # Before the dial: the caller hears it while they can still hang up.
            if recording_notice_reason(business, params, caller):
                response.say(voice_prompt(business, "recording_notice", {"business": business.name}))
            recording = {
                # Both legs, each on its own channel, from the moment someone picks up.
                "record": "record-from-answer-dual",
                "recording_status_callback": public_url("hook-twilio-voice-recording"),
                "recording_status_callback_method": "POST",
                "recording_status_callback_event": "completed",
            }
        dial = response.dial(
            action=public_url("hook-twilio-voice-status"),
            method="POST",
            timeout=DIAL_TIMEOUT_SECONDS,
            # The caller's own number, so the contractor sees who is calling;
            # a withheld or odd caller id is left to Twilio's default.
            caller_id=caller if E164.fullmatch(caller) else None,
            **recording,
        )
        dial.number(forward_to)
        return response, f"dial {forward_to}" + (" recorded" if recording else "")
    greeting = f"Thanks for calling {source.business.name}." if source else "Thanks for calling."
    response.say(f"{greeting} We can't take your call right now. We'll call you back shortly.")
    response.hangup()
    return response, ANSWER_MESSAGE


def after_dial_answer(params: QueryDict) -> VoiceResponse:
    response = VoiceResponse()
    if params.get("DialCallStatus") in UNANSWERED_DIAL:
        response.say("Sorry we missed your call. We'll call you back shortly.")
    return response


@csrf_exempt
@require_POST
def voice(request: HttpRequest) -> HttpResponse:
    try:
        body, params, source, business = _verified(request)
        call_sid = params.get("CallSid", "")
        response, answer = voice_answer(source, params)
        _store(
            request,
            body=body,
            source=source,
            business=business,
            kind="voice",
            external_id=f"{call_sid}:voice",
            missing="" if call_sid else "CallSid",
            extra_headers={ANSWER_HEADER: answer},
        )
    except WebhookError as exc:
        return exc.response()
    # A repeat of a stored call gets the same instructions: Twilio needs them.
    return twiml(response)


def status_external_id(params: QueryDict) -> str:
    # The Dial action and the caller's leg both end "completed": kept apart.
    dial_status = params.get("DialCallStatus", "")
    status = f"dial-{dial_status}" if dial_status else params.get("CallStatus", "")
    sequence = params.get("SequenceNumber", "")
    return f"{params.get('CallSid', '')}:status:{status}" + (f":{sequence}" if sequence else "")


@csrf_exempt
@require_POST
def voice_status(request: HttpRequest) -> HttpResponse:
    try:
        body, params, source, business = _verified(request, status=True)
        missing = ""
        if not params.get("CallSid"):
            missing = "CallSid"
        elif not (params.get("DialCallStatus") or params.get("CallStatus")):
            missing = "CallStatus"
        _store(
            request,
            body=body,
            source=source,
            business=business,
            kind="voice_status",
            external_id=status_external_id(params),
            missing=missing,
        )
    except WebhookError as exc:
        return exc.response()
    return twiml(after_dial_answer(params))


@csrf_exempt
@require_POST
def sms(request: HttpRequest) -> HttpResponse:
    try:
        body, params, source, business = _verified(request)
        message_sid = params.get("MessageSid") or params.get("SmsSid", "")
        _store(
            request,
            body=body,
            source=source,
            business=business,
            kind="sms",
            external_id=message_sid,
            missing="" if message_sid else "MessageSid",
        )
    except WebhookError as exc:
        return exc.response()
    return twiml(MessagingResponse())  # an empty <Response/> sends nothing


@csrf_exempt
@require_POST
def sms_status(request: HttpRequest) -> HttpResponse:
    """Delivery proof for our texts (agents.outbound.status processes it)."""
    try:
        body, params, source, business = _verified(request, status=True)
        sid = params.get("MessageSid") or params.get("SmsSid", "")
        status = params.get("MessageStatus") or params.get("SmsStatus", "")
        _store(
            request,
            body=body,
            source=source,
            business=business,
            kind="sms_status",
            external_id=f"{sid}:status:{status}",
            missing="" if sid and status else "MessageSid or MessageStatus",
        )
    except WebhookError as exc:
        return exc.response()
    return HttpResponse(status=204)


def form_params(event: InboundEvent) -> dict[str, str]:
    try:
        text = bytes(event.body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedPayload(f"body is not UTF-8: {exc}") from exc
    return {key: values[-1] for key, values in parse_qs(text, keep_blank_values=True).items()}


def event_source(event: InboundEvent, number: str) -> Source:
    """The event's source. An event stored before its number was configured
    finds it now and is stamped with it, so a replay then succeeds."""
    if event.source is not None:
        return event.source
    source = source_for_number(number)
    if source is None:
        raise UnknownNumber(
            f"no active Twilio source has phone_number {number!r}: add it to the business's twilio source, then replay"
        )
    if event.business_id is not None and source.business_id != event.business_id:
        # Accepted under one business's account: never filed under another's number.
        raise UnknownNumber(f"phone_number {number!r} belongs to another business than the account that signed this")
    InboundEvent.objects.filter(pk=event.pk).update(source=source, business=source.business)
    event.source, event.business = source, source.business
    return source


def tracking_touch(source: Source) -> dict[str, Any]:
    """The campaign a tracking number stands for, as touch columns: a twilio
    source's `campaign` (and optional `utm_source`, `utm_medium`, `keyword`)
    in the business file. Each tracking number is a twilio source of its own,
    so the number a person called or texted names its source and campaign."""
    config = source.config or {}
    campaign = str(config.get("campaign") or "").strip()
    utm = {
        "source": str(config.get("utm_source") or "").strip(),
        "medium": str(config.get("utm_medium") or "").strip(),
        "campaign": campaign,
        "term": str(config.get("keyword") or "").strip(),
    }
    touch: dict[str, Any] = {"utm": {k: v for k, v in utm.items() if v}}
    if campaign:
        touch["campaign_id"] = campaign
    return touch


def sender_pin(contact: Contact, source: Source, number: str) -> None:
    """A person who first reaches the business on one of its numbers is
    answered from that number: it becomes their sticky sender
    (`Contact.sticky_from_number`, which `agents.outbound.gate.sender_for`
    keeps), unless one was pinned already — one sending number per person,
    so a later call to another number changes nothing. Compare-and-set: two
    first calls at once pin one number."""
    if contact.sticky_from_number or not number or str((source.config or {}).get("phone_number")) != number:
        return
    if Contact.objects.filter(pk=contact.pk, sticky_from_number="").update(sticky_from_number=number):
        contact.sticky_from_number = number


@transaction.atomic
def call_inbound_record(*, source: Source, params: dict[str, str], event: InboundEvent, status: str) -> Call:
    """The Call row for an inbound call, with the caller's contact, lead and
    a `call` touch: made once per CallSid, by whichever of the call's events
    is processed first. A transaction-scoped advisory lock on the CallSid keeps
    two of its events from both making it."""
    call_sid = params["CallSid"]
    xact_lock(f"twilio-call:{call_sid}")
    existing = Call.objects.filter(provider_sid=call_sid).first()
    if existing is not None:
        return existing
    caller, called = params.get("From", ""), params.get("To", "")
    capture = Capture(
        channel="call",
        occurred_at=event.received_at,
        phones=[caller] if caller else [],
        touch={"provider": Provider.TWILIO, "to": called, **tracking_touch(source)},
    )
    applied = capture_apply(business=source.business, capture=capture, source=source, event=event)
    sender_pin(applied.contact, source, called)
    call = Call(
        business=source.business,
        lead=applied.lead,
        contact=applied.contact,
        direction="in",
        status=status,
        from_number=caller[:64],
        to=called[:64],
        provider_sid=call_sid,
        started_at=event.received_at,
    )
    call.full_clean()
    call.save()
    receipt_write(
        business=source.business,
        lead=applied.lead,
        subject=call.public_id,
        actor=ACTOR,
        action="call.received",
        after={"from": call.from_number, "to": call.to, "sid": call_sid, "status": status},
    )
    return call


def _process_voice(event: InboundEvent) -> str:
    params = form_params(event)
    if not params.get("CallSid"):
        raise MalformedPayload("no CallSid")
    source = event_source(event, params.get("To", ""))
    forwarded = event.headers.get(ANSWER_HEADER) != ANSWER_MESSAGE
    call = call_inbound_record(
        source=source, params=params, event=event, status="ringing" if forwarded else "in-progress"
    )
    if not forwarded:
        call_missed_record(call, reason="no forwarding number: nobody could answer", at=event.received_at)
    return InboundEvent.Status.PROCESSED


def _process_voice_status(event: InboundEvent) -> str:
    params = form_params(event)
    if not params.get("CallSid"):
        raise MalformedPayload("no CallSid")
    call = Call.objects.filter(provider_sid=params["CallSid"]).first()
    if call is not None and event.business_id is not None and call.business_id != event.business_id:
        raise MalformedPayload("the call belongs to another business than the account that signed this status")
    if call is None:
        if params.get("Direction", "inbound").startswith("outbound"):
            return InboundEvent.Status.IGNORED  # an outbound call LeadOps did not place
        # The status got here before its call was processed: make the call now.
        source = event_source(event, params.get("To", ""))
        call = call_inbound_record(source=source, params=params, event=event, status="ringing")
    call_status_record(call, status_update_from(params), at=event.received_at)
    return InboundEvent.Status.PROCESSED


def _process_sms(event: InboundEvent) -> str:
    params = form_params(event)
    message_sid = params.get("MessageSid") or params.get("SmsSid", "")
    if not message_sid:
        raise MalformedPayload("no MessageSid")
    source = event_source(event, params.get("To", ""))
    sender = params.get("From", "")
    media_count = int(params["NumMedia"]) if params.get("NumMedia", "").isdigit() else 0
    media = [params[f"MediaUrl{n}"] for n in range(media_count) if params.get(f"MediaUrl{n}")]
    capture = Capture(
        channel="sms",
        occurred_at=event.received_at,
        phones=[sender] if sender else [],
        # The whole text, keywords and all: consent reads it in a later step.
        message_body=params.get("Body", ""),
        message_sid=message_sid,
        touch={"provider": Provider.TWILIO, "to": params.get("To", ""), **tracking_touch(source)},
        answers={"media_urls": media} if media else {},
    )
    applied = capture_apply(business=source.business, capture=capture, source=source, event=event)
    sender_pin(applied.contact, source, params.get("To", ""))
    if applied.message is not None:
        # Consent reads it, a reply ends automation, and it is left for its
        # reading (agents/followup/inbound_messages.py, in this transaction).
        message_arrived(
            applied.message,
            applied.lead,
            created_lead=applied.created_lead,
            opt_out_type=params.get("OptOutType", ""),
        )
    return InboundEvent.Status.PROCESSED


handler_register(Provider.TWILIO, "voice", _process_voice)
handler_register(Provider.TWILIO, "voice_status", _process_voice_status)
handler_register(Provider.TWILIO, "sms", _process_sms)
handler_register(Provider.TWILIO, "sms_status", status_callback_process)

urlpatterns = [
    path("hooks/twilio/voice/", voice, name="hook-twilio-voice"),
    path("hooks/twilio/voice/status/", voice_status, name="hook-twilio-voice-status"),
    path("hooks/twilio/sms/", sms, name="hook-twilio-sms"),
    path("hooks/twilio/sms/status/", sms_status, name="hook-twilio-sms-status"),
]
