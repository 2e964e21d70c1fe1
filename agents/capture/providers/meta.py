"""Meta webhooks on one endpoint, `/hooks/meta/`: Lead Ads (`object: page`,
field `leadgen`) and Instagram DMs (`object: instagram`).

GET is Meta's subscription check. A POST is signed with the app secret
(`X-Hub-Signature-256`, HMAC-SHA256 of the raw bytes, which already hold
Meta's `\\uXXXX` escapes) and may batch several entries, each with several
changes or messages. Every lead and every DM is stored as its own event — a
unique (provider, leadgen_id or message mid), so Meta's redeliveries are
duplicates — holding the whole verbatim body, since the signature covers only
the whole; its handler re-parses the body and picks its own item.

Instagram also sends echoes of the DMs the business's account sent
(`is_echo`, stored like DMs: by mid) and `messaging_seen` sightings
(`read.mid`, stored by a digest of account, reader and mid): an echo
settles one of our sends whose answer was lost, a sighting proves delivery
(agents.outbound.instagram).

The page or Instagram account names the source (config `page_id` or
`account_id`). An item for one we do not know is stored without a business
and fails in processing with that reason; configure the source and replay.

Answers: 200 for every signed body — new items, repeats, bodies with nothing
for us (stored, then ignored) and bodies we cannot read. Meta retries any
non-2xx for 36 hours and an unreadable body never improves, so it is stored
already failed (one event, external id = body digest) for inspection and
replay instead. 401 bad or missing signature (counted, not stored), 413 over
1 MiB, 403 a failed subscription check.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from agents.capture.base import Capture, json_object, split_name, truthy
from agents.capture.identity import capture_apply
from agents.capture.intake import Accepted, event_accept, rejection_count
from agents.capture.webhooks import (
    WebhookError,
    accept,
    body_digest,
    json_error,
    raw_body,
    reject,
    remote_addr,
)
from agents.meta_graph import lead_fetch, message_sid
from agents.outbound.instagram import dm_echo_apply, dm_seen_apply
from crm.models import InboundEvent, Provider, Source
from crm.services.inbound_handlers import MalformedPayload, handler_register, message_arrived

LEADGEN = "leadgen"
DM = "instagram_dm"
# The person saw a DM (`messaging_seen`: `read.mid`): delivery proof for ours.
SEEN = "instagram_seen"
# A whole body rather than one item: one that cannot be read (stored failed),
# or one with nothing for us (reactions, other page fields).
DELIVERY = "delivery"
SIGNATURE_PREFIX = "sha256="


class SourceNotConfigured(LookupError):
    """The page or account in a delivery matches no active source (yet)."""


@dataclass(frozen=True)
class Item:
    """One lead or one DM inside a delivery."""

    provider: str
    kind: str
    external_id: str
    account_id: str  # the page id (leadgen) or Instagram account id (DM)
    data: dict[str, Any]


@dataclass
class Delivery:
    provider: str
    items: list[Item] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _id(value: Any) -> str:
    # Meta sends ids as strings; tolerate numbers, never booleans or objects.
    if isinstance(value, bool) or not isinstance(value, str | int):
        return ""
    return str(value).strip()


def _list_at(container: dict[str, Any], key: str, where: str, problems: list[str]) -> list[Any]:
    value = container.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"{where}.{key} is not a list")
        return []
    return value


def delivery_parse(body: bytes) -> Delivery:
    """The leads and DMs in a signed body, plus what could not be read.

    Raises MalformedPayload when the body as a whole is not a Meta delivery.
    Unknown fields and events we do not handle are skipped, not errors."""
    data = json_object(body)
    kind_of_object = data.get("object")
    if kind_of_object not in ("page", "instagram"):
        raise MalformedPayload(f"unexpected object {kind_of_object!r} (page or instagram expected)")
    entries = data.get("entry")
    if not isinstance(entries, list):
        raise MalformedPayload("entry[] is missing")
    delivery = Delivery(Provider.META if kind_of_object == "page" else Provider.INSTAGRAM)
    for n, entry in enumerate(entries):
        where = f"entry[{n}]"
        if not isinstance(entry, dict):
            delivery.problems.append(f"{where} is not an object")
        elif kind_of_object == "page":
            _leadgen_items(entry, where, delivery)
        else:
            _dm_items(entry, where, delivery)
    return delivery


def _leadgen_items(entry: dict[str, Any], where: str, delivery: Delivery) -> None:
    for n, change in enumerate(_list_at(entry, "changes", where, delivery.problems)):
        at = f"{where}.changes[{n}]"
        if not isinstance(change, dict):
            delivery.problems.append(f"{at} is not an object")
            continue
        if change.get("field") != "leadgen":
            continue  # other Page fields: not subscribed for, not ours
        value = change.get("value")
        leadgen_id = _id(value.get("leadgen_id")) if isinstance(value, dict) else ""
        if not isinstance(value, dict) or not leadgen_id:
            delivery.problems.append(f"{at} has no value.leadgen_id")
            continue
        page_id = _id(value.get("page_id")) or _id(entry.get("id"))
        delivery.items.append(Item(Provider.META, LEADGEN, leadgen_id, page_id, value))


def _dm_items(entry: dict[str, Any], where: str, delivery: Delivery) -> None:
    events = [
        (f"{where}.messaging[{n}]", m) for n, m in enumerate(_list_at(entry, "messaging", where, delivery.problems))
    ]
    # The dashboard's "Test" button sends changes[]{field: "messages", value}
    # instead of messaging[].
    for n, change in enumerate(_list_at(entry, "changes", where, delivery.problems)):
        if isinstance(change, dict) and change.get("field") == "messages":
            events.append((f"{where}.changes[{n}].value", change.get("value")))
    for at, event in events:
        if not isinstance(event, dict):
            delivery.problems.append(f"{at} is not an object")
            continue
        message = event.get("message")
        if message is None:
            if isinstance(event.get("read"), dict):
                _seen_item(entry, event, at, delivery)
            continue  # reactions, postbacks: not a DM to record
        mid = _id(message.get("mid")) if isinstance(message, dict) else ""
        sender = event.get("sender")
        if not mid or not isinstance(sender, dict) or not _id(sender.get("id")):
            delivery.problems.append(f"{at} has no message.mid or sender.id")
            continue
        recipient = event.get("recipient")
        account_id = _id(entry.get("id")) or (_id(recipient.get("id")) if isinstance(recipient, dict) else "")
        delivery.items.append(Item(Provider.INSTAGRAM, DM, mid, account_id, event))


def _seen_item(entry: dict[str, Any], event: dict[str, Any], at: str, delivery: Delivery) -> None:
    sender, read = event.get("sender"), event["read"]
    reader = _id(sender.get("id")) if isinstance(sender, dict) else ""
    seen = _id(read.get("mid")) or _id(read.get("watermark"))
    if not reader or not seen:
        delivery.problems.append(f"{at} has no sender.id or read.mid")
        return
    recipient = event.get("recipient")
    account_id = _id(entry.get("id")) or (_id(recipient.get("id")) if isinstance(recipient, dict) else "")
    # No id of its own: the same sighting redelivered is the same event.
    digest = hashlib.sha256(f"{account_id}:{reader}:{seen}".encode()).hexdigest()
    delivery.items.append(Item(Provider.INSTAGRAM, SEEN, f"seen:{digest}", account_id, event))


# Which config key names the account, per provider.
ACCOUNT_KEY: dict[str, str] = {Provider.META: "page_id", Provider.INSTAGRAM: "account_id"}


def source_for_account(provider: str, account_id: str) -> Source | None:
    """The active source whose config names this page / Instagram account."""
    if not account_id:
        return None
    key = f"config__{ACCOUNT_KEY[provider]}"
    match = Q(**{key: account_id})
    if account_id.isdigit():  # ids are strings in the business file; a hand-edited config may hold a number
        match |= Q(**{key: int(account_id)})
    return (
        Source.objects.select_related("business")
        .filter(match, provider=provider, is_active=True)
        .order_by("pk")
        .first()
    )


# ---------------------------------------------------------------- the views


def meta_signature(secret: str, body: bytes, algorithm: Literal["sha256", "sha1"] = "sha256") -> str:
    """The `X-Hub-Signature-256` value Meta sends for these bytes:
    `sha256=<hex HMAC-SHA256(app secret, raw body)>`. With `sha1`, the legacy
    `X-Hub-Signature` Meta still sends beside it (never trusted here)."""
    return f"{algorithm}=" + hmac.new(secret.encode(), body, algorithm).hexdigest()


def signature_valid(body: bytes, header: str, secret: str) -> bool:
    """Whether `header` is the `X-Hub-Signature-256` of `body` under `secret`."""
    if not secret or not header.startswith(SIGNATURE_PREFIX):
        return False
    expected = meta_signature(secret, body).removeprefix(SIGNATURE_PREFIX)
    given = header.removeprefix(SIGNATURE_PREFIX).strip().lower()
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def _subscription_check(request: HttpRequest) -> HttpResponse:
    token = request.GET.get("hub.verify_token", "")
    expected = settings.META_VERIFY_TOKEN
    if not (
        request.GET.get("hub.mode") == "subscribe"
        and expected
        and hmac.compare_digest(token.encode(), expected.encode())
    ):
        rejection_count(
            provider=Provider.META, source=None, reason="bad subscription check", remote_addr=remote_addr(request)
        )
        return json_error(403, "invalid_verify_token", "hub.mode must be subscribe and hub.verify_token must match")
    return HttpResponse(request.GET.get("hub.challenge", ""), content_type="text/plain")


def _store(request: HttpRequest, body: bytes) -> list[Accepted]:
    try:
        delivery = delivery_parse(body)
    except MalformedPayload as exc:
        return [
            accept(
                request,
                provider=Provider.META,
                external_id=body_digest(body),
                body=body,
                kind=DELIVERY,
                malformed=str(exc),
            )
        ]
    sources: dict[tuple[str, str], Source | None] = {}
    stored = []
    # All or nothing: a crash half-way answers 500 and Meta's retry stores the rest.
    with transaction.atomic():
        # Sorted, so two batches sharing items insert them in the same order
        # and wait on each other instead of deadlocking.
        for item in sorted(delivery.items, key=lambda i: (i.provider, i.external_id)):
            where = (item.provider, item.account_id)
            if where not in sources:
                sources[where] = source_for_account(*where)
            stored.append(
                accept(
                    request,
                    provider=item.provider,
                    external_id=item.external_id,
                    body=body,
                    source=sources[where],
                    kind=item.kind,
                )
            )
        if delivery.problems or not delivery.items:
            # Kept whole: a failed one to look at (its good items are stored above),
            # or an empty one whose processing marks it ignored.
            stored.append(
                accept(
                    request,
                    provider=delivery.provider,
                    external_id=body_digest(body),
                    body=body,
                    kind=DELIVERY,
                    malformed="; ".join(delivery.problems)[:1000],
                )
            )
    return stored


@csrf_exempt
@require_http_methods(["GET", "POST"])
def meta_hook(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return _subscription_check(request)
    try:
        body = raw_body(request)
        if not signature_valid(body, request.META.get("HTTP_X_HUB_SIGNATURE_256", ""), settings.META_APP_SECRET):
            raise reject(request, provider=Provider.META, source=None, reason="bad or missing X-Hub-Signature-256")
        stored = _store(request, body)
    except WebhookError as exc:
        return exc.response()
    return JsonResponse(
        {
            "events": [{"id": a.event.public_id, "status": a.event.status, "duplicate": a.duplicate} for a in stored],
            "duplicate": all(a.duplicate for a in stored),
        }
    )


urlpatterns = [path("hooks/meta/", meta_hook, name="hook-meta")]


# ------------------------------------------------------------ processing


def _item_of(event: InboundEvent) -> Item:
    for item in delivery_parse(bytes(event.body)).items:
        if item.kind == event.kind and item.external_id[:200] == event.external_id:
            return item
    raise MalformedPayload(f"no {event.kind} item {event.external_id!r} in the stored body")


def _source_of(event: InboundEvent, item: Item) -> Source:
    source = event.source or source_for_account(item.provider, item.account_id)
    if source is None:
        key = ACCOUNT_KEY[item.provider]
        raise SourceNotConfigured(
            f"no active {item.provider} source has {key} {item.account_id!r}: add one, then replay this event"
        )
    return source


def _source_stamp(event: InboundEvent, source: Source) -> None:
    # An event stored before its source existed learns it on replay.
    if event.source_id != source.pk:
        InboundEvent.objects.filter(pk=event.pk).update(source=source, business=source.business)
        event.source, event.business = source, source.business


def _epoch(value: Any, *, per_second: int = 1) -> datetime | None:
    """A Unix time (seconds, or milliseconds with per_second=1000) as UTC."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    try:
        return datetime.fromtimestamp(value / per_second, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _graph_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)  # "2026-03-14T15:02:11+0000" parses since Python 3.11
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# field_data keys that fill a Capture field; every other key is kept as an answer.
CONSUMED = {
    "full_name",
    "first_name",
    "last_name",
    "email",
    "work_email",
    "phone_number",
    "work_phone_number",
    "zip_code",
    "post_code",
    "postal_code",
    "street_address",
}
# Meta's Lead Ads Testing Tool fills every field this way (as far as its samples show).
TEST_LEAD_MARK = "<test lead"


