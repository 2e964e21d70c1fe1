"""Processing stored inbound events, once each, whatever the queue does.

django-q2 delivers at least once and a person may press "replay": a worker
first claims the event with a conditional UPDATE (received/failed →
processing) and goes on only if that changed exactly one row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.capture.base import MalformedPayload
from crm.models import InboundEvent

log = logging.getLogger(__name__)

S = InboundEvent.Status
# A handler returns PROCESSED or IGNORED (an echo, a status we do not track…).
# One that must read from the network first registers a `prepare` step: it
# runs outside the transaction, and its result is handed to the handler, so
# no transaction stays open while a provider is slow.
Handler = Callable[..., str]
Prepare = Callable[[InboundEvent], Any]
_HANDLERS: dict[str, tuple[Handler, Prepare | None]] = {}

STALE_PROCESSING = timedelta(minutes=10)
LOST_ENQUEUE = timedelta(minutes=2)


def handler_register(provider: str, kind: str, handler: Handler, *, prepare: Prepare | None = None) -> None:
    """`handler(event)`, or `handler(event, prepared)` when `prepare` is given."""
    _HANDLERS[f"{provider}:{kind}"] = (handler, prepare)


def _claim(event_id: int, *, now: datetime) -> bool:
    # A worker that died mid-event leaves it `processing`; after STALE_PROCESSING
    # another may take it over.
    claimable = Q(status__in=[S.RECEIVED, S.FAILED]) | Q(status=S.PROCESSING, claimed_at__lt=now - STALE_PROCESSING)
    claimed = InboundEvent.objects.filter(claimable, pk=event_id).update(
        status=S.PROCESSING, claimed_at=now, attempts=F("attempts") + 1
    )
    return claimed == 1


def event_process(event_id: int) -> str:
    """Process one stored event if it can be claimed; returns its final status
    (or "skipped" when another worker has it or it is already done).

    The handler runs in one transaction: a failure rolls back every record it
    wrote and leaves the event `failed` with the error, ready for replay.
    """
    now = timezone.now()
    if not _claim(event_id, now=now):
        return "skipped"
    event = InboundEvent.objects.select_related("source", "business").get(pk=event_id)
    registered = _HANDLERS.get(f"{event.provider}:{event.kind}")
    try:
        if registered is None:
            raise LookupError(f"no handler for {event.provider} events of kind {event.kind!r}")
        handler, prepare = registered
        args = (prepare(event),) if prepare else ()
        with transaction.atomic():
            outcome = handler(event, *args)
    except MalformedPayload as exc:
        return _finish(event, S.FAILED, f"malformed payload: {exc}")
    except Exception as exc:  # a failed event stays visible with its error
        log.exception("inbound event %s failed", event.public_id)
        return _finish(event, S.FAILED, f"{type(exc).__name__}: {exc}")
    return _finish(event, outcome, "")


def _finish(event: InboundEvent, status: str, error: str) -> str:
    InboundEvent.objects.filter(pk=event.pk, status=S.PROCESSING).update(
        status=status, error=error[:4000], processed_at=timezone.now()
    )
    return status


def event_replay(event: InboundEvent) -> str:
    """Reprocess a failed event now. Handlers are idempotent, so a replay of
    an event that half-succeeded before cannot double its records."""
    if event.status != S.FAILED:
        return "skipped"
    return event_process(event.pk)


def inbound_events_sweep() -> int:
    """Process events whose enqueue was lost (stored but never picked up) and
    events whose worker died mid-way (claimed longer than STALE_PROCESSING ago)."""
    now = timezone.now()
    ids = list(
        InboundEvent.objects.filter(
            Q(status=S.RECEIVED, received_at__lt=now - LOST_ENQUEUE)
            | Q(status=S.PROCESSING, claimed_at__lt=now - STALE_PROCESSING)
        )
        .order_by("received_at")
        .values_list("pk", flat=True)[:500]
    )
    return sum(1 for pk in ids if event_process(pk) != "skipped")
