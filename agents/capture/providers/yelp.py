"""Yelp Leads (`/hooks/yelp/`): one webhook URL for every business we are
subscribed to (`manage.py yelp_subscribe`), as Yelp registers one URL per
partner.

GET is Yelp's verification: `?verification=<string>` is answered with that
string (`{"verification": …}`). A POST is a notification with ids only:

    {"time": …, "object": "business",
     "data": {"id": <business_id>,
              "updates": [{"event_type": "NEW_EVENT", "event_id": …, "lead_id": …, "interaction_time": …}]}}

Yelp signs nothing. So a notification is never taken at its word: it is
stored only when it names the `business_id` of an active yelp source (any
other is refused, counted and not stored), and processing reads the lead
and its events from Yelp's Leads API with that source's access token
(`GET {YELP_API_URL}/v3/leads/<lead_id>` and `…/events`): what is recorded
is what Yelp itself answers, and a forged id gets Yelp's 404 (the event
fails, and nothing is recorded).

Stored raw first, one event per update, deduplicated on Yelp's `event_id`;
an update of another type (a phone-number opt-in…) is kept with the whole
body and ignored; a body that names one of our businesses but cannot be
read is stored failed (replayable).

Processing one event reads the whole thread, so it also records whatever an
earlier lost notification would have: the lead (the person's display name
and phone when Yelp shares it, the survey answers, ZIP code and job names;
the lead id is both the person's `yelp` contact point and the touch's
`thread_id`; the first job name is the touch's campaign), its first message
from the person, and each later one as an inbound message on the thread's
lead (channel `yelp`), each once by Yelp's event id. A business event (ours
or one typed on Yelp) settles one of ours whose answer was lost
(agents.outbound.marketplace).

Replies go back as lead events (`POST {YELP_API_URL}/v3/leads/<lead_id>/events`
`{"request_content": …, "request_type": "TEXT"}`), registered here as the
`yelp` channel. The daily resync and marking threads read live in
agents/capture/providers/yelp_sync.py.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from agents.capture.base import Capture, iso_time, json_object, split_name
from agents.capture.identity import capture_apply
from agents.capture.intake import Accepted, event_accept
from agents.capture.webhooks import WebhookError, accept, body_digest, json_error, raw_body, reject
from agents.outbound.marketplace import (
    ThreadApi,
    ThreadLookupError,
    ThreadOutcome,
    marketplace_api_register,
    text_key,
    thread_echo_apply,
    thread_get,
    thread_post,
)
from crm.models import InboundEvent, LeadTouch, Message, Provider, Source
from crm.services.inbound_handlers import MalformedPayload, handler_register, message_arrived

LEAD_EVENT = "lead_event"
# A lead the daily resync found (agents/capture/providers/yelp_sync.py): read like a notification.
LEAD_SYNC = "lead_sync"
# A whole body: another update type (ignored), or one we cannot read (failed).
DELIVERY = "delivery"
NEW_EVENT = "NEW_EVENT"
CONSUMER = "CONSUMER"
BUSINESS_KEY = "business_id"


class YelpError(Exception):
    """Yelp did not give us the lead or its events (the message never holds the token)."""


@dataclass(frozen=True)
class Update:
    kind: str
    external_id: str
    lead_id: str


@dataclass
class Notification:
    business_id: str
    updates: list[Update]
    problems: list[str]


def _id(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        return ""
    return str(value).strip()


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def notification_parse(body: bytes) -> Notification:
    """The updates in a body (and what could not be read). MalformedPayload
    when it is not a Yelp notification at all."""
    data = json_object(body).get("data")
    if not isinstance(data, dict) or not _id(data.get("id")):
        raise MalformedPayload("no data.id (the Yelp business id)")
    updates = data.get("updates")
    if not isinstance(updates, list):
        return Notification(_id(data["id"]), [], ["data.updates is not a list"])
    notification = Notification(_id(data["id"]), [], [])
    for n, update in enumerate(updates):
        if not isinstance(update, dict):
            notification.problems.append(f"data.updates[{n}] is not an object")
            continue
        if update.get("event_type") != NEW_EVENT:
            continue  # other update types (phone-number opt-ins…): nothing for the thread
        event_id, lead_id = _id(update.get("event_id")), _id(update.get("lead_id"))
        if not event_id or not lead_id:
            notification.problems.append(f"data.updates[{n}] has no event_id or lead_id")
            continue
        notification.updates.append(Update(LEAD_EVENT, event_id, lead_id))
    return notification


def source_for_business(business_id: str) -> Source | None:
    """The active yelp source whose config names this Yelp business."""
    if not business_id:
        return None
    return (
        Source.objects.select_related("business")
        .filter(provider=Provider.YELP, is_active=True, **{f"config__{BUSINESS_KEY}": business_id})
        .order_by("pk")
        .first()
    )


# ---------------------------------------------------------------- the view


def _business_id_of(body: bytes) -> str:
    try:
        data = json_object(body).get("data")
    except MalformedPayload:
        return ""
    return _id(data.get("id")) if isinstance(data, dict) else ""


def _store(request: HttpRequest, body: bytes, source: Source) -> list[Accepted]:
    try:
        notification = notification_parse(body)
    except MalformedPayload as exc:
        return [
            accept(
                request,
                provider=Provider.YELP,
                external_id=body_digest(body),
                body=body,
                source=source,
                kind=DELIVERY,
                malformed=str(exc),
            )
        ]
    stored = []
    # All or nothing: a crash half-way answers 500 and Yelp's retry stores the rest.
    with transaction.atomic():
        for update in sorted(notification.updates, key=lambda u: u.external_id):
            stored.append(
                accept(
                    request,
                    provider=Provider.YELP,
                    external_id=update.external_id,
                    body=body,
                    source=source,
                    kind=update.kind,
                )
            )
        if notification.problems or not notification.updates:
            stored.append(
                accept(
                    request,
                    provider=Provider.YELP,
                    external_id=body_digest(body),
                    body=body,
                    source=source,
                    kind=DELIVERY,
                    malformed="; ".join(notification.problems)[:1000],
                )
            )
    return stored


@csrf_exempt
@require_http_methods(["GET", "POST"])
def yelp_hook(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        verification = request.GET.get("verification", "")
        if not verification.isalnum() or len(verification) > 200:
            return json_error(400, "invalid_verification", "verification must be a short alphanumeric string")
        return JsonResponse({"verification": verification})
    try:
        body = raw_body(request)
        business_id = _business_id_of(body)
        source = source_for_business(business_id)
        if source is None:
            # Unsigned: only a notification about one of our businesses is kept.
            raise reject(
                request,
                provider=Provider.YELP,
                source=None,
                reason=f"no active yelp source has business_id {business_id[:60]!r}",
                status=403,
                error="unknown_business",
            )
        stored = _store(request, body, source)
    except WebhookError as exc:
        return exc.response()
    return JsonResponse(
        {
            "events": [{"id": a.event.public_id, "status": a.event.status, "duplicate": a.duplicate} for a in stored],
            "duplicate": all(a.duplicate for a in stored),
        }
    )


urlpatterns = [path("hooks/yelp/", yelp_hook, name="hook-yelp")]


# ------------------------------------------------------------ Yelp's Leads API


def _leads_url(lead_id: str, tail: str = "") -> str:
    return f"{settings.YELP_API_URL.rstrip('/')}/v3/leads/{quote(lead_id, safe='')}{tail}"


def yelp_get(source: Source, url: str, params: dict[str, Any] | None = None) -> Any:
    """One read with the source's token; YelpError when Yelp does not answer it."""
    if not source.page_token:
        raise YelpError(f"source {source.key!r} has no access_token: add the token, then replay")
    try:
        return thread_get(url, token=source.page_token, params=params)
    except ThreadLookupError as exc:
        raise YelpError(f"Yelp did not answer {url.split('/v3/', 1)[-1]}: {exc}") from None