def lead_capture(lead: dict[str, Any], *, notified: dict[str, Any], received_at: datetime) -> Capture:
    """A Graph API lead as a Capture. `notified` is the webhook's change value,
    a fallback for ids the read left out."""
    field_data = lead.get("field_data")
    if not isinstance(field_data, list):
        raise MalformedPayload("the Graph API lead has no field_data list")
    fields: dict[str, list[str]] = {}
    for entry in field_data:
        if isinstance(entry, dict) and entry.get("name"):
            values = entry.get("values")
            values = values if isinstance(values, list) else [] if values is None else [values]
            fields[str(entry["name"])] = [str(v).strip() for v in values if v is not None]

    def first(*keys: str) -> str:
        return next((v for k in keys for v in fields.get(k, []) if v), "")

    def every(*keys: str) -> list[str]:
        return [v for k in keys for v in fields.get(k, []) if v]

    first_name, last_name = first("first_name"), first("last_name")
    if not (first_name or last_name):
        first_name, last_name = split_name(first("full_name"))
    answers: dict[str, Any] = {
        key: values[0] if len(values) == 1 else values for key, values in fields.items() if key not in CONSUMED
    }
    if "is_organic" in lead:
        answers["is_organic"] = truthy(lead["is_organic"])
    if lead.get("platform"):
        answers["platform"] = str(lead["platform"])
    service = " ".join(str(v) for k, v in answers.items() if "service" in k.lower() and isinstance(v, str))
    # The webhook's adgroup_id is the legacy name of the *ad* id; the ad set
    # (our adgroup) comes only from the Graph read.
    touch = {
        "provider": Provider.META,
        "campaign_id": _id(lead.get("campaign_id")),
        "adgroup_id": _id(lead.get("adset_id")),
        "ad_id": _id(lead.get("ad_id")) or _id(notified.get("ad_id")),
        "form_id": _id(lead.get("form_id")) or _id(notified.get("form_id")),
        # What Meta's Conversions API for CRM matches this lead's later stages on.
        "meta_lead_id": _id(lead.get("id")) or _id(notified.get("leadgen_id")),
    }
    occurred_at = _graph_time(lead.get("created_time")) or _epoch(notified.get("created_time")) or received_at
    return Capture(
        channel="form",
        occurred_at=occurred_at,
        first_name=first_name,
        last_name=last_name,
        phones=every("phone_number", "work_phone_number"),
        emails=every("email", "work_email"),
        postal_code=first("zip_code", "post_code", "postal_code"),
        address=", ".join(v for v in (first("street_address"), first("city"), first("state")) if v),
        service_hint=service.replace("_", " "),
        answers=answers,
        touch=touch,
        is_test=any(v.lower().startswith(TEST_LEAD_MARK) for values in fields.values() for v in values),
    )


