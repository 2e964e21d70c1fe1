"""Rate limits on the public forms live in the shared cache: two server
processes count into one budget, per client address behind the trusted
proxies, so one attacker is stopped without stopping anybody else."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from django.core.cache import cache
from django.db import connection
from django.test import Client, RequestFactory

from crm.models import Business, InboundEvent, RejectedDelivery, Source
from tests.factories import BusinessFactory
from tests.helpers.races import run_together

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def empty_cache(transactional_db: None) -> Iterator[None]:
    # Counters written by the servers are committed: leave none behind.
    cache.clear()
    yield
    cache.clear()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def two_servers() -> Iterator[list[str]]:
    """Two gunicorn processes on the test database, each believing one proxy
    stands in front of it."""
    db = connection.settings_dict
    host, port = str(db["HOST"] or "127.0.0.1"), str(db["PORT"] or "")
    if host.startswith("/"):  # a socket directory (the embedded server)
        url = f"postgres://{db['USER']}@/{db['NAME']}?host={quote(host, safe='/')}" + (f"&port={port}" if port else "")
    else:
        url = f"postgres://{db['USER']}@{host}:{port or 5432}/{db['NAME']}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "TRUSTED_PROXY_COUNT": "1",
        "DEBUG": "false",
        "SECRET_KEY": "rate-limit-test-key-not-secret",
        "SEND_MODE": "dry_run",
    }
    env.pop("REDIS_URL", None)
    ports = [_free_port(), _free_port()]
    servers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "leadops.wsgi:application",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "1",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for port in ports
    ]
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        deadline = time.monotonic() + 60
        for base in bases:
            while True:
                try:
                    requests.get(base + "/f/none/", timeout=10)
                    break
                except (requests.ConnectionError, requests.Timeout):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.3)
        yield bases
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=20)


def _post(base: str, forwarded: str, phone: str, nonce: str) -> int:
    session = requests.Session()
    page = session.get(base + "/f/quote/", headers={"X-Forwarded-For": forwarded}, timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:300]
    response = session.post(
        base + "/f/quote/",
        data={"csrfmiddlewaretoken": token[1], "first_name": "Ann", "phone": phone, "nonce": nonce},
        headers={"X-Forwarded-For": forwarded},
        timeout=10,
    )
    return response.status_code


@pytest.mark.django_db(transaction=True)
def test_the_limit_is_shared_by_two_server_processes_behind_a_proxy(empty_cache, two_servers):
    business = BusinessFactory.create(slug="shared-limit")
    Source.objects.create(business=business, key="quote", provider="hosted_form")
    a, b = two_servers
    statuses = [
        # The attacker writes a new address of their own each time, left of
        # what the proxy appended: only the proxy's entry counts.
        _post(a if i % 2 else b, f"10.9.{i}.1, 203.0.113.5", f"+1212555{1000 + i:04d}", f"atk-{i}")
        for i in range(12)
    ]
    assert statuses == [200] * 10 + [429, 429]
    assert _post(b, "203.0.113.77", "+12125550147", "visitor") == 200
    assert InboundEvent.objects.count() == 11
    assert RejectedDelivery.objects.get().last_remote_addr == "203.0.113.5"


@pytest.mark.django_db
def test_behind_a_proxy_one_attackers_address_does_not_block_other_visitors(settings, business):
    settings.TRUSTED_PROXY_COUNT = 1
    Source.objects.create(business=business, key="quote", provider="hosted_form")
    client = Client()
    proxy = "10.0.0.1"  # every request arrives from the proxy
    for i in range(12):
        client.post(
            "/f/quote/",
            {"phone": f"+1212555{2000 + i:04d}", "nonce": f"a{i}"},
            HTTP_X_FORWARDED_FOR="203.0.113.5",
            REMOTE_ADDR=proxy,
        )
    visitors = [
        client.post(
            "/f/quote/",
            {"phone": f"+1312555{3000 + i:04d}", "nonce": f"v{i}"},
            HTTP_X_FORWARDED_FOR=f"198.51.100.{i}",
            REMOTE_ADDR=proxy,
        )
        for i in range(1, 6)
    ]
    assert [v.status_code for v in visitors] == [200] * 5
    assert InboundEvent.objects.count() == 15
    assert InboundEvent.objects.filter(headers__contains={"Remote-Addr": "198.51.100.1"}).exists(), (
        "the consent evidence records the visitor, not the proxy"
    )


@pytest.mark.django_db
def test_one_phone_number_is_limited_across_addresses(business):
    Source.objects.create(business=business, key="quote", provider="hosted_form")
    client = Client()
    statuses = [
        client.post(
            "/f/quote/", {"phone": "(212) 555-0147", "nonce": f"p{i}"}, REMOTE_ADDR=f"198.51.100.{i}"
        ).status_code
        for i in range(7)
    ]
    assert statuses == [200] * 5 + [429, 429]


@pytest.mark.django_db
def test_the_server_form_is_limited_per_phone_number(business: Business):
    Source.objects.create(business=business, key="site", provider="website", secret="site-secret-123")

    def post(i: int) -> int:
        body = json.dumps({"first_name": "Bo", "phone": "+12125550147", "nonce": f"s{i}"})
        return (
            Client()
            .post(
                "/hooks/forms/site/", body, content_type="application/json", HTTP_AUTHORIZATION="Bearer site-secret-123"
            )
            .status_code
        )

    statuses = [post(i) for i in range(21)]
    assert statuses == [200] * 20 + [429]


def test_racing_hits_are_each_counted_once(empty_cache):
    from agents.capture.ratelimit import limit_hit

    over = run_together([lambda: limit_hit("race", "203.0.113.9", limit=8, window=600)] * 16, timeout=30)
    assert over.count(False) == 8 and over.count(True) == 8


def test_the_minutely_job_drops_counters_of_windows_gone_by_and_keeps_the_live_ones(empty_cache):
    from agents.capture.ratelimit import PREFIX, limit_hit
    from agents.tasks import prune_rate_limits

    table = connection.ops.quote_name(cache._table)  # type: ignore[attr-defined]

    def counters() -> list[tuple[str, object]]:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT cache_key, expires FROM {table} WHERE cache_key LIKE %s", [f"%:{PREFIX}:%"])
            return sorted(cursor.fetchall())

    limit_hit("gone", "203.0.113.7", limit=5, window=60)
    limit_hit("live", "203.0.113.7", limit=5, window=3600)
    (gone, _), (live, _) = sorted(counters(), key=lambda row: ":gone:" not in row[0])
    # The 60-second window's counter expired (it is kept for two windows);
    # the hour's has not.
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET expires = now() - interval '1 second' WHERE cache_key = %s", [gone])
    assert prune_rate_limits() == {"counters_deleted": 1}
    assert [key for key, _ in counters()] == [live]
    # A submission costs its upserts only: no cleanup on the request path.
    statements: list[str] = []

    def record(execute, sql, *args):
        statements.append(sql)
        return execute(sql, *args)

    with connection.execute_wrapper(record):
        limit_hit("fresh", "203.0.113.8", limit=5, window=60)
    assert [sql.split()[0] for sql in statements] == ["INSERT"]


def test_a_cache_with_atomic_increments_counts_through_the_cache_api(settings):
    from agents.capture.ratelimit import limit_hit

    # Redis's place in this test: any backend but the database one takes the add-then-incr path.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    assert [limit_hit("api", "198.51.100.1", limit=2, window=60) for _ in range(3)] == [False, False, True]
    assert limit_hit("api", "198.51.100.2", limit=2, window=60) is False


@pytest.mark.parametrize(
    ("count", "forwarded", "expected"),
    [
        (0, "203.0.113.5", "192.0.2.1"),  # no trusted proxy: the header is anyone's to write
        (1, "10.0.0.1, 203.0.113.5", "203.0.113.5"),
        (2, "6.6.6.6, 203.0.113.5, 10.0.0.2", "203.0.113.5"),
        (2, "203.0.113.5", "192.0.2.1"),  # shorter than the chain: not through our proxies
    ],
)
def test_the_client_address_is_the_nth_from_the_right_behind_n_proxies(settings, count, forwarded, expected):
    from agents.capture.intake import client_address

    settings.TRUSTED_PROXY_COUNT = count
    request = RequestFactory().get("/", REMOTE_ADDR="192.0.2.1", HTTP_X_FORWARDED_FOR=forwarded)
    assert client_address(request) == expected
