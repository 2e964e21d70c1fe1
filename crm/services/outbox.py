"""The outbox: the moments a lead goes through, told to whoever listens
outside (agencies' webhooks today; conversion uploads could read the same).

`event_emit` writes an `OutboxEvent` in the caller's transaction, next to the
change it announces, from the one place that writes that change (CRM Sync
for stage and owner, the record services and roles for the rest): the event
exists exactly when the change committed — never lost, never for a change
that rolled back. Inside a unit of work whose receipts are batched
(`receipts_batched`) the unit's events go out in the receipts' one INSERT.

Events are numbered after commit, not when written: `outbox_sequence`
takes a lock only sequencers take (never a domain transaction), reads the
business's events that are visible and not numbered yet, and numbers them
after the last one (`seq`), in one statement run after the lock, so it sees
what the sequencer before it committed. An event whose transaction commits
after a later-written one's gets the later number: `seq` is the order in
which events became visible, and nothing is ever numbered before an event
already numbered. Consumers (`OUTBOX_CONSUMERS`, called in the sequencer's
transaction with the events just numbered) therefore meet every event once,
in that order, and a consumer that keeps a cursor on `seq` never skips one.
Outbound webhooks fan out there (crm.services.webhooks).

When a transaction wrote events for a business with an active webhook
subscription, every `OUTBOX_WAKE` hook runs once after its commit (agents
enqueues the delivery task there); the periodic sweep sequences the rest.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from crm.context import unit, unit_entered
from crm.models import Business, EventType, Lead, OutboxEvent, WebhookSubscription
from crm.registry import Registry
from crm.services.on_commit import on_commit_once

# pg_advisory_xact_lock(namespace, business): the receipt sealer is 4207, the business file 4208.
SEQUENCE_LOCK_NAMESPACE = 4209
SEQUENCE_BATCH = 1000


@dataclass(frozen=True)
class Sequenced:
    """An event just numbered, as a consumer gets it."""

    id: int
    seq: int
    lead_id: int | None
    type: str
    created_at: dt.datetime


# Called in the sequencer's transaction with the business's newly numbered
# events, in order. Registered from AppConfig.ready().
OutboxConsumer = Callable[[int, list[Sequenced]], None]
OUTBOX_CONSUMERS: Registry[OutboxConsumer] = Registry("outbox consumer")
# Called once after the commit of a transaction that wrote events someone is
# waiting for (an active webhook subscription of their business).
OUTBOX_WAKE: Registry[Callable[[], None]] = Registry("outbox wake hook")


def plain(value: Any) -> Any:
    """What an event's data holds: JSON types only, money as a decimal string,
    times as ISO 8601 with their offset."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if hasattr(value, "public_id"):  # a record: its stable id
        return value.public_id
    return value


# --- writing -------------------------------------------------------------------


@dataclass(eq=False)
class _Pending:
    """An event written in a batched unit of work, not inserted yet; it sits
    in the transaction's on-commit list only to be dropped with a
    rolled-back savepoint (as a batched receipt does)."""

    event: OutboxEvent

    def __call__(self) -> None:
        """Nothing to do after commit: the event was inserted before it."""


def event_emit(
    *,
    business: Business | int,
    type: str,
    subject: str,
    data: dict[str, Any],
    lead: Lead | None = None,
) -> OutboxEvent:
    """Record that `type` happened to `subject`, in the caller's transaction
    (one INSERT, or none of its own inside a batched unit of work). `data`:
    ids and the fields the moment is about, never a person's name, phone,
    email, address or words."""
    if type not in EventType.values:
        raise ValueError(f"unknown outbox event type {type!r}")
    event = OutboxEvent(
        business_id=business if isinstance(business, int) else business.pk,
        lead=lead,
        type=type,
        subject=subject,
        data=plain(data),
        created_at=timezone.now(),
    )
    work = unit()
    batch = work.events if work is not None else None
    if batch is not None and connection.in_atomic_block:
        pending = _Pending(event)
        batch.append(pending)
        # Registered where the event is written, so Django's savepoint
        # bookkeeping drops it with a rolled-back savepoint (and its change).
        transaction.on_commit(pending, robust=True)
        return event
    events_insert([event])
    return event


@contextmanager
def events_batched() -> Iterator[list[_Pending] | None]:
    """Collect the block's events instead of inserting each (for the
    receipts' batch, which inserts them); None inside an outer block."""
    with unit_entered() as work:
        if work.events is not None:
            yield None
            return
        batch: list[_Pending] = []
        work.events = batch
        try:
            yield batch
        finally:
            work.events = None


def events_surviving(batch: list[_Pending] | None) -> list[OutboxEvent]:
    """The batch's events whose savepoints were not rolled back."""
    if not batch:
        return []
    alive = {id(entry[1]) for entry in connection.run_on_commit}
    return [p.event for p in batch if id(p) in alive]


