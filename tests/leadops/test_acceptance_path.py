"""What a webhook's acceptance runs: nothing a signed webhook does not need,
over a database connection kept between requests."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

from agents.capture.source_cache import SOURCES
from crm.models import Business, InboundEvent, Source
from tests.leadops.test_deploy import documented_production_env, manage

pytestmark = pytest.mark.django_db


@pytest.mark.urls("tests.leadops.webhook_probe_urls")
def test_a_webhook_request_skips_sessions_authentication_and_messages() -> None:
    client = Client(enforce_csrf_checks=True)

    response = client.post("/hooks/probe/", data=b"{}", content_type="application/json")

    assert response.status_code == 200
    assert response.json() == {"session": False, "user": False, "messages": False}
    assert not response.cookies and "Cookie" not in response.get("Vary", "")


@pytest.mark.urls("tests.leadops.webhook_probe_urls")
def test_every_other_request_keeps_the_browser_machinery_and_its_csrf_check() -> None:
    client = Client(enforce_csrf_checks=True)

    assert client.get("/probe/").json() == {"session": True, "user": True, "messages": True}
    assert client.post("/probe/", data=b"{}", content_type="application/json").status_code == 403


def test_the_admin_login_still_sets_and_checks_its_csrf_cookie() -> None:
    client = Client(enforce_csrf_checks=True)

    page = client.get("/admin/login/")
    assert "csrftoken" in page.cookies
    assert client.post("/admin/login/", {"username": "x", "password": "y"}).status_code == 403


def test_by_default_connections_are_kept_a_minute_and_checked_before_reuse() -> None:
    printed = (
        "from django.conf import settings as s; d = s.DATABASES['default']; print(d['CONN_MAX_AGE'], "
        "d['CONN_HEALTH_CHECKS'])"
    )
    result = manage("shell", "--no-imports", "-c", printed, env=documented_production_env())

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["60", "True"]


def test_connection_reuse_can_be_turned_off() -> None:
    printed = "from django.conf import settings as s; print(s.DATABASES['default']['CONN_MAX_AGE'])"
    result = manage("shell", "--no-imports", "-c", printed, env={**documented_production_env(), "CONN_MAX_AGE": "0"})

    assert result.stdout.split() == ["0"]


@pytest.mark.django_db(transaction=True)
def test_accepting_a_google_ads_lead_is_one_insert_once_its_source_is_kept() -> None:
    # transaction=True: the request runs in autocommit, as a server runs it.
    business = Business.objects.create(slug="probe", name="Probe")
    Source.objects.create(business=business, key="gads-probe", provider="google_ads", secret="k")
    assert SOURCES.wait_for(lambda: SOURCES.listening, timeout=30), "the source listener never listened"

    def accept(lead_id: str) -> list[str]:
        body = json.dumps({"google_key": "k", "lead_id": lead_id, "user_column_data": []}).encode()
        with CaptureQueriesContext(connection) as queries:
            response = Client().post("/hooks/google-ads/gads-probe/", data=body, content_type="application/json")
        assert response.status_code == 200, response.content
        return [query["sql"] for query in queries.captured_queries]

    # The first delivery reads its source (with its business, once per
    # process, no sort); every later one is the event's INSERT alone.
    lookup, event = accept("L-1")
    assert lookup.startswith('SELECT "crm_source"') and "ORDER BY" not in lookup
    assert event.startswith('INSERT INTO "crm_inboundevent"')
    (again,) = accept("L-2")
    assert again.startswith('INSERT INTO "crm_inboundevent"')
    # No task row beside it (the event row is the intake loop's work item),
    # and no BEGIN, COMMIT or savepoint round trips around the INSERT.
    assert not OrmQ.objects.exists()
    assert InboundEvent.objects.filter(business=business, status="received").count() == 2


def test_every_api_route_is_registered_once() -> None:
    # Two registrations of one route (the estimates' reads in crm and their
    # writes in leadops) make which one answers depend on include order.
    from django.urls import URLPattern, URLResolver, get_resolver

    def routes(patterns: list, prefix: str = "") -> list[str]:
        found = []
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                found += routes(pattern.url_patterns, prefix + str(pattern.pattern).strip("^$"))
            elif isinstance(pattern, URLPattern):
                found.append(prefix + str(pattern.pattern).strip("^$"))
        return found

    api = [route for route in routes(get_resolver().url_patterns) if route.startswith("api/v1/")]
    repeated = sorted({route for route in api if api.count(route) > 1})
    assert not repeated, repeated
    assert any(route.startswith("api/v1/estimates") for route in api)
