"""CallRail call tracking (`POST /hooks/callrail/<key>/`): its Post-Call and
Call Modified webhooks (a call to one of the contractor's CallRail tracking
numbers) and its Text Message Received webhook, all JSON, all to one URL.

Each is signed `Signature: base64(HMAC-SHA1(signing key, raw body))`, the
signing key being the CallRail company's (its Webhooks page), kept as the
source's `secret`.

What a delivery is, is read from its shape: a text has `content` (and a
thread), a call has `answered`, `duration` and the tracking number; any
other signed JSON object (a form submission) is stored and ignored.

Deduplication: a text on CallRail's `resource_id`. A call on its
`resource_id` plus what we take from it (answered, duration, recording,
transcription): the Post-Call webhook and its retries are one event, while
a Call Modified webhook that brings the recording or transcript CallRail
attached late is a new one, processed as an update of the same call (never
a second call or touch). Subscribe Post-Call and Call Modified, not Pre-Call:
a pre-call delivery says `answered: false` for every call still ringing.

Answers: 200 stored (and repeats), 401 a missing or wrong signature
(counted), 403 a source switched off, 404 an unknown key, 413 over 1 MiB,
400 a signed body we cannot read (stored failed, replayable).

A call becomes a `call` touch carrying the tracking number and CallRail's
attribution (campaign, source, keywords, landing page, gclid, utm), and a
Call row keyed by its resource id with the recording and transcript. An
unanswered call is a missed call as our own line's are
(agents/capture/missed_call.py): the call back, and the text-back where the
business has a Twilio line to text from. The transcript is stored and scored
by agents/reporting/callrail_calls.py, which registers the call handler
(call scoring sits above capture). A text becomes an inbound message on the
person's lead.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.capture.base import Capture, iso_time, json_object, split_name, truthy, utm_from
from agents.capture.identity import capture_apply
from agents.capture.missed_call import CallStatusUpdate, call_status_record
from agents.capture.webhooks import WebhookError, accept, accepted_response, body_digest, raw_body, reject, source_for
from crm.locks import xact_lock
from crm.models import Call, InboundEvent, Provider, Source
from crm.phones import phone_to_e164
from crm.services.inbound_handlers import EVENT_HANDLERS, MalformedPayload, handler_register, message_arrived
from crm.services.receipts import receipt_write

ACTOR = "agent:call_listener"
CALL, SMS, OTHER = "call", "sms", "other"
# A signed body that is not a JSON object: its kind is decided when it is read.
UNREAD = "delivery"
SMS_FIELDS = ("content", "thread_resource_id", "source_number", "destination_number")
CALL_FIELDS = ("answered", "duration", "customer_phone_number", "tracking_phone_number", "call_type", "start_time")
UNANSWERED_TYPES = ("missed", "abandoned", "voicemail", "voicemail_transcription")
# Caller ID names that name nobody: never a person's name on the contact.
NOT_A_NAME = re.compile(r"\d|\b(caller|wireless|unknown|unavailable|private|restricted|anonymous|blocked)\b", re.I)


def callrail_signature(secret: str, body: bytes) -> str:
    """The `Signature` header CallRail sends for these bytes."""
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha1).digest()).decode("ascii")


def signature_valid(secret: str, body: bytes, given: str) -> bool:
    if not secret or not given:
        return False
    return hmac.compare_digest(callrail_signature(secret, body).encode(), given.strip().encode("utf-8", "replace"))


def _text(value: Any) -> str:
    if value is None or isinstance(value, dict | list):
        return ""
    return str(value).strip()


def _first(data: dict[str, Any], *keys: str) -> str:
    return next((t for t in (_text(data.get(k)) for k in keys) if t), "")


def delivery_kind(data: dict[str, Any]) -> str:
    if any(k in data for k in SMS_FIELDS):
        return SMS
    if any(k in data for k in CALL_FIELDS):
        return CALL
    return OTHER


def _resource_id(data: dict[str, Any]) -> str:
    rid = _first(data, "resource_id", "id")
    if not rid:
        raise MalformedPayload("no resource_id")
    return rid


def _seconds(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and value >= 0:
        return int(value)
    text = _text(value)
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class TrackedCall:
    """One CallRail call, read from its webhook."""

    resource_id: str
    inbound: bool
    answered: bool
    duration: int | None
    started_at: datetime
    caller: str
    tracking_number: str
    recording_url: str
    transcript: str
    capture: Capture


def parse_call(data: dict[str, Any], *, received_at: datetime) -> TrackedCall:
    """A call webhook as a TrackedCall and its Capture. Pure."""
    rid = _resource_id(data)
    caller = _first(data, "customer_phone_number", "customer_number")
    tracking = _first(data, "tracking_phone_number", "trackingnum")
    call_type = _text(data.get("call_type")).lower()
    answered = truthy(data["answered"]) if "answered" in data else call_type not in UNANSWERED_TYPES
    started_at = iso_time(data.get("start_time") or data.get("created_at"), received_at)
    name = _text(data.get("customer_name"))
    first, last = split_name("" if NOT_A_NAME.search(name) else name)
    # CallRail's own attribution stands in where the visitor carried no utm.
    utm = utm_from(data)
    for key, fallback in (("source", "source"), ("medium", "medium"), ("campaign", "campaign"), ("term", "keywords")):
        if not utm.get(key) and _text(data.get(fallback)):
            utm[key] = _text(data.get(fallback))
    recording = _first(data, "recording_player", "recording")
    transcript = _text(data.get("transcription"))
    callrail = {
        "call_id": rid,
        "tracking_number": tracking,
        "business_number": _text(data.get("business_phone_number")),
        "source": _text(data.get("source")),
        "source_name": _text(data.get("source_name")),
        "keywords": _text(data.get("keywords")),
        "referrer": _first(data, "referrer_domain", "referring_url"),
        "call_type": call_type,
        "first_call": data.get("first_call") if isinstance(data.get("first_call"), bool) else None,
        "customer_name": name,
        "customer_city": _text(data.get("customer_city")),
        "customer_state": _text(data.get("customer_state")),
    }
    capture = Capture(
        channel="call",
        occurred_at=started_at,
        first_name=first.title() if first.isupper() else first,
        last_name=last.title() if last.isupper() else last,
        phones=[caller] if caller else [],
        touch={
            "provider": Provider.CALLRAIL,
            "to": tracking,
            "campaign_id": _text(data.get("campaign")),
            "landing_page": _text(data.get("landing_page_url")),
            "gclid": _text(data.get("gclid")),
            "fbclid": _text(data.get("fbclid")),
            "utm": utm,
        },
        answers={"callrail": {k: v for k, v in callrail.items() if v not in ("", None)}},
    )
    return TrackedCall(
        resource_id=rid,
        inbound=not _text(data.get("direction")).lower().startswith("out"),
        answered=answered,
        duration=_seconds(data.get("duration")),
        started_at=started_at,
        caller=caller,
        tracking_number=tracking,
        # Not a transcript's URL, should one ever come in its place.
        recording_url=recording if recording.startswith(("https://", "http://")) else "",
        transcript="" if transcript.startswith(("https://", "http://")) else transcript,
        capture=capture,
    )


def parse_text(data: dict[str, Any], *, received_at: datetime) -> Capture:
    """A Text Message Received webhook as a Capture with its message. Pure."""
    rid = _resource_id(data)
    sender = _first(data, "source_number", "customer_phone_number", "customer_number")
    if not sender:
        raise MalformedPayload("no source_number: nobody to file the text under")
    return Capture(
        channel="sms",
        occurred_at=iso_time(data.get("created_at") or data.get("sent_at"), received_at),
        phones=[sender],
        message_body=_first(data, "content", "message", "body"),
        # Beside Twilio's SIDs in one unique column: prefixed, never mistaken for one.
        message_sid=f"callrail:{rid}",
        touch={"provider": Provider.CALLRAIL, "to": _first(data, "destination_number", "tracking_phone_number")},
        answers={"callrail": {"message_id": rid, "thread_id": _text(data.get("thread_resource_id"))}},
    )


def _call_version(data: dict[str, Any]) -> str:
    """What of a call we keep, hashed: a retry is the same, a modification
    that brings a recording or transcript is not."""
    kept = [data.get(k) for k in ("answered", "duration", "recording", "recording_player", "transcription")]
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def delivery_id(data: dict[str, Any], body: bytes) -> tuple[str, str, str]:
    """(kind, external id, why it cannot be read or "") of a signed body."""
    kind = delivery_kind(data)
    try:
        rid = _resource_id(data)
        if kind == CALL:
            parse_call(data, received_at=timezone.now())
            return kind, f"call:{rid}:{_call_version(data)}", ""
        if kind == SMS:
            parse_text(data, received_at=timezone.now())
        return kind, f"{kind}:{rid}", ""
    except MalformedPayload as exc:
        return kind, body_digest(body), str(exc)


# ------------------------------------------------------------- processing


def _stored_source(event: InboundEvent) -> Source:
    if event.source is None:
        raise MalformedPayload("the event has no CallRail source")
    return event.source


@transaction.atomic
def _call_record(source: Source, tracked: TrackedCall, event: InboundEvent) -> Call:
    """The Call row for a CallRail call, with the caller's contact, lead and
    `call` touch: made once per resource id, whichever of its deliveries is
    processed first (an advisory lock on the id keeps two from both making it)."""
    xact_lock(f"callrail-call:{tracked.resource_id}")
    existing = Call.objects.filter(provider_sid=tracked.resource_id).first()
    if existing is not None:
        if existing.business_id != source.business_id:
            raise MalformedPayload("the call belongs to another business than this source's")
        return existing
    business = source.business
    applied = capture_apply(business=business, capture=tracked.capture, source=source, event=event)
    caller = phone_to_e164(tracked.caller, business.region) or tracked.caller
    call = Call(
        business=business,
        lead=applied.lead,
        contact=applied.contact,
        direction="in",
        status="ringing",
        from_number=caller[:64],
        to=tracked.tracking_number[:64],
        provider_sid=tracked.resource_id,
        started_at=tracked.started_at,
    )
    call.full_clean()
    call.save()
    receipt_write(
        business=business,
        lead=applied.lead,
        subject=call.public_id,
        actor=ACTOR,
        action="call.received",
        after={"from": call.from_number, "to": call.to, "sid": tracked.resource_id, "via": Provider.CALLRAIL},
    )
    return call


def callrail_call_apply(event: InboundEvent) -> tuple[Call | None, str]:
    """Record a CallRail call delivery: its Call (made once), its outcome —
    answered, or missed with its call back and text-back — and its
    recording. Returns the call and the transcript CallRail sent, for the
    caller to store and score; (None, "") for an outbound call, which brings
    no lead. Joins the caller's transaction."""
    tracked = parse_call(json_object(bytes(event.body)), received_at=event.received_at)
    if not tracked.inbound:
        return None, ""
    source = _stored_source(event)
    call = _call_record(source, tracked, event)
    had_recording = bool(call.recording_url)
    # CallRail reports the outcome once the call is over: whether the
    # business answered is the forward's outcome on our own line.
    update = CallStatusUpdate(
        status="completed" if tracked.answered else "no-answer",
        duration=tracked.duration,
        recording_url=tracked.recording_url,
        from_dial=True,
    )
    ended = tracked.started_at + timedelta(seconds=tracked.duration or 0)
    call_status_record(call, update, at=min(ended, event.received_at))
    call.refresh_from_db()
    if call.recording_url and not had_recording:
        receipt_write(
            business=call.business,
            lead=call.lead,
            subject=call.public_id,
            actor=ACTOR,
            action="call.recording_added",
            after={"recording": call.recording_url, "via": Provider.CALLRAIL, "transcript": bool(tracked.transcript)},
        )
    return call, tracked.transcript


