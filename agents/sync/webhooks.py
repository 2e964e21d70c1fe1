"""Webhooks of the systems of record (`POST /hooks/<provider>/`, one app-wide
URL per adapter): verified, stored raw, answered at once; processed later.

The view checks the adapter's signature on the raw bytes (a bad or missing
one is 401, counted for the manager; Housecall Pro signs with each
company's own secret, so a company no connection holds is refused the same
way), reads which account and record the body names, and stores the
delivery as an `InboundEvent` (raw first) deduplicated on (topic, record,
time): a redelivery is a duplicate. That is
all it does before answering, well inside Jobber's one second. A signed body
it cannot read is stored failed, for inspection and replay, and answered
200 (the provider would only send the same bytes again); a topic no adapter
acts on is stored ignored.

Processing (`_notice_process`, registered per topic) finds the connection by
the account and writes a pull (crm.services.sync.sync_pull_enqueue): the
sync pump reads the record and applies it. A notice for an account no
connection holds yet (its webhook beat the OAuth callback) waits
(`RetryLater`) and is processed once the account is connected; the app
removed on their side stops the connection for a person.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.capture.base import json_object
from agents.capture.intake import event_accept, headers_kept
from agents.capture.webhooks import WebhookError, accept, accepted_response, body_digest, raw_body, reject, remote_addr
from agents.sync.adapters import INSTALLED
from agents.sync.base import ADAPTERS, Notice, SyncAdapter
from crm.models import InboundEvent, SyncConnection
from crm.services.inbound_handlers import MalformedPayload, RetryLater, handler_register
from crm.services.sync import connection_needs_person, sync_pull_enqueue

ACTOR = "agent:sync"


def _connection(provider: str, account_id: str) -> SyncConnection | None:
    if not account_id:
        return None
    return SyncConnection.objects.select_related("business").filter(provider=provider, account_id=account_id).first()


def _notice_of(adapter: SyncAdapter, event: InboundEvent) -> Notice:
    return adapter.notice(json_object(bytes(event.body)))


def _notice_process(event: InboundEvent) -> str:
    adapter = ADAPTERS[event.provider]
    notice = _notice_of(adapter, event)
    conn = _connection(event.provider, notice.account_id)
    if conn is None:
        raise RetryLater(f"no {adapter.name} connection holds account {notice.account_id} yet: connect it")
    if event.business_id is None:
        InboundEvent.objects.filter(pk=event.pk).update(business=conn.business)
    if notice.disconnected:
        connection_needs_person(
            conn,
            status=SyncConnection.Status.DISCONNECTED,
            why=f"our app was removed from the {adapter.name} account",
            actor=f"{ACTOR}:{conn.provider}",
        )
        return InboundEvent.Status.PROCESSED
    if conn.status == SyncConnection.Status.DISCONNECTED or not notice.kind:
        return InboundEvent.Status.IGNORED
    sync_pull_enqueue(conn, kind=notice.kind, external_id=notice.external_id)
    # A record that is two of ours (a Housecall Pro job is its visit too) reads both.
    companions: dict[str, tuple[str, ...]] = getattr(adapter, "companions", {})
    for kind in companions.get(notice.kind, ()):
        sync_pull_enqueue(conn, kind=kind, external_id=notice.external_id)
    return InboundEvent.Status.PROCESSED


def notices_register(adapter: SyncAdapter) -> None:
    for topic in adapter.topics:
        handler_register(adapter.provider, topic, _notice_process)


def hook(adapter: SyncAdapter) -> Callable[[HttpRequest], HttpResponse]:
    """The webhook view of one adapter."""

    @csrf_exempt
    @require_POST
    def view(request: HttpRequest) -> HttpResponse:
        provider = adapter.provider
        try:
            body = raw_body(request)
            if not adapter.verify(body, request.headers):
                raise reject(
                    request, provider=provider, source=None, reason=f"bad or missing {adapter.signature_header}"
                )
            malformed, notice = "", None
            try:
                notice = adapter.notice(json_object(body))
            except MalformedPayload as exc:
                malformed = str(exc)
            conn = _connection(provider, notice.account_id) if notice else None
            business = conn.business if conn else None
            # Jobber's deliveries carry no id of their own: the topic, the
            # record and the time of the change make one.
            external_id = f"{notice.topic}:{notice.external_id}:{notice.occurred_at}" if notice else body_digest(body)
            if notice is not None and not notice.kind and not notice.disconnected:
                headers = headers_kept(request.META)
                headers["Remote-Addr"] = remote_addr(request)
                accepted = event_accept(
                    provider=provider,
                    external_id=external_id,
                    body=body,
                    headers={**headers, adapter.signature_header: request.headers.get(adapter.signature_header, "")},
                    business=business,
                    kind=notice.topic[:64],
                    status=InboundEvent.Status.IGNORED,
                )
                return accepted_response(accepted)
            accepted = accept(
                request,
                provider=provider,
                external_id=external_id,
                body=body,
                business=business,
                kind=notice.topic[:64] if notice else "",
                malformed=malformed,
                extra_headers={adapter.signature_header: request.headers.get(adapter.signature_header, "")},
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

    return view


urlpatterns: list[URLPattern] = [
    path(f"hooks/{adapter.provider}/", hook(adapter), name=f"hook-{adapter.provider}")
    for adapter in INSTALLED
    if not adapter.per_member  # calendars' notifications: agents/sync/calendar_hooks.py
]
