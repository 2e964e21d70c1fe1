"""Replies inside a marketplace's own thread (Thumbtack, Yelp), through the
one send gate and dispatcher like any text.

A marketplace sends one customer's request to several businesses at once,
and the first to answer usually wins. A customer who gave no phone consent
can be answered only where they asked: in the marketplace's thread. Each
marketplace is a channel named after it (`thumbtack`, `yelp`):

- the recipient is the person's handle there (a ContactPoint of the
  channel's kind); the gate needs no grant for it, and only the person's
  revocation blocks it (agents.consent.policy);
- `to` is the thread: the one the person last wrote in (an inbound
  message's `to`), else the `thread_id` of the lead's newest touch from
  that marketplace (a Thumbtack negotiation, a Yelp lead);
- `from_number` is the key of the source that thread came in through; its
  access token (`Source.page_token`, the business file's `access_token`)
  sends.

Each marketplace registers its `ThreadApi` from its capture module
(`marketplace_api_register`): how to post one text into one thread, and how
to look for one of ours in it. An answer is sorted like Meta's: `sent` (with
the marketplace's id when it names one), `throttled` (429: tried again
later), `failed` (any other 4xx), `unknown` (a 5xx, a timeout, a dropped
connection: it may be in the thread). An unknown one is never posted again
blindly: the message sweep looks in the thread first (agents.outbound.
reconcile), and an echo of it in the marketplace's webhook settles it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import requests
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.meta_graph import USER_AGENT, redact
from crm.models import Lead, LeadTouch, Message, Source
from crm.registry import Registry
from crm.selectors import rows_held
from crm.services.receipts import receipt_write

MARKETPLACE_CHANNELS = ("thumbtack", "yelp")
ACTOR = "agent:marketplace"
CONNECT_TIMEOUT = 3.05
READ_TIMEOUT = 10.0


@dataclass(frozen=True)
class ThreadOutcome:
    """What a marketplace's answer to one post means for the message."""

    status: str  # sent, throttled, failed, unknown
    message_id: str = ""
    error: str = ""  # short, for Message.error_code: "HTTP 404", "ReadTimeout", "no_access_token"
    detail: str = ""  # for the receipt; never holds the token


class ThreadLookupError(Exception):
    """The marketplace could not be asked what its thread holds (this time)."""


# (source, thread, text) → outcome; (source, thread, text, since) → the id
# of our text in the thread ("" when it names none), or None when absent.
Send = Callable[[Source, str, str], ThreadOutcome]
Find = Callable[[Source, str, str, datetime], str | None]


@dataclass(frozen=True)
class ThreadApi:
    send: Send
    find: Find | None = None


THREAD_APIS: Registry[ThreadApi] = Registry("marketplace thread API")


def marketplace_api_register(channel: str, api: ThreadApi) -> None:
    THREAD_APIS.register(channel, api)


def thread_timeout() -> tuple[float, float]:
    """(connect, read) seconds: MARKETPLACE_TIMEOUT when set, else the defaults."""
    connect, read = getattr(settings, "MARKETPLACE_TIMEOUT", None) or (CONNECT_TIMEOUT, READ_TIMEOUT)
    return float(connect), float(read)


def text_key(text: str) -> str:
    """A text as a marketplace may hand it back: NFC, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFC", text).split())


# ------------------------------------------------------------------- routing


def thread_for(lead: Lead, channel: str) -> str:
    """The thread a reply to `lead` on `channel` goes into: the one the
    person last wrote in, else its newest touch's from that marketplace
    ("" when it has none)."""
    wrote_in = (
        Message.objects.filter(lead=lead, direction="in", channel=channel)
        .exclude(to="")
        .order_by("-created_at", "-pk")
        .values_list("to", flat=True)
        .first()
    )
    if wrote_in:
        return str(wrote_in)
    held = rows_held(lead, "touches")
    if held is not None:
        touches = [t for t in held if t.provider == channel and t.thread_id]
        return max(touches, key=lambda t: (t.received_at, t.pk)).thread_id if touches else ""
    return (
        LeadTouch.objects.filter(lead=lead, provider=channel)
        .exclude(thread_id="")
        .order_by("-received_at", "-pk")
        .values_list("thread_id", flat=True)
        .first()
        or ""
    )


def lead_marketplace_channel(lead: Lead) -> str:
    """The marketplace whose thread `lead` came in on last ("" for none)."""
    held = rows_held(lead, "touches")
    if held is not None:
        touches = [t for t in held if t.provider in MARKETPLACE_CHANNELS and t.thread_id]
        return max(touches, key=lambda t: (t.received_at, t.pk)).provider if touches else ""
    return (
        LeadTouch.objects.filter(lead=lead, provider__in=MARKETPLACE_CHANNELS)
        .exclude(thread_id="")
        .order_by("-received_at", "-pk")
        .values_list("provider", flat=True)
        .first()
        or ""
    )


def thread_source_key(business_id: int, channel: str, thread: str) -> str:
    """The key of the active source `thread` came in through; else the
    business's first active source of that marketplace; "" when none."""
    sources = Source.objects.filter(business_id=business_id, provider=channel, is_active=True)
    if thread:
        key = (
            LeadTouch.objects.filter(business_id=business_id, provider=channel, thread_id=thread, source__in=sources)
            .order_by("-received_at", "-pk")
            .values_list("source__key", flat=True)
            .first()
        )
        if key:
            return str(key)
    return str(sources.order_by("pk").values_list("key", flat=True).first() or "")


