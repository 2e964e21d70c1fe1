"""Shared helpers for tests that start real processes (a task cluster, a web
server, a copy of the database): the URL of this run's test database."""

from __future__ import annotations

from urllib.parse import quote

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
