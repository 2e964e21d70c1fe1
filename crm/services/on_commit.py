"""After-commit work that runs once per transaction, however many changes
in it asked for it (the outbox's deliveries, the sync pump: a transaction
that writes fifty events wakes the deliveries once)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection, transaction


@dataclass(frozen=True)
class _Once:
    key: str
    run: Callable[[], None]

    def __call__(self) -> None:
        self.run()


def on_commit_once(key: str, run: Callable[[], None]) -> None:
    """`run` once the current transaction commits, unless this transaction
    already has the call of `key` waiting (at once outside a transaction).
    A call registered in a savepoint later rolled back is dropped with it,
    as Django drops any on_commit callback, so a later ask registers again."""
    if any(isinstance(entry[1], _Once) and entry[1].key == key for entry in connection.run_on_commit):
        return
    # Robust: a failed wake must not fail the committed change; the sweeps catch up.
    transaction.on_commit(_Once(key, run), robust=True)