def _fetch_leadgen(event: InboundEvent) -> dict[str, Any]:
    # The prepare step: runs outside the processing transaction, so nothing
    # is held open while Meta is slow.
    item = _item_of(event)
    source = _source_of(event, item)
    if not source.page_token:
        raise SourceNotConfigured(f"source {source.key!r} has no access_token: add the page token, then replay")
    return lead_fetch(item.external_id, access_token=source.page_token)


def _process_leadgen(event: InboundEvent, lead: dict[str, Any]) -> str:
    item = _item_of(event)
    source = _source_of(event, item)
    capture = lead_capture(lead, notified=item.data, received_at=event.received_at)
    _source_stamp(event, source)
    capture_apply(business=source.business, capture=capture, source=source, event=event)
    return InboundEvent.Status.PROCESSED


def dm_capture(item: Item, *, received_at: datetime) -> Capture:
    message = item.data["message"]
    text = message.get("text") if isinstance(message.get("text"), str) else ""
    lines = [text] if text else []
    for attachment in message.get("attachments") or []:
        if isinstance(attachment, dict):
            payload = attachment.get("payload")
            url = payload.get("url", "") if isinstance(payload, dict) else ""
            lines.append(f"[{attachment.get('type', 'attachment')}] {url}".strip())
    referral = message.get("referral") or item.data.get("referral") or {}
    return Capture(
        channel="dm",
        occurred_at=_epoch(item.data.get("timestamp"), per_second=1000) or received_at,
        handles=[("instagram", _id(item.data["sender"]["id"]))],
        request_text=text,
        message_body="\n".join(lines),
        message_sid=message_sid(item.external_id),
        touch={
            "provider": Provider.INSTAGRAM,
            "to": item.account_id,
            # A click-to-message ad opens the thread with a referral.
            "ad_id": _id(referral.get("ad_id")) if isinstance(referral, dict) else "",
        },
    )