def _source(message: Message) -> Source | None:
    return Source.objects.filter(
        business_id=message.business_id, provider=message.channel, key=message.from_number, is_active=True
    ).first()


# ------------------------------------------------------------------- sending


def marketplace_post(message: Message) -> ThreadOutcome:
    """Post one claimed message into its thread, once. Makes no database writes."""
    source = _source(message)
    if source is None or not source.page_token:
        # Nothing reached the marketplace: the business must configure it first.
        return ThreadOutcome(
            "failed",
            error="no_access_token",
            detail=f"no active {message.channel} source {message.from_number!r} with an access_token",
        )
    if not message.to:
        return ThreadOutcome("failed", error="no_thread", detail=f"the lead has no {message.channel} thread")
    return THREAD_APIS[message.channel].send(source, message.to, message.body)


def thread_post(
    url: str, *, token: str, payload: dict[str, Any], message_id: Callable[[Any], str] = lambda data: ""
) -> ThreadOutcome:
    """POST `payload` to a marketplace with the source's Bearer token, once,
    and sort the answer (see the module). The token travels in a header,
    never in the URL."""
    headers = {"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT, "Accept": "application/json"}
    try:
        response = requests.post(url, json=payload, headers=headers, timeout=thread_timeout())
    except requests.RequestException as exc:
        # Sent or not, no one can say: the request may have reached the marketplace.
        return ThreadOutcome("unknown", error=type(exc).__name__, detail=redact(f"{type(exc).__name__}: {exc}", token))
    status = response.status_code
    detail = f"HTTP {status}: {redact(response.text[:300], token)}"
    if status < 300:
        try:
            data = response.json()
        except ValueError:
            data = None
        return ThreadOutcome("sent", message_id=str(message_id(data) or "")[:200])
    if status == 429:
        return ThreadOutcome("throttled", error="429", detail=detail)
    if status >= 500:
        return ThreadOutcome("unknown", error=f"HTTP {status}", detail=detail)
    return ThreadOutcome("failed", error=f"HTTP {status}", detail=detail)


def thread_get(url: str, *, token: str, params: dict[str, Any] | None = None) -> Any:
    """GET a marketplace's JSON with the source's Bearer token. Raises
    ThreadLookupError for anything but a readable 2xx (never with the token)."""
    headers = {"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT, "Accept": "application/json"}
    try:
        response = requests.get(url, params=params, headers=headers, timeout=thread_timeout())
    except requests.RequestException as exc:
        raise ThreadLookupError(redact(f"{type(exc).__name__}: {exc}", token)) from None
    if response.status_code >= 300:
        raise ThreadLookupError(f"HTTP {response.status_code}: {redact(response.text[:300], token)}")
    try:
        return response.json()
    except ValueError as exc:
        raise ThreadLookupError(f"HTTP {response.status_code} without JSON: {exc}") from None


def marketplace_find(message: Message) -> str | None:
    """Our text in the message's thread, posted since its claim: the
    marketplace's id for it ("" when it names none), None when it is not
    there. Raises ThreadLookupError when the marketplace cannot be asked."""
    source = _source(message)
    api = THREAD_APIS.get(message.channel)
    if source is None or not source.page_token or api is None or api.find is None or not message.to:
        raise ThreadLookupError(f"the {message.channel} thread cannot be read: no source, token or lookup")
    since = message.claimed_at or message.created_at
    return api.find(source, message.to, message.body, since)


@transaction.atomic
def thread_echo_apply(*, business_id: int, channel: str, thread: str, message_id: str, text: str) -> bool:
    """The marketplace's webhook told of a business message in `thread`:
    one of ours whose answer was lost (`unknown`, no id yet) with the same
    text is settled `sent` now. False when it settles nothing (a reply typed
    in the marketplace's app, or one of ours whose id we hold)."""
    sid = f"{channel}:{message_id}"
    if Message.objects.filter(provider_sid=sid).exists():
        return False
    key = text_key(text)
    candidates = (
        Message.objects.filter(
            business_id=business_id,
            direction="out",
            channel=channel,
            to=thread,
            status=Message.Status.UNKNOWN,
            provider_sid__isnull=True,
        )
        .select_related("business", "lead")
        .order_by("claimed_at", "pk")
    )
    message = next((m for m in candidates if text_key(m.body) == key), None)
    if message is None:
        return False
    # Conditional: the sweep may be settling it at this moment.
    if not Message.objects.filter(pk=message.pk, status=Message.Status.UNKNOWN, provider_sid__isnull=True).update(
        status=Message.Status.SENT, provider_sid=sid, sent_at=timezone.now()
    ):
        return False
    receipt_write(
        business=message.business,
        lead=message.lead,
        subject=message.public_id,
        actor=ACTOR,
        action="message.reconciled_sent",
        reason=f"{channel} told of it in the thread: the send whose answer was lost went out",
        before={"status": Message.Status.UNKNOWN},
        after={"status": Message.Status.SENT, "sid": sid},
    )
    return True