def _process_sms(event: InboundEvent) -> str:
    data = json_object(bytes(event.body))
    if _text(data.get("direction")).lower().startswith("out"):
        return InboundEvent.Status.IGNORED  # a text the business sent from CallRail
    capture = parse_text(data, received_at=event.received_at)
    source = _stored_source(event)
    applied = capture_apply(business=source.business, capture=capture, source=source, event=event)
    if applied.message is not None:
        # Consent reads it, a reply ends automation, and it is left for its
        # reading (agents/followup/inbound_messages.py, in this transaction).
        message_arrived(applied.message, applied.lead, created_lead=applied.created_lead)
    return InboundEvent.Status.PROCESSED


def _ignore(event: InboundEvent) -> str:
    return InboundEvent.Status.IGNORED  # a form submission or another webhook we take nothing from


def _process_unread(event: InboundEvent) -> str:
    """A body stored unreadable, replayed once it can be read: processed as
    the call or text it turns out to be."""
    kind = delivery_kind(json_object(bytes(event.body)))
    handler, _ = EVENT_HANDLERS[f"{Provider.CALLRAIL}:{kind}"]
    return handler(event)


handler_register(Provider.CALLRAIL, SMS, _process_sms)
handler_register(Provider.CALLRAIL, OTHER, _ignore)
handler_register(Provider.CALLRAIL, UNREAD, _process_unread)


@csrf_exempt
@require_POST
def callrail_hook(request: HttpRequest, source_key: str) -> HttpResponse:
    try:
        source = source_for(source_key, Provider.CALLRAIL)
        body = raw_body(request)
        if not signature_valid(source.secret, body, request.META.get("HTTP_SIGNATURE", "")):
            raise reject(request, provider=Provider.CALLRAIL, source=source, reason="bad or missing Signature")
        data: dict[str, Any] = {}
        try:
            data = json_object(body)
            kind, external_id, malformed = delivery_id(data, body)
        except MalformedPayload as exc:
            kind, external_id, malformed = UNREAD, body_digest(body), str(exc)
        accepted = accept(
            request,
            provider=Provider.CALLRAIL,
            external_id=external_id,
            body=body,
            source=source,
            kind=kind,
            malformed=malformed,
        )
    except WebhookError as exc:
        return exc.response()
    if malformed:
        return JsonResponse(
            {
                "error": "malformed_payload",
                "detail": f"stored as failed, not processed: {malformed}",
                "id": accepted.event.public_id,
            },
            status=400,
        )
    return accepted_response(accepted)


urlpatterns = [
    path("hooks/callrail/<slug:source_key>/", callrail_hook, name="hook-callrail"),
]
