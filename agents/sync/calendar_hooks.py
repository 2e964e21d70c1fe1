"""Calendars' change notifications: verified, stored raw, answered at once;
processed later into a read of what changed.

- Google (`POST /hooks/google-calendar/`): a channel made by `events.watch`
  posts an empty body; `X-Goog-Channel-ID` names the channel (so the
  connection) and `X-Goog-Channel-Token` must be the token we gave it (401
  otherwise, counted for the manager). `X-Goog-Resource-State` is `sync`
  for the channel's first message (stored, ignored) and `exists` /
  `not_exists` for a change. The delivery is stored deduplicated on the
  channel and `X-Goog-Message-Number`.
- Microsoft Graph (`POST /hooks/microsoft-calendar/`): a new subscription
  is validated by a POST with `?validationToken=`, answered 200 text/plain
  with the token within 10 seconds. A notification is
  `{"value": [{subscriptionId, clientState, changeType, resource,
  resourceData: {id}}]}`: each item's `clientState` must be the one we gave
  its subscription (no item verified: 401). Each verified item is stored on
  its own, deduplicated on its bytes (Graph gives notifications no id).

Processing (`_changed`) writes the connection's reads as sync pulls (a
waiting one coalesces duplicates): the named event when there is one, and
the calendar's changes since the cursor with its busy times
(agents.sync.engine.calendar_changes).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.capture.base import json_object
from agents.capture.intake import event_accept, headers_kept
from agents.capture.webhooks import WebhookError, accept, accepted_response, raw_body, reject, remote_addr
from agents.sync.base import VISIT
from crm.models import InboundEvent, SyncConnection
from crm.services.inbound_handlers import MalformedPayload, RetryLater, handler_register
from crm.services.sync import sync_pull_enqueue

GOOGLE = "google_calendar"
MICROSOFT = "microsoft365"
GOOGLE_CHANGES = ("exists", "not_exists")
MICROSOFT_CHANGES = ("created", "updated", "deleted")


def _channel(provider: str, channel_id: str, token: str) -> SyncConnection | None:
    """The connection whose channel this is, when the token is the one we gave it."""
    if not channel_id or not token:
        return None
    conn = SyncConnection.objects.select_related("business").filter(provider=provider, channel_id=channel_id).first()
    if conn is None or not secrets.compare_digest(conn.channel_token.encode(), token.encode()):
        return None
    return conn


@csrf_exempt
@require_POST
def google_hook(request: HttpRequest) -> HttpResponse:
    try:
        raw_body(request)  # bounded read: Google's body is empty
        channel_id = request.headers.get("X-Goog-Channel-ID", "")
        conn = _channel(GOOGLE, channel_id, request.headers.get("X-Goog-Channel-Token", ""))
        if conn is None:
            raise reject(request, provider=GOOGLE, source=None, reason="unknown channel or bad X-Goog-Channel-Token")
        state = request.headers.get("X-Goog-Resource-State", "")
        number = request.headers.get("X-Goog-Message-Number", "")
        # The notification is its headers: they are what is stored.
        body = json.dumps(
            {
                "connection": conn.public_id,
                "channel_id": channel_id,
                "resource_id": request.headers.get("X-Goog-Resource-ID", ""),
                "resource_state": state,
                "message_number": number,
            },
            sort_keys=True,
        ).encode()
        external_id = f"{channel_id}:{number or hashlib.sha256(body).hexdigest()}"
        if state not in GOOGLE_CHANGES:
            headers = headers_kept(request.META)
            headers["Remote-Addr"] = remote_addr(request)
            ignored = event_accept(
                provider=GOOGLE,
                external_id=external_id,
                body=body,
                headers=headers,
                business=conn.business,
                kind=state[:64],
                status=InboundEvent.Status.IGNORED,
            )
            return accepted_response(ignored)
        accepted = accept(
            request, provider=GOOGLE, external_id=external_id, body=body, business=conn.business, kind=state
        )
    except WebhookError as exc:
        return exc.response()
    return accepted_response(accepted)


@csrf_exempt
@require_POST
def microsoft_hook(request: HttpRequest) -> HttpResponse:
    token = request.GET.get("validationToken")
    if token is not None:
        # Graph checks a new subscription's URL: the token back, as plain text.
        return HttpResponse(token, content_type="text/plain", status=200)
    try:
        body = raw_body(request)
        try:
            items = json_object(body).get("value")
        except MalformedPayload as exc:
            raise reject(request, provider=MICROSOFT, source=None, reason=str(exc), status=400) from exc
        if not isinstance(items, list) or not items:
            raise reject(request, provider=MICROSOFT, source=None, reason="no notifications in `value`", status=400)
        verified: list[tuple[SyncConnection, dict[str, Any]]] = []
        for item in items:
            if not isinstance(item, dict):
                continue
            conn = _channel(MICROSOFT, str(item.get("subscriptionId") or ""), str(item.get("clientState") or ""))
            if conn is not None:
                verified.append((conn, item))
        if not verified:
            raise reject(request, provider=MICROSOFT, source=None, reason="unknown subscription or bad clientState")
        accepted = None
        for conn, item in verified:
            one = json.dumps({**item, "connection": conn.public_id}, sort_keys=True).encode()
            accepted = accept(
                request,
                provider=MICROSOFT,
                external_id=f"{item['subscriptionId']}:{hashlib.sha256(one).hexdigest()}",
                body=one,
                business=conn.business,
                kind=str(item.get("changeType") or "")[:64],
            )
    except WebhookError as exc:
        return exc.response()
    assert accepted is not None  # one verified item at least
    return accepted_response(accepted, status=202)  # what Graph expects of a notification's endpoint


def _changed(event: InboundEvent) -> str:
    data = json_object(bytes(event.body))
    conn = SyncConnection.objects.filter(public_id=str(data.get("connection") or "")).first()
    if conn is None:
        raise RetryLater("the notification's connection is not here")
    if conn.status == SyncConnection.Status.DISCONNECTED:
        return InboundEvent.Status.IGNORED
    resource = data.get("resourceData")
    event_id = str(resource.get("id") or "") if isinstance(resource, dict) else ""
    if event_id:
        sync_pull_enqueue(conn, kind=VISIT, external_id=event_id)
    sync_pull_enqueue(conn, kind=VISIT, external_id="")
    return InboundEvent.Status.PROCESSED


def calendar_hooks_register() -> None:
    for state in GOOGLE_CHANGES:
        handler_register(GOOGLE, state, _changed)
    for change in MICROSOFT_CHANGES:
        handler_register(MICROSOFT, change, _changed)


urlpatterns: list[URLPattern] = [
    path("hooks/google-calendar/", google_hook, name="hook-google-calendar"),
    path("hooks/microsoft-calendar/", microsoft_hook, name="hook-microsoft-calendar"),
]
