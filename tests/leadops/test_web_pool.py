"""The server `make run` starts holds under sustained traffic: 3,000
requests, each on a new connection, answer without a 5xx while the server
never holds more database connections than its pool of threads."""

from __future__ import annotations

import re
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from django.db import connection

from agents.capture.source_cache import SOURCES
from tests.processes import Process, _start, process_env, wait_until_serving
from tests.redis_server import free_port

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
WORKERS, THREADS = 2, 4
PATHS = ("/healthz/", "/app/", "/admin/login/", "/api/v1/leads/", "/app/inbox/")


def test_make_run_serves_with_the_pooled_gunicorn_configuration():
    run = re.search(r"^run:.*?(?=^\S)", (ROOT / "Makefile").read_text(), re.DOTALL | re.MULTILINE)
    assert run and "gunicorn leadops.wsgi:application -c python:leadops.gunicorn_conf" in run.group(0)
    assert "runserver" not in run.group(0)


def _connections(name: str) -> int:
    """Clients connected to the database, this one left out. Clients only:
    PostgreSQL's own autovacuum workers show in pg_stat_activity under the
    database they clean, and one came by during a burst (9 of 8 counted)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            [name],
        )
        return int(cursor.fetchone()[0])


def test_three_thousand_requests_without_keep_alive_answer_and_hold_the_pool():
    # This test process's own source listener (started by an earlier test's
    # webhook) is a client of the same database, not the server's: stopped.
    SOURCES.stop()
    port = free_port()
    env = process_env(WEB_BIND=f"127.0.0.1:{port}", WEB_WORKERS=str(WORKERS), WEB_THREADS=str(THREADS))
    web: Process = _start(
        [sys.executable, "-m", "gunicorn", "leadops.wsgi:application", "-c", "python:leadops.gunicorn_conf"],
        env,
        f"http://127.0.0.1:{port}",
    )
    database = connection.settings_dict["NAME"]
    statuses: Counter[int] = Counter()

    def get(i: int) -> int:
        # A new connection per request: requests.get opens one and closes it.
        response = requests.get(
            web.url + PATHS[i % len(PATHS)], headers={"Connection": "close"}, allow_redirects=False, timeout=30
        )
        return response.status_code

    def load() -> None:
        with ThreadPoolExecutor(max_workers=16) as pool:
            statuses.update(pool.map(get, range(3000)))

    seen = [0]
    try:
        wait_until_serving(web)
        loader = threading.Thread(target=load)
        loader.start()
        # Watched from this thread: its connection is the only one this
        # process holds, and the count leaves it out.
        while loader.is_alive():
            seen.append(_connections(database))
            loader.join(0.05)
    finally:
        output = web.stop()
    assert sum(statuses.values()) == 3000
    assert not [s for s in statuses if s >= 500], f"{statuses}\n{output[-2000:]}"
    # Each of the server's threads keeps at most one connection.
    assert max(seen) <= WORKERS * THREADS, (max(seen), statuses)
