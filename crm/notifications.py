"""PostgreSQL's LISTEN/NOTIFY, for what must wake at once when a row changes.

A trigger NOTIFYs a channel when the change commits (an inbound event
stored, a source edited); a `Listener` holds one connection of its own (not
Django's: a LISTEN lives as long as its session, and Django's connection is
closed and reopened between requests and tasks) and waits on it. A
notification is a hint, never the work itself: whoever waits still reads the
rows, and looks anyway every so often, so a notification lost with a
dropped connection costs a delay, not an event.
"""

from __future__ import annotations

from types import TracebackType

import psycopg
from django.db import connections
from psycopg import sql


class Listener:
    """`with Listener("channel") as listener: listener.wait(5)`."""

    def __init__(self, *channels: str, alias: str = "default") -> None:
        self.channels = channels
        self.alias = alias
        self.conn: psycopg.Connection | None = None

    def __enter__(self) -> Listener:
        # Django's own parameters (host, port, name, user, password, options),
        # so the listener reaches the database Django does, the test one in tests.
        params = connections[self.alias].get_connection_params()
        self.conn = psycopg.connect(
            **{k: v for k, v in params.items() if k not in ("cursor_factory", "context")}, autocommit=True
        )
        for channel in self.channels:
            self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def wait(self, timeout: float) -> list[str]:
        """Wait up to `timeout` seconds for a notification; returns the
        payloads of every one waiting by then (empty: the time ran out)."""
        assert self.conn is not None, "wait() inside `with Listener(...)`"
        payloads = [n.payload for n in self.conn.notifies(timeout=timeout, stop_after=1)]
        if payloads:
            # What else arrived meanwhile: one wake for a burst, not one per row.
            payloads += [n.payload for n in self.conn.notifies(timeout=0)]
        return payloads
