"""What a webhook's acceptance runs: nothing a signed webhook does not need,
over a database connection kept between requests."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ

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
def test_accepting_a_google_ads_lead_is_one_lookup_one_event_and_one_task() -> None:
    # transaction=True: the request runs in autocommit, as a server runs it.
    business = Business.objects.create(slug="probe", name="Probe")
    Source.objects.create(business=business, key="gads-probe", provider="google_ads", secret="k")
    body = json.dumps({"google_key": "k", "lead_id": "L-1", "user_column_data": []}).encode()

    with CaptureQueriesContext(connection) as queries:
        response = Client().post("/hooks/google-ads/gads-probe/", data=body, content_type="application/json")

    assert response.status_code == 200, response.content
    statements = [query["sql"] for query in queries.captured_queries]
    assert len(statements) == 3, statements
    lookup, event, task = statements
    # The source alone: no join with its business, no sort by the business's name.
    assert lookup.startswith("SELECT") and "JOIN" not in lookup and "ORDER BY" not in lookup
    assert event.startswith('INSERT INTO "crm_inboundevent"')
    assert task.startswith('INSERT INTO "django_q_ormq"')
    # No BEGIN, COMMIT or savepoint round trips around the one INSERT.
    assert not [sql for sql in statements if "SAVEPOINT" in sql or sql in ("BEGIN", "COMMIT")]
    assert InboundEvent.objects.get().business_id is not None and OrmQ.objects.count() == 1


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
