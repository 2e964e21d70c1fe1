"""Shared helpers for tests that start real processes (a task cluster, a web
server, a copy of the database): the URL of this run's test database, and
databases beside it."""

from __future__ import annotations

from urllib.parse import quote

import psycopg
from django.conf import settings
from django.db import connection


def test_database_url() -> str:
    s = connection.settings_dict
    host = s.get("HOST") or ""
    if host.startswith("/"):  # a Unix socket (the embedded server)
        return f"postgres://{s['USER']}@/{s['NAME']}?host={quote(host, safe='/')}"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    password = f":{quote(s['PASSWORD'])}" if s.get("PASSWORD") else ""
    return f"postgres://{s['USER']}{password}@{host}{port}/{s['NAME']}"


# Not a test, though its name says so where a test module imports it.
test_database_url.__test__ = False  # type: ignore[attr-defined]


def admin_connection() -> psycopg.Connection[tuple[object, ...]]:
    """A connection to the server's `postgres` database, to create and drop
    databases beside this run's (autocommit: CREATE DATABASE cannot run in a
    transaction)."""
    params = settings.DATABASES["default"]
    return psycopg.connect(
        host=params["HOST"] or "127.0.0.1",
        port=params["PORT"] or 5432,
        user=params["USER"],
        password=params["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    )


def sibling_database_url(name: str) -> str:
    """This run's test database URL (TCP or the embedded server's socket) with another name."""
    own = connection.settings_dict["NAME"]
    url = test_database_url()
    assert url.count(f"/{own}") == 1, url
    return url.replace(f"/{own}", f"/{name}")
