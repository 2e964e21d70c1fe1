"""Thumbtack webhooks (`/hooks/thumbtack/<key>/`): new leads (negotiations)
and the messages of their threads, from Thumbtack's Partner API v4.

A business's webhook is created (in Thumbtack, or through
`POST /api/v4/businesses/<businessID>/webhooks`) for the event types
`NegotiationCreatedV4` and `MessageCreatedV4`, with HTTP Basic credentials
Thumbtack sends on every delivery: the username is the source's key, the
password its `secret`. Each delivery holds one event, its object under
`data` (or at the top level, as the API's reads return it).

Stored raw first, deduplicated on Thumbtack's own ids: a negotiation on its
`negotiationID`, a message on `<negotiationID>/<messageID>` (the thread's id
first, so the messages waiting for a negotiation are found by prefix).

Processing:

* A negotiation is a lead: the customer's Thumbtack id becomes a contact
  point of kind `thumbtack` (their phone too, when Thumbtack shares it, with
  no consent to text it), the negotiation id the touch's `thread_id`, the
  category its campaign, and the request's description the first inbound
  message of the thread.
* A customer's message is an inbound message on its thread's lead (channel
  `thumbtack`), read for consent, intent and urgency like a text or a DM.
  Thumbtack may deliver a message before its negotiation: the message then
  waits (`RetryLater`), and the negotiation, once processed, makes its
  waiting messages due at once. The "lead description" message Thumbtack
  sends is the negotiation's description again and is ignored.
* A business's message (ours, or one typed in Thumbtack) is no message from
  the person: one of ours whose answer was lost is settled by it
  (agents.outbound.marketplace); anything else is ignored.

Replies go back into the negotiation through Thumbtack's messages API
(`POST {THUMBTACK_API_URL}/api/v4/negotiations/<id>/messages`, Bearer the
source's `access_token`), registered here as the `thumbtack` channel.

Answers: 200 a stored delivery or a repeat of one; 200 a body Thumbtack
signed that we cannot read (stored failed, replayable); 401 missing or wrong
credentials (counted, not stored); 403 a switched-off source (counted); 404
no Thumbtack source with the key; 413 over 1 MiB.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.capture.base import Capture, iso_time, json_object, split_name
from agents.capture.identity import capture_apply
from agents.capture.intake import event_accept, rejection_count
from agents.capture.webhooks import WebhookError, accept, accepted_response, body_digest, raw_body, reject, remote_addr
from agents.outbound.marketplace import (
    ThreadApi,
    ThreadOutcome,
    marketplace_api_register,
    text_key,
    thread_echo_apply,
    thread_get,
    thread_post,
)
from crm.models import ContactPoint, InboundEvent, LeadTouch, Provider, Source
from crm.services.inbound_handlers import MalformedPayload, RetryLater, handler_register, message_arrived

NEGOTIATION = "negotiation"
MESSAGE = "message"
# A body with nothing for us (another event type), or one we cannot read.
DELIVERY = "delivery"
NEGOTIATION_TYPES = {"NegotiationCreatedV4", "NegotationCreatedV4", "NegotiationCreated"}
MESSAGE_TYPES = {"MessageCreatedV4", "MessageCreated"}
# Who wrote a message: Thumbtack names the customer's side `Customer`.
CUSTOMER = "customer"


class SourceMismatch(LookupError):
    """The delivery names a Thumbtack business other than the source's."""


@dataclass(frozen=True)
class Delivery:
    kind: str  # negotiation, message, delivery (another event type)
    external_id: str
    event_type: str
    data: dict[str, Any]


def _id(value: Any) -> str:
    # Thumbtack's ids are strings of digits; tolerate numbers, never booleans or objects.
    if isinstance(value, bool) or not isinstance(value, str | int):
        return ""
    return str(value).strip()


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _object(container: dict[str, Any], key: str) -> dict[str, Any]:
    value = container.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedPayload(f"{key} is not an object")
    return value


