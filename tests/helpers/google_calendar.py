"""Google Calendar's stand-in (devtools/simulator/google_calendar_api.py)
started for a test, with the Google settings pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from devtools.simulator.google_calendar_api import (  # noqa: F401 - the tests' names for the stand-in's
    API,
    CLIENT_ID,
    CLIENT_SECRET,
    EMAIL,
    GoogleCalendarServer,
    rfc3339,
)
from devtools.simulator.oauth_stand_in import serving


@contextmanager
def google_calendar_running(settings: Any) -> Iterator[GoogleCalendarServer]:
    """A started server, with the Google settings pointing at it."""
    server = GoogleCalendarServer()
    settings.GOOGLE_CALENDAR_API_URL = f"{server.url}{API}"
    settings.GOOGLE_OAUTH_URL = f"{server.url}{server.authorize_path}"
    settings.GOOGLE_TOKEN_URL = f"{server.url}{server.token_path}"
    settings.GOOGLE_CALENDAR_CLIENT_ID = CLIENT_ID
    settings.GOOGLE_CALENDAR_CLIENT_SECRET = CLIENT_SECRET
    with serving(server):
        yield server