def lead_read(source: Source, lead_id: str) -> dict[str, Any]:
    """The lead and its events, as Yelp answers them (`{"lead", "events"}`)."""
    lead = yelp_get(source, _leads_url(lead_id))
    events = yelp_get(source, _leads_url(lead_id, "/events"), {"limit": 100})
    if not isinstance(lead, dict) or not isinstance(events, dict) or not isinstance(events.get("events"), list):
        raise YelpError(f"Yelp answered lead {lead_id} in an unexpected shape")
    return {"lead": lead, "events": [e for e in events["events"] if isinstance(e, dict) and _id(e.get("id"))]}


# ------------------------------------------------------------ processing


def _lead_id_of(event: InboundEvent) -> str:
    if event.kind == LEAD_SYNC:
        lead_id = _id(json_object(bytes(event.body)).get("lead_id"))
        if not lead_id:
            raise MalformedPayload("a resync event without lead_id")
        return lead_id
    for update in notification_parse(bytes(event.body)).updates:
        if update.external_id == event.external_id:
            return update.lead_id
    raise MalformedPayload(f"no update {event.external_id!r} in the stored body")


def _source_of(event: InboundEvent) -> Source:
    if event.source is None:
        raise YelpError("the event has no source: configure a yelp source with this business_id, then replay")
    return event.source


