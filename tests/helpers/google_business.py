"""Google Business Profile's stand-in (devtools/simulator/google_business_api.py)
started for a test, with the Google settings pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from devtools.simulator.google_business_api import (  # noqa: F401 - the tests' names for the stand-in's
    ACCOUNT,
    CLIENT_ID,
    CLIENT_SECRET,
    LOCATION,
    GoogleBusinessServer,
)
from devtools.simulator.oauth_stand_in import serving


@contextmanager
def google_business_running(settings: Any) -> Iterator[GoogleBusinessServer]:
    """A started server, with the Google settings pointing at it."""
    server = GoogleBusinessServer()
    settings.GOOGLE_OAUTH_URL = f"{server.url}{server.authorize_path}"
    settings.GOOGLE_TOKEN_URL = f"{server.url}{server.token_path}"
    settings.GOOGLE_BUSINESS_CLIENT_ID = CLIENT_ID
    settings.GOOGLE_BUSINESS_CLIENT_SECRET = CLIENT_SECRET
    settings.GOOGLE_BUSINESS_ACCOUNTS_URL = server.url
    settings.GOOGLE_BUSINESS_INFO_URL = server.url
    settings.GOOGLE_BUSINESS_REVIEWS_URL = server.url
    with serving(server):
        yield server
