"""Calendly webhooks (`/hooks/calendly/<key>/`): invitee created, canceled and
no-show, each linked to its lead by the Booking Matcher.

Authentication: `Calendly-Webhook-Signature: t=<unix seconds>,v1=<hex>`, the
lowercase hex HMAC-SHA256 of `t + "." + raw body` with the signing key (the
source's secret, else `CALENDLY_SIGNING_KEY`). The signature is compared in
constant time first, then the timestamp must be within 3 minutes of now
(Calendly's own example), so a captured delivery cannot be replayed later.

Answers: 200 stored (and a repeat: Calendly has no event id, so a delivery is
known by its event and the invitee's URI); 400 a signed body we cannot read
(stored failed, for inspection and replay); 401 a missing, wrong or stale
signature (counted, nothing stored); 403/404 the source; 413.

Processing (one transaction per event) is booking's, which owns appointments
(agents/booking/calendly.py registers it); this module stores and parses:
- `invitee.created`: the matched lead is booked (`appointment_record_external`:
  stage, reminders, brief, nurture stop; no confirmation, Calendly sent one).
  A reschedule's new booking names the old one (`old_invitee`) and links to it.
  No match → an exception for the manager.
- `invitee.canceled`: the appointment is canceled (`appointment_cancel`, the
  lead's owner gets a rebooking task) — or, when Calendly says it was
  rescheduled, only its place is freed and the lead stays booked.
- `invitee_no_show.created`: No-Show Recovery (`no_show_record`). Both
  published shapes are read: the invitee with `no_show` filled, or an
  InviteeNoShow (`{uri, invitee, created_at}`).
- `invitee_no_show.deleted` (a no-show taken back) and other subscriptions are stored and ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.capture.base import json_object
from agents.capture.webhooks import (
    WebhookError,
    accept,
    accepted_response,
    body_digest,
    json_error,
    raw_body,
    reject,
    source_for,
)
from crm.models import Provider, Source
from crm.services.inbound_handlers import MalformedPayload

CREATED = "invitee.created"
CANCELED = "invitee.canceled"
NO_SHOW = "invitee_no_show.created"
NO_SHOW_DELETED = "invitee_no_show.deleted"
IGNORED_KINDS = (NO_SHOW_DELETED, "routing_form_submission.created")
TOLERANCE_SECONDS = 180
PHONE_QUESTION = ("phone", "mobile", "cell", "number")


def calendly_signature(signing_key: str, body: bytes, timestamp: int) -> str:
    """The `Calendly-Webhook-Signature` value Calendly sends for these bytes at `timestamp`."""
    digest = hmac.new(signing_key.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def signature_problem(header: str, body: bytes, signing_key: str, *, now: float | None = None) -> str:
    """Why the header does not authenticate the body ("" when it does)."""
    if not signing_key:
        return "no Calendly signing key is configured"
    timestamp, given = None, []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == "v1" and value:
            given.append(value)
    if timestamp is None or not given:
        return "missing or malformed Calendly-Webhook-Signature"
    expected = calendly_signature(signing_key, body, timestamp).split("v1=", 1)[1]
    if not any(hmac.compare_digest(expected.encode(), v.encode()) for v in given):
        return "Calendly-Webhook-Signature does not match the body"
    age = (time.time() if now is None else now) - timestamp
    if abs(age) > TOLERANCE_SECONDS:
        return f"stale Calendly-Webhook-Signature: signed {int(age)} s ago (tolerance {TOLERANCE_SECONDS} s)"
    return ""


# --- parsing ------------------------------------------------------------------


@dataclass
class Invitee:
    """The parts of a Calendly invitee the matcher and the booking need."""

    uri: str
    name: str = ""
    emails: list[str] = field(default_factory=list)
    phones: list[str] = field(default_factory=list)
    tracking: dict[str, str] = field(default_factory=dict)
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    event_name: str = ""
    location: str = ""
    host_emails: list[str] = field(default_factory=list)
    answers: list[tuple[str, str]] = field(default_factory=list)
    rescheduled: bool = False
    old_invitee: str = ""
    cancel_reason: str = ""
    canceled_by: str = ""

    def label(self) -> str:
        who = self.name or "someone"
        email = f" <{self.emails[0]}>" if self.emails else ""
        when = f" for {self.starts_at:%Y-%m-%d %H:%M} UTC" if self.starts_at else ""
        return f"{who}{email}{when}"


def _dict(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedPayload(f"{where} is not an object")
    return value


def _str(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _time(event: dict[str, Any], key: str) -> datetime | None:
    raw = event.get(key)
    if raw is None:
        return None
    try:
        parsed = parse_datetime(raw) if isinstance(raw, str) else None
    except ValueError:
        parsed = None
    if parsed is None or timezone.is_naive(parsed):
        raise MalformedPayload(f"payload.scheduled_event.{key} is not an ISO 8601 time with a zone: {raw!r}")
    return parsed


def invitee_parse(data: dict[str, Any]) -> tuple[str, Invitee]:
    """(event kind, invitee) of a delivery. Pure; MalformedPayload for a body
    that is not a Calendly webhook."""
    kind = _str(data.get("event"))
    if not kind:
        raise MalformedPayload("no 'event'")
    payload = _dict(data.get("payload"), "payload")
    if not payload:
        raise MalformedPayload("no 'payload' object")
    if isinstance(payload.get("invitee"), str):
        # The InviteeNoShow shape: only the invitee's URI.
        return kind, Invitee(uri=_str(payload["invitee"]))
    uri = _str(payload.get("uri"))
    if not uri:
        raise MalformedPayload("payload.uri is missing")
    event = _dict(payload.get("scheduled_event"), "payload.scheduled_event")
    location = _dict(event.get("location"), "payload.scheduled_event.location")
    cancellation = _dict(payload.get("cancellation") or event.get("cancellation"), "payload.cancellation")
    answers: list[tuple[str, str]] = []
    phones = [_str(payload.get("text_reminder_number"))]
    for item in payload.get("questions_and_answers") or []:
        if isinstance(item, dict) and _str(item.get("answer")):
            question, answer = _str(item.get("question")), _str(item.get("answer"))
            answers.append((question, answer))
            if any(word in question.lower() for word in PHONE_QUESTION):
                phones.append(answer)
    if location.get("type") == "outbound_call":
        phones.append(_str(location.get("location")))  # the host calls the invitee on this number
    members = [m for m in event.get("event_memberships") or [] if isinstance(m, dict)]
    tracking = {k: _str(v) for k, v in _dict(payload.get("tracking"), "payload.tracking").items() if _str(v)}
    starts, ends = _time(event, "start_time"), _time(event, "end_time")
    name = _str(payload.get("name")) or " ".join(
        p for p in (_str(payload.get("first_name")), _str(payload.get("last_name"))) if p
    )
    return kind, Invitee(
        uri=uri,
        name=name,
        emails=[e for e in [_str(payload.get("email"))] if e],
        phones=[p for p in dict.fromkeys(phones) if p],
        tracking=tracking,
        starts_at=starts,
        ends_at=ends,
        event_name=_str(event.get("name")),
        location=_str(location.get("location")) or _str(location.get("join_url")),
        host_emails=[_str(m.get("user_email")).lower() for m in members if _str(m.get("user_email"))],
        answers=answers,
        rescheduled=payload.get("rescheduled") is True,
        old_invitee=_str(payload.get("old_invitee")),
        cancel_reason=_str(cancellation.get("reason")),
        canceled_by=" ".join(
            p for p in (_str(cancellation.get("canceled_by")), _str(cancellation.get("canceler_type"))) if p
        ),
    )


# --- processing ---------------------------------------------------------------


# --- the endpoint ---------------------------------------------------------------


def _delivery_id(data: dict[str, Any], body: bytes) -> tuple[str, str]:
    """(kind, external id): Calendly sends no event id, so the event and the
    resource's URI name a delivery (the body's digest when unreadable)."""
    kind = _str(data.get("event"))[:64]
    payload = data.get("payload") if isinstance(data.get("payload"), dict) else {}
    uri = _str(payload.get("uri")) if isinstance(payload, dict) else ""
    if kind and uri:
        return kind, f"{kind}:{uri}"
    return kind or "unreadable", body_digest(body)


def _signing_key(source: Source) -> str:
    return source.secret or settings.CALENDLY_SIGNING_KEY


@csrf_exempt
@require_POST
def calendly_webhook(request: HttpRequest, source_key: str) -> HttpResponse:
    try:
        source = source_for(source_key, Provider.CALENDLY)
        body = raw_body(request)
        problem = signature_problem(request.META.get("HTTP_CALENDLY_WEBHOOK_SIGNATURE", ""), body, _signing_key(source))
        if problem:
            raise reject(request, provider=Provider.CALENDLY, source=source, reason=problem)
        malformed, data = "", {}
        try:
            data = json_object(body)
            invitee_parse(data)
        except MalformedPayload as exc:
            malformed = str(exc)
        kind, external_id = _delivery_id(data, body)
        accepted = accept(
            request,
            provider=Provider.CALENDLY,
            external_id=external_id,
            body=body,
            source=source,
            kind=kind,
            malformed=malformed,
        )
    except WebhookError as exc:
        return exc.response()
    if malformed and not accepted.duplicate:
        return json_error(400, "malformed_payload", f"stored as failed ({accepted.event.public_id}): {malformed}")
    return accepted_response(accepted)


urlpatterns = [
    path("hooks/calendly/<slug:source_key>/", calendly_webhook, name="hook-calendly"),
]