def events_cte(events: list[OutboxEvent], name: str = "o") -> tuple[str, list[Any]]:
    """`<name> AS (INSERT … RETURNING id)`: the events as one data-modifying
    CTE, to join another statement of the same unit of work."""
    meta, quote = OutboxEvent._meta, connection.ops.quote_name
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    row = f"({', '.join(['%s'] * len(fields))})"
    params: list[Any] = []
    for event in events:
        params += [f.get_db_prep_save(f.pre_save(event, add=True), connection) for f in fields]
    sql = (
        f"{name} AS (INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)})"  # noqa: S608
        f" VALUES {', '.join([row] * len(events))} RETURNING id)"
    )
    return sql, params


def listening_sql(events: list[OutboxEvent]) -> tuple[str, list[Any]]:
    """A boolean expression: does any of these events' businesses have an
    active subscription (someone waiting for a delivery)?"""
    table = connection.ops.quote_name(WebhookSubscription._meta.db_table)
    business_ids = sorted({e.business_id for e in events})
    sql = f"EXISTS (SELECT 1 FROM {table} WHERE business_id = ANY(%s) AND status = 'active')"  # noqa: S608
    return sql, [business_ids]


def events_insert(events: list[OutboxEvent]) -> None:
    """The events in one statement, in the caller's transaction; wakes the
    deliveries after commit when anyone listens."""
    if not events:
        return
    insert, params = events_cte(events)
    listening, more = listening_sql(events)
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(f"WITH {insert} SELECT {listening}", [*params, *more])
        row = cursor.fetchone()
        events_written(listening=bool(row and row[0]))


def events_written(*, listening: bool) -> None:
    """After the statement that wrote a transaction's events: wake the
    deliveries once the transaction commits, if anyone listens."""
    if listening:
        outbox_wake()


def _outbox_woken() -> None:
    for hook in OUTBOX_WAKE.values():
        hook()


def outbox_wake() -> None:
    """Run the OUTBOX_WAKE hooks once the current transaction commits (once
    per transaction, however many events it wrote; at once outside one).
    A failed wake does not fail the committed change: the sweep delivers."""
    on_commit_once("outbox_wake", _outbox_woken)


# --- numbering -------------------------------------------------------------------

_SEQUENCE_SQL = """
WITH last AS (
    SELECT coalesce(max(seq), 0) AS n FROM crm_outboxevent WHERE business_id = %s AND seq IS NOT NULL
), todo AS (
    SELECT id, row_number() OVER (ORDER BY id) AS k
    FROM (SELECT id FROM crm_outboxevent WHERE business_id = %s AND seq IS NULL ORDER BY id LIMIT %s) AS t
)
UPDATE crm_outboxevent AS e SET seq = last.n + todo.k FROM last, todo WHERE e.id = todo.id
RETURNING e.id, e.seq, e.lead_id, e.type, e.created_at
"""


def outbox_sequence(business_id: int, *, limit: int = SEQUENCE_BATCH) -> int:
    """Number the business's visible, unnumbered events (at most `limit`)
    after its last number, oldest first, and hand them to every consumer;
    returns how many. One transaction of its own: call it outside any
    domain transaction (it waits for the business's sequencer lock, which
    only sequencers take, and holds it to its commit)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s::integer)", [SEQUENCE_LOCK_NAMESPACE, business_id])
        # A statement of its own after the lock: its snapshot sees what the
        # sequencer that held the lock before committed.
        cursor.execute(_SEQUENCE_SQL, [business_id, business_id, limit])
        events = sorted((Sequenced(*row) for row in cursor.fetchall()), key=lambda e: e.seq)
        if events:
            for consumer in OUTBOX_CONSUMERS.values():
                consumer(business_id, events)
    return len(events)


def outbox_sequence_all(*, limit: int = SEQUENCE_BATCH) -> int:
    """`outbox_sequence` for every business with events waiting for a number."""
    business_ids = list(
        OutboxEvent.objects.filter(seq__isnull=True).order_by().values_list("business_id", flat=True).distinct()
    )
    return sum(outbox_sequence(pk, limit=limit) for pk in business_ids)


# --- telling --------------------------------------------------------------------


def event_envelope(event: OutboxEvent, business_public_id: str) -> dict[str, Any]:
    """The JSON every receiver gets: a stable envelope around the event's data.
    `id` is the event's public id, the same on every retry and replay: the
    receiver's idempotency key."""
    return {
        "id": event.public_id,
        "type": event.type,
        "created_at": event.created_at.astimezone(dt.UTC).isoformat(),
        "business": business_public_id,
        "data": event.data,
    }
