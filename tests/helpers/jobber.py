"""Jobber's stand-in (devtools/simulator/jobber_api.py) started for a test,
with the Jobber settings pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from devtools.simulator.jobber_api import (  # noqa: F401 - the tests' names for the stand-in's
    ACCOUNT_ID,
    CLIENT_ID,
    CLIENT_SECRET,
    JobberServer,
    gid,
    iso,
    webhook_body,
    webhook_headers,
)


@contextmanager
def jobber_running(settings: Any) -> Iterator[JobberServer]:
    """A started server, with the Jobber settings pointing at it."""
    server = JobberServer()
    server.start()
    settings.JOBBER_API_URL = server.url
    settings.JOBBER_AUTH_URL = server.url
    settings.JOBBER_CLIENT_ID = CLIENT_ID
    settings.JOBBER_CLIENT_SECRET = CLIENT_SECRET
    try:
        yield server
    finally:
        server.stop()