def _fetch(event: InboundEvent) -> dict[str, Any]:
    # The prepare step: outside the processing transaction, so nothing is
    # held open while Yelp is slow.
    return lead_read(_source_of(event), _lead_id_of(event))


def _event_text(item: dict[str, Any]) -> str:
    content = item.get("event_content")
    if not isinstance(content, dict):
        return ""
    return _text(content.get("text")) or _text(content.get("fallback_text"))


def lead_capture(lead: dict[str, Any], first: dict[str, Any] | None, *, received_at: datetime) -> Capture:
    """A Yelp lead as a Capture, with `first` (the person's first event, if
    any) as its first message. Pure."""
    lead_id = _id(lead.get("id"))
    user, project = _dict(lead.get("user")), _dict(lead.get("project"))
    location = _dict(project.get("location"))
    survey: dict[str, Any] = {}
    for n, answer in enumerate(project.get("survey_answers") or []):
        if isinstance(answer, dict):
            question = _text(answer.get("question_text")) or f"question_{n + 1}"
            given = answer.get("answer_text")
            values = [str(v) for v in given] if isinstance(given, list) else [str(given or "")]
            survey[question] = values[0] if len(values) == 1 else values
    jobs = [_text(j) for j in project.get("job_names") or [] if _text(j)]
    first_name, last_name = split_name(_text(user.get("display_name")))
    phone = _text(lead.get("phone_number"))
    info = _text(project.get("additional_info"))
    text = _event_text(first) if first else ""
    answers: dict[str, Any] = {
        **({"survey": survey} if survey else {}),
        **({"job_names": jobs} if jobs else {}),
        **({"availability": project["availability"]} if _dict(project.get("availability")) else {}),
        **({"conversation_id": _id(lead.get("conversation_id"))} if lead.get("conversation_id") else {}),
    }
    return Capture(
        channel="yelp",
        occurred_at=iso_time(lead.get("time_created"), received_at),
        first_name=first_name,
        last_name=last_name,
        phones=[phone] if phone else [],
        handles=[("yelp", lead_id)],
        postal_code=_text(location.get("postal_code")),
        request_text=info or text,
        service_hint=", ".join(jobs),
        answers=answers,
        touch={
            "provider": Provider.YELP,
            "thread_id": lead_id,
            "to": lead_id,
            "campaign_id": jobs[0] if jobs else "",
        },
        message_body=text or info,
        message_sid=f"yelp:{_id(first.get('id'))}" if first and text else "",
    )


def _message_capture(lead_id: str, item: dict[str, Any], *, received_at: datetime) -> Capture:
    return Capture(
        channel="yelp",
        occurred_at=iso_time(item.get("time_created"), received_at),
        handles=[("yelp", lead_id)],
        message_body=_event_text(item),
        message_sid=f"yelp:{_id(item.get('id'))}",
        touch={"provider": Provider.YELP, "thread_id": lead_id, "to": lead_id},
    )


