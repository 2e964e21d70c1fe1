"""Pages with people on them: never cached, and a session that ends after
hours without a request."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.contrib.sessions.models import Session
from django.test import Client

from crm.models import TeamMember
from leadops.middleware import SESSION_SEEN

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/app/inbox/", "/api/v1/leads/", "/admin/"])
def test_a_page_with_personal_data_is_never_stored_by_a_cache(setter: TeamMember, path: str) -> None:
    client = Client()
    client.force_login(setter.user)
    response = client.get(path)
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"] and "private" in response["Cache-Control"]


def test_a_session_ends_after_twelve_idle_hours_not_two_weeks() -> None:
    assert settings.SESSION_COOKIE_AGE == 12 * 3600


def test_a_request_pushes_the_sessions_end_back_at_most_every_few_minutes(setter: TeamMember) -> None:
    client = Client()
    client.force_login(setter.user)
    key = client.session.session_key
    first_end = Session.objects.get(session_key=key).expire_date
    client.get("/app/inbox/")
    assert Session.objects.get(session_key=key).expire_date == first_end, "seen at login: nothing to write"

    session = client.session
    session[SESSION_SEEN] = int(time.time()) - settings.SESSION_REFRESH_SECONDS - 1
    session.save()
    stale_end = Session.objects.get(session_key=key).expire_date
    client.get("/app/inbox/")
    assert Session.objects.get(session_key=key).expire_date > stale_end
