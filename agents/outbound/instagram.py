"""Instagram DMs out: Meta's Send API, and what Meta tells us afterwards.

A DM is sent from the Instagram account the person wrote to (an
Instagram-scoped id belongs to one account), with the access token of the
business's `instagram` source for that account (`Source.page_token`,
encrypted, write-only: the business file's `access_token`):

    POST {META_GRAPH_URL}/me/messages   Authorization: Bearer <token>
    {"recipient": {"id": <IGSID>}, "message": {"text": …}, "messaging_type": "RESPONSE"}

`me` is the account the token belongs to, with a Page token on
graph.facebook.com and with an Instagram user token on graph.instagram.com
alike. One attempt, with explicit timeouts, never retried here: a POST that
timed out may have been sent, so the dispatcher marks it `unknown` instead
(agents.outbound.dispatch). Meta's answers, sorted for the dispatcher:

- `{"message_id": …}` → sent (the id becomes `provider_sid`);
- code 10 with a window subcode (Messenger's 2018278, Instagram's 2534022) →
  refused as outside the 24-hour window;
- a rate limit (HTTP 429; codes 4, 17, 32, 613, the 80000s business-use-case
  limits; 1200, a temporary send failure) → not sent, try again later;
- any other 4xx → refused with Meta's code;
- a 5xx, a timeout or a dropped connection → unknown.

Afterwards: Instagram has no per-message delivery receipt (Messenger's
`message_deliveries` is not sent for Instagram). Two webhook events speak
for a DM we sent: its echo (`is_echo`, the same mid: Meta put it in the
thread), which settles a send whose answer was lost (`unknown`) as `sent`;
and `messaging_seen` (`read.mid`: the person saw it), which proves delivery:
that DM and the person's earlier ones from us become `delivered`. Without a
seen event `sent` is the last state a DM reaches.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import requests
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.meta_graph import USER_AGENT, graph_error_text, graph_timeout, message_sid, redact
from crm.models import ContactPoint, Message, Provider, Source
from crm.services.receipts import receipt_write

ACTOR = "agent:instagram"
# Meta's "This message is sent outside of allowed window": code 10 with these
# subcodes (Messenger's and the one Instagram answers with).
WINDOW_CODE = 10
WINDOW_SUBCODES = frozenset({2018278, 2534022})
# Throttling: the request was refused before anything was sent.
RATE_LIMIT_CODES = frozenset({4, 17, 32, 613})
BUSINESS_USE_CASE_LIMITS = range(80000, 80100)
TEMPORARY_SEND_FAILURE = 1200


@dataclass(frozen=True)
class DmOutcome:
    """What the Send API's answer means for the message."""

    status: str  # sent, outside_window, throttled, failed, unknown
    message_id: str = ""
    error: str = ""  # short, for Message.error_code: "10/2534022", "190", "HTTP 502", "ReadTimeout"
    detail: str = ""  # for the receipt; never holds the token


def instagram_sources(business_id: int) -> list[Source]:
    return list(
        Source.objects.filter(business_id=business_id, provider=Provider.INSTAGRAM, is_active=True).order_by("pk")
    )


def _account(source: Source) -> str:
    return str(source.config.get("account_id") or "").strip()


def instagram_account_for(business_id: int, point: ContactPoint | None) -> str:
    """The business's Instagram account a DM to `point` goes from: the one
    the person last wrote to, while it is one of the business's active
    instagram sources; else its first; "" when it has none."""
    accounts = [a for a in (_account(s) for s in instagram_sources(business_id)) if a]
    if point is not None:
        wrote_to = (
            Message.objects.filter(contact_point=point, direction="in")
            .order_by("-created_at", "-pk")
            .values_list("to", flat=True)
            .first()
        )
        if wrote_to in accounts:
            return str(wrote_to)
    return accounts[0] if accounts else ""


def instagram_source_for(business_id: int, account_id: str) -> Source | None:
    """The active instagram source of the business for this account."""
    return next((s for s in instagram_sources(business_id) if account_id and _account(s) == account_id), None)


def dm_post(*, access_token: str, recipient: str, text: str, base_url: str | None = None) -> DmOutcome:
    """Send one DM through the Send API, once. Makes no database writes."""
    url = f"{(base_url or settings.META_GRAPH_URL).rstrip('/')}/me/messages"
    payload = {"recipient": {"id": recipient}, "message": {"text": text}, "messaging_type": "RESPONSE"}
    # The token travels in a header, never in the URL (URLs reach logs and exception texts).
    headers = {"Authorization": f"Bearer {access_token}", "User-Agent": USER_AGENT}
    try:
        response = requests.post(url, json=payload, headers=headers, timeout=graph_timeout())
    except requests.RequestException as exc:
        # Sent or not, no one can say: the request may have reached Meta.
        return DmOutcome(
            "unknown", error=type(exc).__name__, detail=redact(f"{type(exc).__name__}: {exc}", access_token)
        )
    return dm_answer(response, access_token)


