"""Fixed-window rate limits kept in the shared cache, never in process memory:
every server process (and every host) behind the same database or Redis
counts into the same window.

Redis increments atomically (`cache.incr`). Django's database cache does not
(its `incr` is a read and a write), so two processes racing would lose hits;
for it the count is one PostgreSQL upsert on the cache table itself, which
the row lock makes atomic. Only this module reads those rows.

When Redis does not answer, a hit is counted in that database table instead
(the `database` cache alias; a warning is logged). Neither fail open (no
limit: an outage would be a window for a flood of fake leads, each costing a
text and a person's time) nor fail closed (every submission refused: real
leads lost, and an authenticated provider's delivery with them): the limit
keeps holding across every process through PostgreSQL, which the submission
is about to be stored in anyway. Counts restart in the table, so for one
window a client may get up to twice its budget.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timedelta

from django.core.cache import caches
from django.core.cache.backends.db import DatabaseCache
from django.db import connection
from django.utils import timezone
from django_redis.exceptions import ConnectionInterrupted
from redis.exceptions import RedisError

log = logging.getLogger(__name__)
PREFIX = "ratelimit"


def limit_hit(scope: str, value: str, *, limit: int, window: int) -> bool:
    """Count one hit for `value` (an address, a phone number, a source key)
    under `scope` in the current `window` seconds; True when it is over `limit`."""
    now = timezone.now()
    bucket = int(now.timestamp()) // window
    digest = hashlib.sha256(value.encode()).hexdigest()[:32]  # bounded keys whatever was typed
    key = f"{PREFIX}:{scope}:{digest}:{bucket}"
    return _incr(key, window) > limit


def _incr(key: str, window: int) -> int:
    cache = caches["default"]  # the backend itself: `django.core.cache.cache` is a proxy
    if isinstance(cache, DatabaseCache):
        return _incr_in_table(cache, cache.make_and_validate_key(key), window)
    try:
        cache.add(key, 0, timeout=window * 2)
        return int(cache.incr(key))
    except (ConnectionInterrupted, RedisError) as exc:
        log.warning("rate limit counted in the database: the cache did not answer (%s)", exc)
        fallback = caches["database"]
        assert isinstance(fallback, DatabaseCache)  # settings define it so
        return _incr_in_table(fallback, fallback.make_and_validate_key(key), window)


def _incr_in_table(db_cache: DatabaseCache, key: str, window: int) -> int:
    table = connection.ops.quote_name(db_cache._table)  # type: ignore[attr-defined]  # its LOCATION
    now = timezone.now()
    expires = now + timedelta(seconds=window * 2)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (cache_key, value, expires) VALUES (%s, '1', %s) "  # noqa: S608 (a quoted table name)
            f"ON CONFLICT (cache_key) DO UPDATE SET "
            f"value = CASE WHEN {table}.expires < %s THEN '1' ELSE ({table}.value::bigint + 1)::text END, "
            f"expires = CASE WHEN {table}.expires < %s THEN EXCLUDED.expires ELSE {table}.expires END "
            f"RETURNING value",
            [key, expires, now, now],
        )
        count = int(cursor.fetchone()[0])
    # Counters of windows gone by are dropped by the minutely job
    # (`counters_prune`), not here: a submission costs its upserts only.
    return count


def counters_prune(*, now: datetime | None = None) -> int:
    """Delete the table's counters of windows gone by (the `expires` index
    keeps it cheap), so a flood of addresses cannot grow the table for ever;
    returns how many. Redis expires its own keys."""
    deleted = 0
    for alias in ("default", "database"):
        db_cache = caches[alias]
        if not isinstance(db_cache, DatabaseCache):
            continue
        table = connection.ops.quote_name(db_cache._table)  # type: ignore[attr-defined]  # its LOCATION
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {table} WHERE expires < %s AND cache_key LIKE %s",  # noqa: S608 (a quoted table name)
                [now or timezone.now(), f"%:{PREFIX}:%"],
            )
            deleted += cursor.rowcount
        break  # both aliases name the one table when both are the database
    return deleted
