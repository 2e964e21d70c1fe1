"""Redis as the shared cache and the broker, and what a Redis outage may
cost: never an accepted webhook. The raw event is stored in PostgreSQL
first; a rate limit whose Redis does not answer counts in the database
instead; an enqueue Redis refuses is logged and left to the sweep."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, cast

import pytest
import redis
import requests
from django.core.cache import caches
from django.test import Client
from django.utils import timezone

from agents.capture.processing import inbound_events_sweep
from crm.models import Business, InboundEvent, Lead, Source
from tests.factories import BusinessFactory
from tests.processes import gunicorn_start, process_env, wait_until_serving
from tests.redis_server import free_port

SECRET = "site-secret-123"
DATABASE_CACHE = {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "leadops_cache"}


def redis_cache(url: str) -> dict[str, Any]:
    return {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": url,
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.5, "SOCKET_TIMEOUT": 0.5},
    }


def form_post(base: str | None, i: int, *, phone: str = "+12125550147", nonce: str = "") -> Any:
    body = json.dumps({"first_name": "Bo", "phone": phone, "message": "furnace out", "nonce": nonce or f"n{i}"})
    headers = {"Authorization": f"Bearer {SECRET}", "Content-Type": "application/json"}
    if base is None:
        return Client().post(
            "/hooks/forms/site/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {SECRET}"
        )
    return requests.post(base + "/hooks/forms/site/", data=body, headers=headers, timeout=10)


@pytest.mark.django_db
def test_while_redis_is_down_the_rate_limit_counts_in_the_database_and_every_lead_is_stored(
    settings, business: Business
):
    Source.objects.create(business=business, key="site", provider="website", secret=SECRET)
    # Nothing listens on this port: every Redis call is refused.
    settings.CACHES = {"default": redis_cache(f"redis://127.0.0.1:{free_port()}/0"), "database": DATABASE_CACHE}
    statuses = [form_post(None, i).status_code for i in range(21)]
    # The per-phone limit (20 an hour) still holds, counted in the table.
    assert statuses == [200] * 20 + [429]
    assert InboundEvent.objects.filter(status="received").count() == 20


def test_rate_limits_in_redis_count_racing_hits_from_many_threads_once_each(settings, redis_url: str):
    from agents.capture.ratelimit import limit_hit

    settings.CACHES = {"default": redis_cache(redis_url), "database": DATABASE_CACHE}
    barrier = threading.Barrier(16)

    def hit(_: int) -> bool:
        barrier.wait(timeout=30)
        return limit_hit("race", "203.0.113.9", limit=8, window=600)

    with ThreadPoolExecutor(max_workers=16) as pool:
        over = list(pool.map(hit, range(16)))
    assert over.count(False) == 8 and over.count(True) == 8
    # Counted in Redis (one key, sixteen hits), not in the database table.
    keys = cast(list[bytes], redis.Redis.from_url(redis_url).keys("*ratelimit:race:*"))
    assert len(keys) == 1 and int(caches["default"].get(keys[0].decode().split(":", 2)[2])) == 16


@pytest.mark.django_db(transaction=True)
def test_a_webhook_accepted_while_redis_is_down_is_stored_answered_and_swept_later():
    """A web process with Redis as both broker and cache, and Redis gone:
    the delivery is stored and answered 200 (accepting enqueues nothing: the
    stored row is the intake loop's work item), and the sweep processes it
    once no loop has claimed it in time."""
    business = BusinessFactory.create(slug="outage")
    Source.objects.create(business=business, key="site", provider="website", secret=SECRET)
    dead = f"redis://127.0.0.1:{free_port()}/0"
    web = gunicorn_start(process_env(REDIS_URL=dead, Q_BROKER="redis", SEND_MODE="dry_run"))
    try:
        wait_until_serving(web)
        first = form_post(web.url, 1, nonce="outage-1")
        again = form_post(web.url, 2, nonce="outage-1")  # the provider's retry
    finally:
        output = web.stop()
    assert first.status_code == 200, (first.text, output[-3000:])
    assert first.json()["duplicate"] is False and again.json() == {**first.json(), "duplicate": True}
    assert "could not enqueue" not in output
    event = InboundEvent.objects.get()
    assert event.status == "received" and not Lead.objects.exists()

    assert inbound_events_sweep(now=timezone.now() + timedelta(minutes=3)) == 1
    event.refresh_from_db()
    assert event.status == "processed" and event.attempts == 1
    assert Lead.objects.filter(business=business).count() == 1
