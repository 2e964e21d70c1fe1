"""The one bounded wait of the `simulate` client: it runs outside the server
and can only look again until the server's queue has done its work."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
INTERVAL = 0.5


def poll_until(look: Callable[[], T], *, timeout: float, interval: float = INTERVAL) -> T | None:
    """Call `look` until it returns something truthy, at most `timeout` seconds; None when it never does."""
    deadline = time.monotonic() + timeout
    while True:
        found = look()
        if found or time.monotonic() >= deadline:
            return found or None
        time.sleep(interval)
