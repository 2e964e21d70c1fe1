"""The ambient state of one unit of work, in one place.

A unit of work is one task's (or one request's) transaction. What its steps
share without passing it down — the receipts and outbox events it inserts in
one statement at its end, the playbook rows it reads once, the leads it holds
current, and the new leads whose first step runs at its end — is one
`UnitOfWork` object, reachable with `unit()`. Nothing else in the project
keeps a ContextVar: a reader who wants to know what a call site depends on
besides its arguments reads this file.

The one other piece of ambient state is the id of the request being served
(`request_id()`, set by leadops.request_id's middleware), which only log
lines read: a request may run several units of work, and a line logged
outside any of them must still name its request.

Each part is switched on by the block that owns it (`receipts_batched`,
`events_batched`, `reads_shared`, `lead_current`, `inline_steps_collected`);
`None` means "not in such a block": write, read or schedule as usual. The
whole is entered in one place per task: `crm.services.units.unit_of_work`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass
class UnitOfWork:
    # Receipts written in the unit, inserted in one statement at its end
    # (crm.services.receipts.receipts_batched).
    receipts: list[Any] | None = None
    # Outbox events, inserted with those receipts (crm.services.outbox).
    events: list[Any] | None = None
    # Playbook rows read once, rows handed on in memory (crm.selectors.reads_shared).
    reads: dict[Any, Any] | None = None
    # Leads whose object stands for their row, by pk (crm.services.lead_sync.lead_current).
    leads: dict[int, Any] = field(default_factory=dict)
    # New leads' events whose step the unit runs at its end (agents.events).
    new_leads: list[Any] | None = None


_UNIT: ContextVar[UnitOfWork | None] = ContextVar("unit_of_work", default=None)


def unit() -> UnitOfWork | None:
    """The unit of work the caller runs in, if any."""
    return _UNIT.get()


@contextmanager
def unit_entered() -> Iterator[UnitOfWork]:
    """The current unit, or a new one for the block (forgotten at its end)."""
    current = _UNIT.get()
    if current is not None:
        yield current
        return
    made = UnitOfWork()
    token = _UNIT.set(made)
    try:
        yield made
    finally:
        _UNIT.reset(token)


_REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)


def request_id() -> str | None:
    """The id of the request being served (None outside one)."""
    return _REQUEST_ID.get()


@contextmanager
def request_id_set(value: str | None) -> Iterator[None]:
    """`value` is the request id for the block; the previous one after it."""
    token = _REQUEST_ID.set(value)
    try:
        yield
    finally:
        _REQUEST_ID.reset(token)
