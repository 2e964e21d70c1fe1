"""Raw first (invariant 1): store what a provider delivered, then process.

A webhook view authenticates the raw bytes, calls `event_accept`, and answers
2xx. The stored row is the work item: its INSERT is the whole of accepting
it, and a trigger wakes the intake loop when it commits
(agents/capture/processing.py), so no worker looks for a row that is not
there yet and no second row (a task) is written beside it.
"""

from __future__ import annotations

import ipaddress
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.http import HttpRequest
from django.utils import timezone

from crm.models import Business, InboundEvent, RejectedDelivery, Source

# Headers worth keeping for inspection and re-verification; never cookies or
# authorization values.
HEADER_ALLOW_LIST = (
    "Content-Type",
    "User-Agent",
    "X-Hub-Signature-256",
    "X-Hub-Signature",
    "Typeform-Signature",
    "X-Twilio-Signature",
    "Calendly-Webhook-Signature",
    "Stripe-Signature",
    "Signature",  # CallRail's
    "X-Forwarded-For",
    "Idempotency-Key",
)
MAX_BODY_BYTES = 1024 * 1024
REJECTIONS_KEPT_DAYS = 30


def client_address(request: HttpRequest) -> str:
    """The client's address behind TRUSTED_PROXY_COUNT proxies: the one rate
    limits count and consent evidence records.

    Each proxy appends the address it received the request from to
    X-Forwarded-For, so with N trusted proxies the client is the N-th entry
    from the right; anything left of it was written by the client itself.
    With no trusted proxy the header is ignored: anyone can send it.
    """
    remote = str(request.META.get("REMOTE_ADDR", ""))
    count = int(settings.TRUSTED_PROXY_COUNT)
    if count <= 0:
        return remote
    forwarded = [part.strip() for part in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")]
    forwarded = [part for part in forwarded if part]
    # A header shorter than the proxy chain did not come through all of it.
    if len(forwarded) < count:
        return remote
    try:
        return str(ipaddress.ip_address(forwarded[-count]))
    except ValueError:
        # Not an address: the proxies are fewer than TRUSTED_PROXY_COUNT says.
        return remote


def headers_kept(meta: dict[str, Any]) -> dict[str, str]:
    kept = {}
    for name in HEADER_ALLOW_LIST:
        key = "CONTENT_TYPE" if name == "Content-Type" else "HTTP_" + name.upper().replace("-", "_")
        if key in meta:
            kept[name] = str(meta[key])[:500]
    return kept


@dataclass(frozen=True)
class Accepted:
    event: InboundEvent
    duplicate: bool


def event_accept(
    *,
    provider: str,
    external_id: str,
    body: bytes,
    headers: dict[str, str],
    source: Source | None = None,
    business: Business | None = None,
    kind: str = "",
    is_test: bool = False,
    status: str = InboundEvent.Status.RECEIVED,
    error: str = "",
) -> Accepted:
    """Store one delivery; a repeat of a stored (provider, external_id)
    accepted by the same source's endpoint (or by the provider-wide one, with
    no source) is a duplicate and changes nothing.

    A new event in `received` status is the intake loop's to process once it
    commits. An event stored already `failed` (a signed body we could not parse) is
    kept for inspection and replay, not processed.
    """
    # A webhook request runs in autocommit: the INSERT is its own transaction,
    # and a refused one leaves the connection usable, so BEGIN and COMMIT
    # would only cost two round trips on the hot path. Inside a transaction
    # (a replay, a test) a savepoint keeps the outer one alive.
    guard = transaction.atomic() if transaction.get_connection().in_atomic_block else nullcontext()
    # The source's business by id: loading it would cost the lookup a join.
    owner: dict[str, Any] = (
        {"business": business} if business else {"business_id": source.business_id if source else None}
    )
    try:
        with guard:
            event = InboundEvent.objects.create(
                provider=provider,
                external_id=external_id[:200],
                body=body,
                headers=headers,
                source=source,
                accepted_by=source,
                **owner,
                kind=kind,
                is_test=is_test,
                signature_ok=True,
                status=status,
                error=error,
                received_at=timezone.now(),
            )
    except IntegrityError:
        # The unique (provider, accepted_by, external_id) constraint, not a
        # prior SELECT, decides: two racing deliveries store one row.
        existing = InboundEvent.objects.filter(
            provider=provider, accepted_by=source, external_id=external_id[:200]
        ).first()
        if existing is None:
            raise  # another constraint refused the row: a real error, not a repeat
        return Accepted(existing, duplicate=True)
    return Accepted(event, duplicate=False)


def rejection_count(*, provider: str, source: Source | None, reason: str, remote_addr: str | None) -> None:
    """Count a refused delivery for the manager, in bounded space: one row per
    source, provider and day, incremented atomically; days older than
    REJECTIONS_KEPT_DAYS are pruned."""
    now = timezone.now()
    lookup = {"provider": provider, "source": source, "day": now.date()}
    values = {"last_reason": reason[:200], "last_remote_addr": remote_addr or None, "last_at": now}
    updated = RejectedDelivery.objects.filter(**lookup).update(count=F("count") + 1, **values)
    if not updated:
        try:
            with transaction.atomic():
                RejectedDelivery.objects.create(
                    **lookup, business_id=source.business_id if source else None, count=1, **values
                )
        except IntegrityError:
            RejectedDelivery.objects.filter(**lookup).update(count=F("count") + 1, **values)
    RejectedDelivery.objects.filter(day__lt=now.date() - timedelta(days=REJECTIONS_KEPT_DAYS)).delete()
