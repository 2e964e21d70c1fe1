"""Processing stored inbound events, once each: the event row is the work item.

Accepting a webhook is one INSERT; a trigger on that table NOTIFYs
`leadops_inbound` (migration 0042), and the intake loop (`intake_serve`, run
by every default `qcluster` beside its workers) wakes, claims the oldest due
event with `FOR UPDATE SKIP LOCKED` (so loops on several hosts take disjoint
events) and processes it, until none is due. Without a notification (a
listener that lost its connection) it looks every POLL_SECONDS anyway, and
the cluster's periodic sweep takes any event no loop claimed within
UNCLAIMED (no intake loop running at all).

A person may press "replay" while a loop runs: every path first claims the
event with a conditional UPDATE (received/failed → processing, only while
attempts remain) and goes on only if that changed exactly one row. The
claim counts the attempt, so a worker that dies mid-event has spent one too.

Attempts are bounded (MAX_ATTEMPTS per run, kept on the row as
`attempt_limit`). A handler that raises leaves the event
`failed` with its error at once (visible in the admin and the exception
report) and the sweep tries it again after a growing delay; a handler that
raises `RetryLater` (the record the event speaks of is not saved yet) leaves
it `received`, waiting, not failed. When no attempt is left the event stays
`failed` with the last error and no retry time: a dead letter that only a
replay moves, and a replay grants a fresh allowance (`attempts` keeps
counting every try).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

import psycopg
from django.db import DatabaseError, DataError, close_old_connections, connection
from django.db.models import F, Q
from django.utils import timezone

from crm.models import InboundEvent
from crm.notifications import Listener
from crm.services.inbound_handlers import EVENT_HANDLERS, MalformedPayload, RetryLater, unit_run
from crm.work_queue import PumpRun, pump

log = logging.getLogger(__name__)


STALE_PROCESSING = timedelta(minutes=10)
# An event no intake loop claimed in this long is the periodic sweep's.
UNCLAIMED = timedelta(minutes=2)
# The channel the insert trigger notifies (the migration names it too).
CHANNEL = "leadops_inbound"
# Without a notification, the intake loop looks this often anyway.
POLL_SECONDS = 5.0
# One pump's bound; the loop starts the next at once when work is left.
PUMP_SECONDS = 30.0
MAX_ATTEMPTS = InboundEvent.ATTEMPTS_PER_RUN
# The wait after attempt n is RETRY_DELAYS[n - 1]: about an hour in all, long
# enough for a provider outage to pass or a slow send to record its id.
RETRY_DELAYS = (timedelta(minutes=1), timedelta(minutes=4), timedelta(minutes=15), timedelta(minutes=40))
SWEEP_BATCH = 500
ERROR_LIMIT = 4000


def _claim(event_id: int, *, now: datetime) -> bool:
    # A worker that died mid-event leaves it `processing`; after STALE_PROCESSING
    # another may take it over, while attempts remain.
    claimable = Q(status__in=[InboundEvent.Status.RECEIVED, InboundEvent.Status.FAILED]) | Q(
        status=InboundEvent.Status.PROCESSING, claimed_at__lt=now - STALE_PROCESSING
    )
    claimed = InboundEvent.objects.filter(claimable, pk=event_id, attempts__lt=F("attempt_limit")).update(
        status=InboundEvent.Status.PROCESSING, claimed_at=now, attempts=F("attempts") + 1, retry_at=None
    )
    return claimed == 1


def event_process(event_id: int, *, now: datetime | None = None) -> str:
    """Process one stored event if it can be claimed; returns its status
    after this attempt (or "skipped" when another worker has it, it is done,
    or it has no attempt left).

    The handler runs in one transaction: a failure rolls back every record it
    wrote and leaves the event `failed` with the error (or `received`, waiting,
    for `RetryLater`), to be retried while attempts remain, and replayable.
    """
    now = now or timezone.now()
    if not _claim(event_id, now=now):
        return "skipped"
    return _run(event_id, now=now)


def _run(event_id: int, *, now: datetime) -> str:
    event = InboundEvent.objects.select_related("source", "business").get(pk=event_id)
    registered = EVENT_HANDLERS.get(f"{event.provider}:{event.kind}")
    if registered is None:
        return _finish(
            event, InboundEvent.Status.FAILED, f"no handler for {event.provider} events of kind {event.kind!r}"
        )
    handler, prepare = registered
    try:
        args = (prepare(event),) if prepare else ()
        # One unit of work (the orchestrator's runner: a new lead's first
        # step runs at its end), its receipts one INSERT after that.
        outcome = unit_run(lambda: handler(event, *args))
    except MalformedPayload as exc:  # the same bytes fail the same way: no retry
        return _finish(event, InboundEvent.Status.FAILED, f"malformed payload: {exc}")
    except DataError as exc:
        # A value the database cannot hold (a 100,000-character phone, a NUL
        # byte in text): the same bytes fail the same way, so it is
        # malformed, stored once with the reason, never retried.
        return _finish(event, InboundEvent.Status.FAILED, f"malformed payload: {str(exc).splitlines()[0]}")
    except RetryLater as exc:
        return _retry_or_fail(event, str(exc), waiting=True, now=now)
    except Exception as exc:  # a failed event stays visible with its error
        log.exception("inbound event %s failed", event.public_id)
        return _retry_or_fail(event, f"{type(exc).__name__}: {exc}", waiting=False, now=now)
    return _finish(event, outcome, "")


def _retry_or_fail(event: InboundEvent, error: str, *, waiting: bool, now: datetime) -> str:
    # Counted from the last replay (or the start): attempt n of this run.
    attempt = MAX_ATTEMPTS - (event.attempt_limit - event.attempts)
    if event.attempts >= event.attempt_limit:
        return _finish(
            event, InboundEvent.Status.FAILED, f"{error} (gave up after {attempt} attempts; replay once fixed)"
        )
    retry_at = now + RETRY_DELAYS[min(attempt, len(RETRY_DELAYS)) - 1]
    status = InboundEvent.Status.RECEIVED if waiting else InboundEvent.Status.FAILED
    note = f"{error} (attempt {attempt} of {MAX_ATTEMPTS}; tried again after {retry_at:%Y-%m-%d %H:%M:%S} UTC)"
    InboundEvent.objects.filter(pk=event.pk, status=InboundEvent.Status.PROCESSING).update(
        status=status, error=note[:ERROR_LIMIT], retry_at=retry_at, processed_at=None if waiting else timezone.now()
    )
    return status


def _finish(event: InboundEvent, status: str, error: str) -> str:
    InboundEvent.objects.filter(pk=event.pk, status=InboundEvent.Status.PROCESSING).update(
        status=status, error=error[:ERROR_LIMIT], processed_at=timezone.now(), retry_at=None
    )
    return status


def event_replay(event: InboundEvent, *, now: datetime | None = None) -> str:
    """Reprocess a failed event now, with a fresh allowance of MAX_ATTEMPTS
    (this one the first). Handlers are idempotent, so a replay of an event
    that half-succeeded before cannot double its records."""
    now = now or timezone.now()
    # The new allowance and the claim are one UPDATE (both read the row's old
    # attempts), so a sweep cannot take the event in between.
    claimed = InboundEvent.objects.filter(pk=event.pk, status=InboundEvent.Status.FAILED).update(
        status=InboundEvent.Status.PROCESSING,
        claimed_at=now,
        attempt_limit=F("attempts") + MAX_ATTEMPTS,
        attempts=F("attempts") + 1,
        retry_at=None,
    )
    if claimed != 1:
        return "skipped"
    return _run(event.pk, now=now)


def inbound_events_sweep(*, now: datetime | None = None, batch: int = SWEEP_BATCH) -> int:
    """Process events no intake loop claimed (stored but never picked up),
    events whose retry is due, and events whose worker died mid-way (claimed
    longer than STALE_PROCESSING ago) while they have attempts left; an event
    whose worker died on its last attempt is left `failed`. Returns how many
    events it processed (whatever their outcome)."""
    now = now or timezone.now()
    stale = Q(status=InboundEvent.Status.PROCESSING, claimed_at__lt=now - STALE_PROCESSING)
    abandoned = InboundEvent.objects.filter(stale, attempts__gte=F("attempt_limit"))
    for pk, earlier in abandoned.values_list("pk", "error")[:batch]:
        error = f"the worker stopped mid-processing (gave up after {MAX_ATTEMPTS} attempts; replay once fixed)"
        # Keep what an earlier attempt reported, if anything.
        error += f" — before that: {earlier}" if earlier else ""
        # Conditional again: a slow (not dead) worker may have finished it meanwhile.
        abandoned.filter(pk=pk).update(
            status=InboundEvent.Status.FAILED, error=error[:ERROR_LIMIT], retry_at=None, processed_at=now
        )
    ids = list(
        InboundEvent.objects.filter(
            Q(status=InboundEvent.Status.RECEIVED, retry_at__isnull=True, received_at__lt=now - UNCLAIMED)
            | Q(status__in=[InboundEvent.Status.RECEIVED, InboundEvent.Status.FAILED], retry_at__lte=now)
            | stale,
            attempts__lt=F("attempt_limit"),
        )
        .order_by("received_at")
        .values_list("pk", flat=True)[:batch]
    )
    return sum(1 for pk in ids if event_process(pk, now=now) != "skipped")


# --- the intake loop --------------------------------------------------------------

# One statement: the oldest due event no other loop holds, claimed. Due: new
# (never tried), or waiting for a retry whose time has come, with an attempt
# left. SKIP LOCKED: two loops never wait on, nor take, the same row.
_CLAIM_NEXT = """
UPDATE crm_inboundevent SET status = 'processing', claimed_at = %(now)s, attempts = attempts + 1, retry_at = NULL
WHERE id = (
    SELECT id FROM crm_inboundevent
    WHERE attempts < attempt_limit
      AND ((status = 'received' AND retry_at IS NULL)
           OR (status IN ('received', 'failed') AND retry_at <= %(now)s))
    ORDER BY received_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
RETURNING id
"""


def event_claim_next(*, now: datetime) -> int | None:
    """Claim the oldest due event (its id), or None when none is."""
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_NEXT, {"now": now})
        row = cursor.fetchone()
    return row[0] if row else None


def event_run_claimed(event_id: int, *, now: datetime) -> str:
    """Process an event `event_claim_next` claimed; its status after."""
    return _run(event_id, now=now)


def events_pump(*, seconds: float = PUMP_SECONDS) -> PumpRun:
    """Process due events, oldest first, until none is or `seconds` pass."""
    return pump(
        lambda: event_claim_next(now=timezone.now()),
        lambda event_id: event_run_claimed(event_id, now=timezone.now()),
        seconds=seconds,
    )


def intake_serve(stopped: Callable[[float], bool], *, poll: float = POLL_SECONDS) -> None:
    """Process inbound events as they are stored, until `stopped(timeout)`
    (which waits up to `timeout` seconds for a stop) says so.

    LISTEN first, then pump: an event stored between the pump's last look
    and the wait is announced to the listener, never missed. A database
    that goes away (a restart) is waited out, then listened to again; the
    sweep covers what arrives meanwhile.
    """
    while not stopped(0):
        try:
            with Listener(CHANNEL) as listener:
                while not stopped(0):
                    close_old_connections()
                    run = events_pump()
                    if run.finished:
                        listener.wait(poll)
        except (DatabaseError, psycopg.Error):
            log.exception("the intake loop lost the database; listening again shortly")
            connection.close()
            stopped(poll)
        except Exception:
            # A bug must not end the loop for good: logged, and tried again
            # (an event that keeps failing spends its attempts, then waits).
            log.exception("the intake loop failed; starting again shortly")
            stopped(poll)
