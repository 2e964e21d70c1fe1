"""What a webhook's acceptance runs: nothing a signed webhook does not need,
over a database connection kept between requests."""

from __future__ import annotations

import pytest
from django.test import Client

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
    printed = "from django.conf import settings as s; d = s.DATABASES['default']; print(d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'])"
    result = manage("shell", "--no-imports", "-c", printed, env=documented_production_env())

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["60", "True"]


def test_connection_reuse_can_be_turned_off() -> None:
    printed = "from django.conf import settings as s; print(s.DATABASES['default']['CONN_MAX_AGE'])"
    result = manage("shell", "--no-imports", "-c", printed, env={**documented_production_env(), "CONN_MAX_AGE": "0"})

    assert result.stdout.split() == ["0"]