def _process_dm(event: InboundEvent) -> str:
    item = _item_of(event)
    message = item.data["message"]
    if truthy(message.get("is_echo", False)):
        return _process_echo(event, item)
    if truthy(message.get("is_deleted", False)):
        return InboundEvent.Status.IGNORED
    source = _source_of(event, item)
    _source_stamp(event, source)
    applied = capture_apply(
        business=source.business, capture=dm_capture(item, received_at=event.received_at), source=source, event=event
    )
    if applied.message is not None:
        # A STOP by DM revokes DMs; plain words that read as a revocation or a
        # complaint pause automation and ask a person, as a text does; a reply
        # ends automation (agents/followup/inbound_messages.py).
        message_arrived(applied.message, applied.lead, created_lead=applied.created_lead)
    return InboundEvent.Status.PROCESSED


def _process_echo(event: InboundEvent, item: Item) -> str:
    """Our own DMs come back as echoes: never recorded as the person's (that
    would loop), but one of ours whose Send API answer was lost is settled
    by its echo (agents.outbound.instagram)."""
    source = event.source or source_for_account(item.provider, item.account_id)
    recipient = item.data.get("recipient")
    if source is None or not isinstance(recipient, dict):
        return InboundEvent.Status.IGNORED
    _source_stamp(event, source)
    text = item.data["message"].get("text")
    settled = dm_echo_apply(
        business_id=source.business_id,
        recipient=_id(recipient.get("id")),
        mid=item.external_id,
        text=text if isinstance(text, str) else "",
        at=_epoch(item.data.get("timestamp"), per_second=1000),
    )
    return InboundEvent.Status.PROCESSED if settled else InboundEvent.Status.IGNORED