def delivery_parse(body: bytes) -> Delivery:
    """What one signed body holds; MalformedPayload when it cannot be read."""
    envelope = json_object(body)
    event = envelope["event"] if isinstance(envelope.get("event"), dict) else {}
    event_type = _text(envelope.get("eventType")) or _text(event.get("eventType")) or _text(envelope.get("type"))
    data = envelope.get("data", envelope)
    if not isinstance(data, dict):
        raise MalformedPayload("data is not an object")
    if event_type in MESSAGE_TYPES or (not event_type and "messageID" in data):
        message_id, negotiation_id = _id(data.get("messageID")), _id(data.get("negotiationID"))
        if not message_id or not negotiation_id:
            raise MalformedPayload("a message without messageID or negotiationID")
        return Delivery(MESSAGE, f"{negotiation_id}/{message_id}", event_type or "MessageCreatedV4", data)
    if event_type in NEGOTIATION_TYPES or (not event_type and "negotiationID" in data):
        negotiation_id = _id(data.get("negotiationID"))
        if not negotiation_id:
            raise MalformedPayload("a negotiation without negotiationID")
        negotiation_capture(data, received_at=timezone.now())  # unreadable parts fail here, not later
        return Delivery(NEGOTIATION, negotiation_id, event_type or "NegotiationCreatedV4", data)
    if not event_type:
        raise MalformedPayload("neither an eventType nor a negotiation or message")
    # Another event type (a status update, a review): kept, and ignored.
    return Delivery(DELIVERY, f"{event_type[:60]}:{body_digest(body)}", event_type, data)


def _category(request: dict[str, Any], data: dict[str, Any]) -> tuple[str, str]:
    """(id, name) of the request's category: an object, or a bare name."""
    category = request.get("category", data.get("category"))
    if isinstance(category, dict):
        return _id(category.get("categoryID")), _text(category.get("name"))
    return "", _text(category)


def negotiation_capture(data: dict[str, Any], *, received_at: datetime) -> Capture:
    """A negotiation as a Capture. Pure: `received_at` stands in for its
    creation time when that is missing."""
    negotiation_id = _id(data.get("negotiationID"))
    customer = _object(data, "customer")
    request = _object(data, "request")
    location = _object(request, "location") or _object(data, "location") or _object(customer, "location")
    customer_id = _id(customer.get("customerID"))
    first, last = _text(customer.get("firstName")), _text(customer.get("lastName"))
    if not (first or last):
        first, last = split_name(_text(customer.get("displayName")))
    phone = _text(customer.get("phone")) or _text(customer.get("phoneNumber"))
    email = _text(customer.get("email"))
    category_id, category = _category(request, data)
    details = request.get("details", data.get("details")) or []
    if not isinstance(details, list):
        raise MalformedPayload("request.details is not a list")
    answers: dict[str, Any] = {}
    for n, detail in enumerate(details):
        if isinstance(detail, dict) and (question := _text(detail.get("question")) or f"detail_{n + 1}"):
            answer = detail.get("answer")
            answers[question] = answer if isinstance(answer, str | list) else str(answer or "")
    description = _text(request.get("description")) or _text(data.get("description"))
    street = _text(location.get("address1")) or _text(location.get("address"))
    return Capture(
        channel="thumbtack",
        occurred_at=iso_time(data.get("createTime") or data.get("createdAt"), received_at),
        first_name=first,
        last_name=last,
        phones=[phone] if phone else [],
        emails=[email] if email else [],
        handles=[("thumbtack", customer_id)] if customer_id else [],
        postal_code=_text(location.get("zipCode")) or _text(location.get("postalCode")),
        address=", ".join(v for v in (street, _text(location.get("city")), _text(location.get("state"))) if v),
        request_text=description,
        service_hint=category,
        answers={
            **({"category": category} if category else {}),
            **({"category_id": category_id} if category_id else {}),
            **({"details": answers} if answers else {}),
        },
        touch={
            "provider": Provider.THUMBTACK,
            "thread_id": negotiation_id,
            "to": negotiation_id,  # the thread the message is in
            # The category is what the contractor pays Thumbtack leads by: its campaign.
            "campaign_id": category or category_id,
        },
        # The request opens the thread: the person's first message in it.
        message_body=description,
        message_sid=f"thumbtack:negotiation:{negotiation_id}" if description else "",
    )


# ---------------------------------------------------------------- the view