def dm_answer(response: requests.Response, access_token: str = "") -> DmOutcome:
    """Sort one Send API answer (see the module's docstring)."""
    status = response.status_code
    if status < 300:
        try:
            data = response.json()
        except ValueError:
            data = None
        message_id = data.get("message_id") if isinstance(data, dict) else None
        if isinstance(message_id, str) and message_id:
            return DmOutcome("sent", message_id=message_id)
        # A 2xx that names no message: Meta may have sent it.
        return DmOutcome("unknown", error=f"HTTP {status}", detail=f"HTTP {status} without a message_id")
    code, subcode = _error_codes(response)
    detail = f"HTTP {status}: {redact(graph_error_text(response), access_token)}"
    error = f"{code}/{subcode}" if code is not None and subcode is not None else str(code or f"HTTP {status}")
    if status >= 500:
        return DmOutcome("unknown", error=f"HTTP {status}", detail=detail)
    if code == WINDOW_CODE and subcode in WINDOW_SUBCODES:
        return DmOutcome("outside_window", error=error, detail=detail)
    if status == 429 or code in RATE_LIMIT_CODES or code in BUSINESS_USE_CASE_LIMITS or code == TEMPORARY_SEND_FAILURE:
        return DmOutcome("throttled", error=error, detail=detail)
    return DmOutcome("failed", error=error, detail=detail)


def _error_codes(response: requests.Response) -> tuple[int | None, int | None]:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None, None
    if not isinstance(error, dict):
        return None, None

    def number(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return number(error.get("code")), number(error.get("error_subcode"))


# ------------------------------------------------------- what Meta tells us back


def _text_key(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


@transaction.atomic
def dm_echo_apply(*, business_id: int, recipient: str, mid: str, text: str, at: datetime | None) -> bool:
    """An echo of a DM the business's account sent, matched to ours by
    recipient and text when we do not know its id: the earliest such DM whose
    Send API answer is still awaited (`sending`: the id is saved, so a timeout
    that follows leaves it for the sweep to settle) or was lost (`unknown`:
    settled `sent` now, Meta put it in the thread). False when it settles
    nothing (a DM typed in the Instagram app, or one whose id we hold)."""
    sid = message_sid(mid)
    if Message.objects.filter(provider_sid=sid).exists():
        return False
    key = _text_key(text)
    candidates = (
        Message.objects.filter(
            business_id=business_id,
            direction="out",
            channel="instagram",
            status__in=(Message.Status.SENDING, Message.Status.UNKNOWN),
            provider_sid__isnull=True,
            to=recipient,
        )
        .select_related("business", "lead")
        .order_by("claimed_at", "pk")
    )
    matches = [m for m in candidates if _text_key(m.body) == key]
    if not matches:
        return False
    message = matches[0]
    if message.status == Message.Status.SENDING and len(matches) > 1:
        # Two of ours alike in flight: an id kept on the wrong one would clash
        # with the other's answer. Their answers (or the sweep) settle them.
        return False
    # Conditional: the worker or the sweep may be settling it at this moment.
    mine = Message.objects.filter(pk=message.pk, status=message.status, provider_sid__isnull=True)
    if message.status == Message.Status.SENDING:
        return mine.update(provider_sid=sid) == 1
    if not mine.update(status=Message.Status.SENT, provider_sid=sid, sent_at=at or timezone.now()):
        return False
    receipt_write(
        business=message.business,
        lead=message.lead,
        subject=message.public_id,
        actor=ACTOR,
        action="message.reconciled_sent",
        reason="Instagram echoed it into the thread: the send whose answer was lost went out",
        before={"status": Message.Status.UNKNOWN},
        after={"status": Message.Status.SENT, "sid": sid},
    )
    return True


@transaction.atomic
def dm_seen_apply(*, business_id: int, reader: str, mid: str, at: datetime | None) -> int:
    """The person (`reader`, their Instagram-scoped id) saw the DM `mid`: it,
    and every DM of ours to them that went out before it, is delivered.
    Returns how many messages moved; statuses only move forward."""
    ours = Message.objects.filter(business_id=business_id, direction="out", channel="instagram", to=reader)
    seen = ours.filter(provider_sid=message_sid(mid)).first() if mid else None
    if seen is not None:
        # Seen up to that DM: a thread is read from the bottom.
        upto = Q(pk=seen.pk) | Q(status=Message.Status.SENT, sent_at__lte=seen.sent_at or seen.created_at)
    elif at is not None:
        # Not an id of ours (a DM typed in the app): seen up to the moment they looked.
        upto = Q(status=Message.Status.SENT, sent_at__lte=at)
    else:
        return 0
    moved = 0
    for message in (
        ours.filter(upto, status__in=(Message.Status.SENT, Message.Status.UNKNOWN))
        .select_related("business", "lead")
        .order_by("pk")
    ):
        if not Message.objects.filter(pk=message.pk, status=message.status).update(
            status=Message.Status.DELIVERED, delivered_at=at or timezone.now()
        ):
            continue  # moved on meanwhile
        receipt_write(
            business=message.business,
            lead=message.lead,
            subject=message.public_id,
            actor="agent:delivery_status",
            action=f"message.{Message.Status.DELIVERED}",
            reason="Instagram: the person saw it",
            before={"status": message.status},
            after={"status": Message.Status.DELIVERED},
        )
        moved += 1
    return moved
