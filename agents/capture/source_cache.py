"""The sources webhook URLs name, kept in each web process's memory.

Looking up the source was one of the two statements that accepting a
webhook cost (the other is storing it). A copy kept in memory must never
outlive a change that matters: a source switched off, a secret rotated, a
business's form origins edited. So:

* a trigger on `crm_source` and `crm_business` NOTIFYs `leadops_sources` when
  a change commits (migration 0042), and each process's listener thread —
  one connection of its own, started on the first lookup after the fork —
  drops every copy at once;
* a change made in this process drops them too (the model signals), before
  it even commits;
* while the listener is not listening (starting, or its connection lost),
  nothing is kept: every lookup reads the database, as before;
* inside a transaction nothing is kept or served either: it reads what the
  transaction itself sees, its own changes not yet committed included (a
  webhook request runs in autocommit, so this costs it nothing);
* a copy is never older than MAX_AGE either way.

A lookup racing a change cannot keep the old row: the copy is stored only if
no drop happened since the read began (a generation count).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from django.db import transaction
from django.db.models.signals import post_delete, post_save

from crm.models import Business, Source
from crm.notifications import Listener

log = logging.getLogger(__name__)

CHANNEL = "leadops_sources"
MAX_AGE = 60.0  # seconds a copy may serve, whatever the listener says
WAIT = 2.0  # the listener's longest wait, so stop() answers within it
RETRY = 5.0  # after the listener's connection failed


class SourceCache:
    def __init__(self, alias: str = "default") -> None:
        self.alias = alias  # the database whose changes drop the copies
        # Guards the copies, the generation and the listening flag; waiters
        # (tests) are woken on each drop and each change of the flag.
        self._changed = threading.Condition()
        self._rows: dict[str, tuple[float, Source]] = {}
        self._generation = 0
        self._listening = False
        self._pid = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def generation(self) -> int:
        """How many times the copies were dropped: a lookup begun before a
        drop never keeps what it read."""
        return self._generation

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait up to `timeout` seconds for `predicate()` (checked at each
        drop and each start or stop of listening)."""
        self._start_if_needed()
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    @property
    def listening(self) -> bool:
        return self._listening

    def get(self, key: str, load: Callable[[], Source | None]) -> Source | None:
        """The source named `key`: the kept copy, or `load()`'s (kept when
        the listener is listening)."""
        if transaction.get_connection().in_atomic_block:
            return load()
        self._start_if_needed()
        with self._changed:
            kept = self._rows.get(key)
            generation = self._generation
        if kept is not None and time.monotonic() - kept[0] < MAX_AGE:
            return kept[1]
        source = load()
        with self._changed:
            if source is not None and self._listening and generation == self._generation:
                self._rows[key] = (time.monotonic(), source)
        return source

    def drop(self, *_: object, **__: object) -> None:
        """Forget every copy (a change committed somewhere, or made here)."""
        with self._changed:
            self._rows.clear()
            self._generation += 1
            self._changed.notify_all()

    def stop(self) -> None:
        """Stop the listener (tests, before their database is dropped)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT * 3)
        self._thread = None
        self._stop = threading.Event()
        self._set_listening(False)

    def _start_if_needed(self) -> None:
        # After a fork the parent's thread is gone: each process starts its own.
        if self._pid == os.getpid() and self._thread is not None:
            return
        with self._changed:
            if self._pid == os.getpid() and self._thread is not None:
                return
            self._pid, self._listening = os.getpid(), False
            self._rows.clear()
            self._thread = threading.Thread(target=self._listen, name="source-cache-listener", daemon=True)
            self._thread.start()

    def _set_listening(self, listening: bool) -> None:
        with self._changed:
            self._listening = listening
            self._rows.clear()
            self._generation += 1
            self._changed.notify_all()

    def _listen(self) -> None:
        stop = self._stop
        while not stop.is_set():
            try:
                with Listener(CHANNEL, alias=self.alias) as listener:
                    self._set_listening(True)
                    while not stop.is_set():
                        if listener.wait(WAIT):
                            self.drop()
            except Exception:  # noqa: BLE001 - whatever failed, the copies are not safe to keep
                log.warning("the source cache's listener lost its connection; reading sources uncached", exc_info=True)
            self._set_listening(False)
            stop.wait(RETRY)


SOURCES = SourceCache()

for model in (Source, Business):
    post_save.connect(SOURCES.drop, sender=model, dispatch_uid=f"source-cache-{model.__name__}-save")
    post_delete.connect(SOURCES.drop, sender=model, dispatch_uid=f"source-cache-{model.__name__}-delete")
