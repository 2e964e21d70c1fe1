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

Processing (one transaction per event):
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

from agents.booking.matcher import UNMATCHED, booking_exception, booking_exception_resolve, booking_match
from agents.booking.no_show import no_show_record
from agents.booking.services import (
    HOLDING,
    BookingError,
    appointment_cancel,
    appointment_record_external,
    appointment_release_rescheduled,
)
from agents.capture.base import json_object
from agents.capture.processing import event_process
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
from crm.models import Appointment, Business, ExceptionItem, InboundEvent, Provider, Source, TeamMember
from crm.services.inbound_handlers import MalformedPayload, handler_register

CREATED = "invitee.created"
CANCELED = "invitee.canceled"
NO_SHOW = "invitee_no_show.created"
NO_SHOW_DELETED = "invitee_no_show.deleted"
IGNORED_KINDS = (NO_SHOW_DELETED, "routing_form_submission.created")
TOLERANCE_SECONDS = 180
ACTOR = "agent:booking_matcher"
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


def _event_invitee(event: InboundEvent) -> Invitee:
    _kind, invitee = invitee_parse(json_object(bytes(event.body)))
    return invitee


def _appointment(business_id: int, invitee_uri: str) -> Appointment | None:
    """The business's appointment of an invitee: an event accepted on one
    business's source never reaches another's visits, whatever invitee it
    names."""
    return (
        Appointment.objects.select_related("lead__business", "lead__contact")
        .filter(provider=Provider.CALENDLY, external_id=invitee_uri, business_id=business_id)
        .first()
    )


def _booking_of(event: InboundEvent, invitee_uri: str) -> Appointment | None:
    """The appointment of an invitee in the event's business, recording its
    booking first when that delivery is stored but not processed yet:
    Calendly does not promise order, and workers take events in parallel."""
    assert event.business_id is not None  # a Calendly event is stored with its source's business
    appointment = _appointment(event.business_id, invitee_uri)
    if appointment is not None:
        return appointment
    booking = InboundEvent.objects.filter(
        provider=Provider.CALENDLY, external_id=f"{CREATED}:{invitee_uri}", business_id=event.business_id
    ).first()
    if booking is None:
        return None
    if booking.status == InboundEvent.Status.PROCESSING:
        raise LookupError(f"its booking {booking.public_id} is being processed right now: replay this event")
    if booking.status in (InboundEvent.Status.RECEIVED, InboundEvent.Status.FAILED):
        event_process(booking.pk)
    return _appointment(event.business_id, invitee_uri)


def _host(business: Business, invitee: Invitee) -> TeamMember | None:
    if not invitee.host_emails:
        return None
    return (
        TeamMember.objects.filter(business=business, is_active=True, email__in=invitee.host_emails)
        .order_by("pk")
        .first()
    )


def _notes(invitee: Invitee) -> str:
    lines = [f"Calendly: {invitee.event_name}"] if invitee.event_name else []
    lines += [f"{q}: {a}" for q, a in invitee.answers]
    return "\n".join(lines)


def _created(event: InboundEvent) -> str:
    business, invitee = event.business, _event_invitee(event)
    assert business is not None
    if _appointment(business.pk, invitee.uri) is not None:
        return InboundEvent.Status.PROCESSED  # a replay: the booking is already recorded
    if invitee.starts_at is None or invitee.ends_at is None:
        raise MalformedPayload("the booking has no scheduled_event start_time and end_time")
    match = booking_match(business, emails=invitee.emails, phones=invitee.phones, tracking=invitee.tracking)
    if match.lead is None:
        booking_exception(
            business,
            subject=event.public_id,
            title=f"Calendly booking matches no lead: {invitee.label()}",
            detail=f"{match.detail}; invitee {invitee.uri}",
        )
        return InboundEvent.Status.PROCESSED
    old = _appointment(business.pk, invitee.old_invitee) if invitee.old_invitee else None
    try:
        appointment_record_external(
            match.lead,
            starts_at=invitee.starts_at,
            ends_at=invitee.ends_at,
            provider=Provider.CALENDLY,
            external_id=invitee.uri,
            actor=ACTOR,
            assigned_to=_host(business, invitee),
            location=invitee.location,
            notes=_notes(invitee),
            rescheduled_from=old,
        )
    except BookingError as exc:
        booking_exception(
            business,
            subject=event.public_id,
            lead=match.lead,
            title=f"Calendly booking for {match.lead.public_id} needs a person: {invitee.label()}",
            detail=f"matched by {match.how}, but {exc}; invitee {invitee.uri}",
        )
    return InboundEvent.Status.PROCESSED


def _canceled(event: InboundEvent) -> str:
    invitee = _event_invitee(event)
    appointment = _booking_of(event, invitee.uri)
    if appointment is None:
        # Booked while unmatched: the person's exception for it can close.
        for item in ExceptionItem.objects.filter(
            business=event.business, kind=UNMATCHED, status=ExceptionItem.Status.OPEN, detail__contains=invitee.uri
        ):
            booking_exception_resolve(item, actor=ACTOR, how="canceled in Calendly before it was matched")
        return InboundEvent.Status.IGNORED
    if appointment.status not in HOLDING:
        return InboundEvent.Status.IGNORED
    if invitee.rescheduled:
        appointment_release_rescheduled(appointment, actor=ACTOR)
        return InboundEvent.Status.PROCESSED
    by = f" by {invitee.canceled_by}" if invitee.canceled_by else ""
    appointment_cancel(
        appointment, actor=ACTOR, reason=f"canceled in Calendly{by}: {invitee.cancel_reason or 'no reason given'}"
    )
    return InboundEvent.Status.PROCESSED


def _no_show(event: InboundEvent) -> str:
    invitee = _event_invitee(event)
    appointment = _booking_of(event, invitee.uri)
    if appointment is None:
        assert event.business is not None
        booking_exception(
            event.business,
            subject=event.public_id,
            title="Calendly no-show for a booking not on record",
            detail=f"no appointment for invitee {invitee.uri}",
        )
        return InboundEvent.Status.PROCESSED
    if appointment.status not in (*HOLDING, Appointment.Status.NO_SHOW):
        return InboundEvent.Status.IGNORED
    no_show_record(appointment, actor=ACTOR)
    return InboundEvent.Status.PROCESSED


def _ignore(event: InboundEvent) -> str:
    return InboundEvent.Status.IGNORED


handler_register(Provider.CALENDLY, CREATED, _created)
handler_register(Provider.CALENDLY, CANCELED, _canceled)
handler_register(Provider.CALENDLY, NO_SHOW, _no_show)
for _kind in IGNORED_KINDS:
    handler_register(Provider.CALENDLY, _kind, _ignore)


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