def _process_seen(event: InboundEvent) -> str:
    """The person saw a DM: delivery proof for ours up to it."""
    item = _item_of(event)
    source = _source_of(event, item)
    _source_stamp(event, source)
    read = item.data["read"]
    moved = dm_seen_apply(
        business_id=source.business_id,
        reader=_id(item.data["sender"]["id"]),
        mid=_id(read.get("mid")),
        at=_epoch(item.data.get("timestamp"), per_second=1000) or _epoch(read.get("watermark"), per_second=1000),
    )
    return InboundEvent.Status.PROCESSED if moved else InboundEvent.Status.IGNORED


def _process_delivery(event: InboundEvent) -> str:
    """A whole body: replayed after a parser fix, it stores its items as
    their own events (repeats are duplicates); with nothing for us, ignored."""
    delivery = delivery_parse(bytes(event.body))
    if delivery.problems:
        raise MalformedPayload("; ".join(delivery.problems))
    for item in delivery.items:
        event_accept(
            provider=item.provider,
            external_id=item.external_id,
            body=bytes(event.body),
            headers=event.headers,
            source=source_for_account(item.provider, item.account_id),
            kind=item.kind,
        )
    return InboundEvent.Status.PROCESSED if delivery.items else InboundEvent.Status.IGNORED


handler_register(Provider.META, LEADGEN, _process_leadgen, prepare=_fetch_leadgen)
handler_register(Provider.INSTAGRAM, DM, _process_dm)
handler_register(Provider.INSTAGRAM, SEEN, _process_seen)
handler_register(Provider.META, DELIVERY, _process_delivery)
handler_register(Provider.INSTAGRAM, DELIVERY, _process_delivery)
