"""Racing calls on real threads against PostgreSQL: the barrier, the
connection each thread must close, and the errors surfaced in the test's own
thread — written once, for every race test."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection


def run_together(calls: Sequence[Callable[[], Any]], *, timeout: float = 60) -> list[Any]:
    """Run each call in its own thread, all released at once by a barrier,
    each on its own database connection (closed when it ends). Returns the
    results in the calls' order; raises the first error a call raised, and
    fails when a thread is still running after `timeout` seconds."""
    start = threading.Barrier(len(calls), timeout=timeout)
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int, call: Callable[[], Any]) -> None:
        try:
            start.wait()
            results[index] = call()
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n, call), daemon=True) for n, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    stuck = sum(thread.is_alive() for thread in threads)
    assert not stuck, f"{stuck} of {len(threads)} racing calls still running after {timeout} s"
    if errors:
        raise errors[0]
    return results
