"""What every webhook view shares: the error shape, the size limit, source
lookup, counted rejections and raw-first storage.

A provider view: read the raw body (`raw_body`), find its source, check the
signature on those bytes (`reject` on failure), work out the provider's event
id, and `accept`. Parsing happens later, in processing — except a quick
read-check where a provider needs a malformed body answered differently.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.http import HttpRequest, JsonResponse

from agents.capture.intake import (
    MAX_BODY_BYTES,
    Accepted,
    client_address,
    event_accept,
    headers_kept,
    rejection_count,
)
from agents.capture.source_cache import SOURCES
from crm.models import Business, InboundEvent, Source


class WebhookError(Exception):
    """Answered as `{"error": code, "detail": detail}` with `status`."""

    def __init__(self, status: int, error: str, detail: Any = "") -> None:
        super().__init__(f"{status} {error}: {detail}")
        self.status, self.error, self.detail = status, error, detail

    def response(self) -> JsonResponse:
        return json_error(self.status, self.error, self.detail)


def json_error(status: int, error: str, detail: Any = "") -> JsonResponse:
    return JsonResponse({"error": error, "detail": detail}, status=status)


def raw_body(request: HttpRequest) -> bytes:
    """The exact bytes the provider sent, refused past 1 MiB (413) before
    reading them when the sender declares the length."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise WebhookError(413, "payload_too_large", f"the limit is {MAX_BODY_BYTES} bytes")
    body = request.body
    if len(body) > MAX_BODY_BYTES:
        raise WebhookError(413, "payload_too_large", f"the limit is {MAX_BODY_BYTES} bytes")
    return body


def source_for(key: str, *providers: str) -> Source:
    """The source a URL names (its business loaded with it). A switched-off
    source answers 403, not 404: some providers (Typeform) disable a hook
    for good on a 404. Kept per process (agents/capture/source_cache.py):
    most requests read nothing from the database before storing the event."""
    source = SOURCES.get(key, lambda: _source_load(key))
    if source is None or source.provider not in providers:
        raise WebhookError(404, "unknown_source", f"no source {key!r}")
    if not source.is_active:
        raise WebhookError(403, "source_inactive", f"source {key!r} is switched off")
    return source


def _source_load(key: str) -> Source | None:
    # The key is unique: no ORDER BY (the model's orders by business name,
    # a join and a sort for nothing).
    return next(iter(Source.objects.filter(key=key).select_related("business").order_by()[:1]), None)


def remote_addr(request: HttpRequest) -> str:
    return client_address(request)


def reject(
    request: HttpRequest,
    *,
    provider: str,
    source: Source | None,
    reason: str,
    status: int = 401,
    error: str = "",
) -> WebhookError:
    """Count the refused delivery for the manager and build its answer."""
    rejection_count(provider=provider, source=source, reason=reason, remote_addr=remote_addr(request) or None)
    return WebhookError(status, error or ("invalid_signature" if status in (401, 403) else "rejected"), reason)


def body_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def accept(
    request: HttpRequest,
    *,
    provider: str,
    external_id: str,
    body: bytes,
    source: Source | None = None,
    business: Business | None = None,
    kind: str = "",
    is_test: bool = False,
    malformed: str = "",
    extra_headers: dict[str, str] | None = None,
) -> Accepted:
    """Store the delivery (or find the stored one). A `malformed` reason stores
    the event already failed, for inspection and replay, without processing."""
    headers = headers_kept(request.META)
    headers["Remote-Addr"] = remote_addr(request)
    headers.update(extra_headers or {})
    return event_accept(
        provider=provider,
        external_id=external_id,
        body=body,
        headers=headers,
        source=source,
        business=business,
        kind=kind,
        is_test=is_test,
        status=InboundEvent.Status.FAILED if malformed else InboundEvent.Status.RECEIVED,
        error=f"malformed payload: {malformed}" if malformed else "",
    )


def accepted_response(accepted: Accepted, status: int = 200) -> JsonResponse:
    return JsonResponse(
        {"id": accepted.event.public_id, "status": accepted.event.status, "duplicate": accepted.duplicate},
        status=status,
    )