def _process_lead(event: InboundEvent, fetched: dict[str, Any]) -> str:
    source = _source_of(event)
    lead, events = fetched["lead"], fetched["events"]
    lead_id = _id(lead.get("id")) or _lead_id_of(event)
    business_id = _id(lead.get("business_id"))
    if business_id and business_id != _id(source.config.get(BUSINESS_KEY)):
        raise YelpError(f"lead {lead_id} belongs to Yelp business {business_id}, not to source {source.key!r}")
    consumer = [e for e in events if _text(e.get("user_type")).upper() == CONSUMER and _event_text(e)]
    recorded = set(
        Message.objects.filter(provider_sid__in=[f"yelp:{_id(e.get('id'))}" for e in events]).values_list(
            "provider_sid", flat=True
        )
    )
    known = LeadTouch.objects.filter(business_id=source.business_id, provider=Provider.YELP, thread_id=lead_id)
    outcome = InboundEvent.Status.IGNORED
    pending = [e for e in consumer if f"yelp:{_id(e.get('id'))}" not in recorded]
    if not known.exists():
        first = pending.pop(0) if pending else None
        capture = lead_capture(lead, first, received_at=event.received_at)
        applied = capture_apply(business=source.business, capture=capture, source=source, event=event)
        if applied.message is not None:
            message_arrived(applied.message, applied.lead, created_lead=applied.created_lead)
        outcome = InboundEvent.Status.PROCESSED
    for item in pending:
        applied = capture_apply(
            business=source.business,
            capture=_message_capture(lead_id, item, received_at=event.received_at),
            source=source,
            event=event,
        )
        if applied.message is not None:
            message_arrived(applied.message, applied.lead, created_lead=applied.created_lead)
        outcome = InboundEvent.Status.PROCESSED
    for item in events:
        if _text(item.get("user_type")).upper() != CONSUMER and f"yelp:{_id(item.get('id'))}" not in recorded:
            settled = thread_echo_apply(
                business_id=source.business_id,
                channel=Provider.YELP,
                thread=lead_id,
                message_id=_id(item.get("id")),
                text=_event_text(item),
            )
            outcome = InboundEvent.Status.PROCESSED if settled else outcome
    return outcome


def _process_delivery(event: InboundEvent) -> str:
    """A whole body: replayed after a parser fix, it stores its updates as
    their own events (repeats are duplicates); with nothing for us, ignored."""
    notification = notification_parse(bytes(event.body))
    if notification.problems:
        raise MalformedPayload("; ".join(notification.problems))
    for update in notification.updates:
        event_accept(
            provider=Provider.YELP,
            external_id=update.external_id,
            body=bytes(event.body),
            headers=event.headers,
            source=event.source,
            kind=update.kind,
        )
    return InboundEvent.Status.PROCESSED if notification.updates else InboundEvent.Status.IGNORED


handler_register(Provider.YELP, LEAD_EVENT, _process_lead, prepare=_fetch)
handler_register(Provider.YELP, LEAD_SYNC, _process_lead, prepare=_fetch)
handler_register(Provider.YELP, DELIVERY, _process_delivery)


def sync_event_id(lead_id: str, day: str) -> str:
    """The resync's event id for a lead on a day: one read per lead and day."""
    return f"sync:{day}:{hashlib.sha256(lead_id.encode()).hexdigest()[:40]}"


# ------------------------------------------------------- replies in the thread


def yelp_send(source: Source, thread: str, text: str) -> ThreadOutcome:
    """Post one text into a Yelp lead's thread, once (agents.outbound.marketplace)."""
    return thread_post(
        _leads_url(thread, "/events"),
        token=source.page_token,
        payload={"request_content": text, "request_type": "TEXT"},
        message_id=lambda data: _id(data.get("id") or data.get("event_id")) if isinstance(data, dict) else "",
    )


def yelp_find(source: Source, thread: str, text: str, since: datetime) -> str | None:
    """Our text among the lead's business events created since `since`."""
    data = thread_get(_leads_url(thread, "/events"), token=source.page_token, params={"limit": 20})
    events = data.get("events") if isinstance(data, dict) else None
    key = text_key(text)
    for item in events if isinstance(events, list) else []:
        if not isinstance(item, dict) or _text(item.get("user_type")).upper() == CONSUMER:
            continue
        created = iso_time(item.get("time_created"), since)
        if text_key(_event_text(item)) == key and created >= since - timedelta(minutes=1):
            return _id(item.get("id"))
    return None


marketplace_api_register(Provider.YELP, ThreadApi(send=yelp_send, find=yelp_find))
