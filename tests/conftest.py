from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
import time_machine
from django.core.cache import cache, caches
from django.db import ProgrammingError
from django.utils import timezone
from pytest_django import DjangoDbBlocker

from agents.capture.source_cache import SOURCES
from crm.models import Business, Role, TeamMember
from crm.registry import Registry
from tests.factories import BusinessFactory, member_create
from tests.redis_server import MISSING, redis_available, redis_server

# `TEST_CLOCK_SHIFT_DAYS=400 make pytest` runs the suite with this process's
# clock that many days ahead (time-machine, still ticking), from before any
# test module or conftest below this one is imported (some compute their
# dates on import). A test that mixes the wall clock with a fixed date
# (consent granted "now", judged at a fixed noon) passes today and fails on a
# later day; moved ahead, it fails today. OpenSSL, PostgreSQL's now() and the
# processes a test starts keep the real clock, so a test comparing those with
# ours is no such bomb.
if _days := int(os.environ.get("TEST_CLOCK_SHIFT_DAYS") or 0):
    time_machine.travel(timezone.now() + timedelta(days=_days), tick=True).start()

# The files that take a minute or more, slowest first: under pytest-xdist
# they start first (`make pytest` passes --no-loadscope-reorder, which keeps
# this order), so the other workers' short files fill their time instead of
# one of them running alone at the end. Most of it is waiting (the fault
# drill for the sweeps' bound, the multi-host run and the cluster tests for
# their processes), not work. Figures: docs/operations.md, "Tests".
SLOW_FIRST = (
    "tests/leadops/test_fault_drill.py",
    "tests/leadops/test_multi_host.py",
    "tests/agents/test_cluster.py",
    "tests/devtools/test_demo.py",
    "tests/leadops/test_role_matrix.py",
    "tests/agents/reader/test_reader.py",
    "tests/browser/test_owner_pages.py",
    "tests/devtools/test_simulated_estimates.py",
    "tests/crm/test_secrets.py",
    "tests/leadops/test_api_fuzz.py",
    "tests/agents/webhooks/test_cluster.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: n for n, path in enumerate(SLOW_FIRST)}
    # Stable: every other test keeps its place, and every worker sorts alike.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(SLOW_FIRST)))


@pytest.fixture(scope="session")
def redis_server_url() -> Iterator[str]:
    """A Redis for this run (tests/redis_server.py); started once, on first use."""
    if not redis_available():
        pytest.fail(MISSING, pytrace=False)
    with redis_server() as url:
        yield url


@pytest.fixture
def redis_url(redis_server_url: str) -> str:
    """The run's Redis database, emptied for this test."""
    redis.Redis.from_url(redis_server_url).flushdb()
    return redis_server_url


@pytest.fixture(scope="session", autouse=True)
def rate_limits_start_empty(django_db_setup: None, django_db_blocker: DjangoDbBlocker) -> None:
    """The shared cache is a database table that test transactions do not
    roll back when a test commits (live servers, races): with a reused test
    database, an earlier run's form posts would still count against this one."""
    with django_db_blocker.unblock():
        try:
            cache.clear()
        except ProgrammingError:
            # No test in this run uses the database, so pytest-django set none
            # up: there is no cache table, and nothing to clear.
            return


@pytest.fixture(autouse=True)
def api_throttle_forgotten() -> None:
    """The API's throttle counts in process memory without Redis: each test starts uncounted."""
    caches["throttle"].clear()


@pytest.fixture(autouse=True)
def sources_forgotten() -> Iterator[None]:
    """Webhook sources are kept per process, dropped when a change commits:
    a test's rolled-back sources never commit, so each test starts with none
    kept. The listener's own connection is closed at the end, before the
    test database is dropped."""
    SOURCES.drop()
    yield


@pytest.fixture(scope="session", autouse=True)
def source_listener_stopped(django_db_setup: None) -> Iterator[None]:
    # After the database's setup, so stopped before its teardown drops it.
    yield
    SOURCES.stop()


@pytest.fixture(autouse=True)
def registries_restored() -> Iterator[None]:
    """What a test registers (a timer kind of its own, a stand-in handler)
    is gone after it: registries refuse a name registered twice."""
    with Registry.all_restored():
        yield


@pytest.fixture
def business(db: None) -> Business:
    return BusinessFactory.create(slug="acme", name="Acme Heating & Air")


@pytest.fixture
def other_business(db: None) -> Business:
    return BusinessFactory.create(slug="other", name="Other Plumbing")


@pytest.fixture
def setter(business: Business) -> TeamMember:
    return member_create(business, Role.SETTER, username="sam")


@pytest.fixture
def manager(business: Business) -> TeamMember:
    return member_create(business, Role.MANAGER, username="mia")