def basic_authorization(username: str, password: str) -> str:
    """The `Authorization` value Thumbtack sends with these webhook credentials."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


def _credentials_valid(header: str, source: Source) -> bool:
    scheme, _, encoded = header.partition(" ")
    if not source.secret or scheme.lower() != "basic":
        return False
    try:
        username, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    # Both compared whatever the first gives: the time says nothing about either.
    user_ok = hmac.compare_digest(username.encode(), source.key.encode())
    password_ok = hmac.compare_digest(password.encode(), source.secret.encode())
    return bool(sep) and user_ok and password_ok


def _source(key: str) -> Source:
    # Not `source_for`: an inactive source is told apart only after the
    # credentials, so a stranger learns nothing about it.
    source = Source.objects.select_related("business").filter(key=key, provider=Provider.THUMBTACK).first()
    if source is None:
        raise WebhookError(404, "unknown_source", f"no Thumbtack source {key!r}")
    return source


@csrf_exempt
@require_POST
def thumbtack_hook(request: HttpRequest, source_key: str) -> HttpResponse:
    try:
        source = _source(source_key)
        body = raw_body(request)
        if not _credentials_valid(request.META.get("HTTP_AUTHORIZATION", ""), source):
            raise reject(request, provider=Provider.THUMBTACK, source=source, reason="bad or missing Basic credentials")
        if not source.is_active:
            rejection_count(
                provider=Provider.THUMBTACK,
                source=source,
                reason="source is inactive",
                remote_addr=remote_addr(request) or None,
            )
            raise WebhookError(403, "source_inactive", f"source {source.key!r} is switched off")
        malformed = ""
        try:
            delivery = delivery_parse(body)
        except MalformedPayload as exc:
            malformed = str(exc)
            delivery = Delivery(DELIVERY, body_digest(body), "", {})
        accepted = accept(
            request,
            provider=Provider.THUMBTACK,
            external_id=delivery.external_id,
            body=body,
            source=source,
            kind=delivery.kind,
            malformed=malformed,
        )
    except WebhookError as exc:
        return exc.response()
    if malformed and not accepted.duplicate:
        return JsonResponse(
            {
                "id": accepted.event.public_id,
                "status": accepted.event.status,
                "duplicate": False,
                "detail": f"stored as failed, not processed: {malformed}",
            }
        )
    return accepted_response(accepted)


urlpatterns = [path("hooks/thumbtack/<slug:source_key>/", thumbtack_hook, name="hook-thumbtack")]


# ------------------------------------------------------------ processing


def _delivery_of(event: InboundEvent) -> Delivery:
    delivery = delivery_parse(bytes(event.body))
    if delivery.kind != event.kind:
        raise MalformedPayload(f"the stored body holds a {delivery.kind}, not a {event.kind}")
    return delivery


def _source_of(event: InboundEvent, data: dict[str, Any]) -> Source:
    source = event.source
    if source is None:
        raise SourceMismatch("the event has no source: it came through no Thumbtack source's URL")
    business_id = _id(_object(data, "business").get("businessID")) or _id(data.get("businessID"))
    configured = _id(source.config.get("business_id"))
    if configured and business_id and business_id != configured:
        raise SourceMismatch(
            f"the delivery is for Thumbtack business {business_id}, but source {source.key!r} has business_id "
            f"{configured}: point that business's webhook at its own source, then replay"
        )
    return source


def _process_negotiation(event: InboundEvent) -> str:
    delivery = _delivery_of(event)
    source = _source_of(event, delivery.data)
    capture = negotiation_capture(delivery.data, received_at=event.received_at)
    applied = capture_apply(business=source.business, capture=capture, source=source, event=event)
    if applied.message is not None:
        message_arrived(applied.message, applied.lead, created_lead=applied.created_lead)
    _waiting_messages_due(source, delivery.external_id)
    return InboundEvent.Status.PROCESSED


def _waiting_messages_due(source: Source, negotiation_id: str) -> None:
    """Messages of this thread that came before it and wait for it are due
    now (committed with the lead): the thread is whole within seconds, not
    at their next retry."""
    now = timezone.now()
    InboundEvent.objects.filter(
        provider=Provider.THUMBTACK,
        kind=MESSAGE,
        business_id=source.business_id,
        status=InboundEvent.Status.RECEIVED,
        external_id__startswith=f"{negotiation_id}/",
        retry_at__gt=now,
    ).update(retry_at=now)


def _thread_touch(source: Source, negotiation_id: str) -> LeadTouch | None:
    return (
        LeadTouch.objects.filter(business_id=source.business_id, provider=Provider.THUMBTACK, thread_id=negotiation_id)
        .select_related("lead")
        .order_by("received_at", "pk")
        .first()
    )


def _attachments(data: dict[str, Any]) -> list[str]:
    lines = []
    for attachment in data.get("attachments") or []:
        if isinstance(attachment, dict):
            url = _text(attachment.get("url")) or _text(attachment.get("fileURL"))
            name = _text(attachment.get("fileName")) or _text(attachment.get("name")) or "attachment"
            lines.append(f"[{name}] {url}".strip())
    return lines


def _process_message(event: InboundEvent) -> str:
    delivery = _delivery_of(event)
    data = delivery.data
    source = _source_of(event, data)
    negotiation_id, message_id = delivery.external_id.split("/", 1)
    given = data.get("text")
    text = given if isinstance(given, str) else ""
    sender = _text(data.get("from")).lower()
    if sender and sender != CUSTOMER:
        settled = thread_echo_apply(
            business_id=source.business_id,
            channel=Provider.THUMBTACK,
            thread=negotiation_id,
            message_id=message_id,
            text=text,
        )
        return InboundEvent.Status.PROCESSED if settled else InboundEvent.Status.IGNORED
    touch = _thread_touch(source, negotiation_id)
    if touch is None:
        # Thumbtack may send a thread's first messages before its negotiation.
        raise RetryLater(f"negotiation {negotiation_id} has not arrived yet: this message waits for it")
    if text_key(text) and text_key(text) == text_key(touch.lead.request_text):
        return InboundEvent.Status.IGNORED  # the request's description again, already the thread's first message
    customer_id = _id(_object(data, "customer").get("customerID"))
    if not customer_id:
        point = ContactPoint.objects.filter(contact_id=touch.lead.contact_id, kind="thumbtack").first()
        customer_id = point.value if point else ""
    if not customer_id:
        raise MalformedPayload("a customer's message names no customerID, and its thread's person has none")
    capture = Capture(
        channel="thumbtack",
        occurred_at=iso_time(data.get("sentAt"), event.received_at),
        handles=[("thumbtack", customer_id)],
        message_body="\n".join([text, *_attachments(data)] if text else _attachments(data)),
        message_sid=f"thumbtack:{message_id}",
        touch={"provider": Provider.THUMBTACK, "thread_id": negotiation_id, "to": negotiation_id},
    )
    if not capture.message_body:
        return InboundEvent.Status.IGNORED
    applied = capture_apply(business=source.business, capture=capture, source=source, event=event)
    if applied.message is not None:
        message_arrived(applied.message, applied.lead, created_lead=applied.created_lead)
    return InboundEvent.Status.PROCESSED


def _process_delivery(event: InboundEvent) -> str:
    """Another event type (ignored), or a body that could not be read: a
    replay after a parser fix stores what it holds as its own event (a
    repeat of a stored one is a duplicate), processed in its turn."""
    delivery = delivery_parse(bytes(event.body))
    if delivery.kind == DELIVERY:
        return InboundEvent.Status.IGNORED
    event_accept(
        provider=Provider.THUMBTACK,
        external_id=delivery.external_id,
        body=bytes(event.body),
        headers=event.headers,
        source=event.accepted_by,
        kind=delivery.kind,
    )
    return InboundEvent.Status.PROCESSED


handler_register(Provider.THUMBTACK, NEGOTIATION, _process_negotiation)
handler_register(Provider.THUMBTACK, MESSAGE, _process_message)
handler_register(Provider.THUMBTACK, DELIVERY, _process_delivery)


# ------------------------------------------------------- replies in the thread


def _messages_url(negotiation_id: str) -> str:
    return f"{settings.THUMBTACK_API_URL.rstrip('/')}/api/v4/negotiations/{quote(negotiation_id, safe='')}/messages"


def thumbtack_send(source: Source, thread: str, text: str) -> ThreadOutcome:
    """Post one text into a negotiation, once (agents.outbound.marketplace)."""
    return thread_post(
        _messages_url(thread),
        token=source.page_token,
        payload={"text": text},
        message_id=lambda data: _id(data.get("messageID")) if isinstance(data, dict) else "",
    )


def thumbtack_find(source: Source, thread: str, text: str, since: datetime) -> str | None:
    """Our text among the negotiation's business messages sent since `since`."""
    data = thread_get(_messages_url(thread), token=source.page_token, params={"limit": 50})
    messages = data.get("data") if isinstance(data, dict) else None
    key = text_key(text)
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict) or _text(message.get("from")).lower() == CUSTOMER:
            continue
        sent_at = iso_time(message.get("sentAt"), since)
        if text_key(str(message.get("text") or "")) == key and sent_at >= since - timedelta(minutes=1):
            return _id(message.get("messageID"))
    return None


marketplace_api_register(Provider.THUMBTACK, ThreadApi(send=thumbtack_send, find=thumbtack_find))
