"""Login throttling (admin and API tokens) and API tokens that expire and can be revoked."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token

from crm.models import TeamMember

PASSWORD = "pw-for-tests-1"  # tests/factories.py UserFactory
LOGIN = "/admin/login/?next=/admin/"
API = "/api/v1/leads/"


def admin_login(username: str, password: str, **extra: Any) -> tuple[Client, int]:
    client = Client(**extra)
    response = client.post(LOGIN, {"username": username, "password": password})
    return client, response.status_code


def logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def api_get(key: str, **extra: Any) -> Any:
    return Client(**extra).get(API, HTTP_AUTHORIZATION=f"Token {key}")


def test_five_wrong_passwords_lock_the_admin_login_and_then_the_right_password_is_refused(
    manager: TeamMember,
) -> None:
    username = manager.user.username
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        client, status = admin_login(username, "wrong", REMOTE_ADDR="203.0.113.5")
        assert status == 200 and not logged_in(client)  # the form again, with its error
    client, status = admin_login(username, "wrong", REMOTE_ADDR="203.0.113.5")
    assert status == 429

    client, status = admin_login(username, PASSWORD, REMOTE_ADDR="203.0.113.5")

    assert status == 429
    assert not logged_in(client)


def test_a_lock_holds_one_username_at_one_address_only(manager: TeamMember, setter: TeamMember) -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT):
        admin_login(manager.user.username, "wrong", REMOTE_ADDR="203.0.113.5")

    elsewhere, status = admin_login(manager.user.username, PASSWORD, REMOTE_ADDR="198.51.100.7")
    assert status == 302 and logged_in(elsewhere)
    colleague, status = admin_login(setter.user.username, PASSWORD, REMOTE_ADDR="203.0.113.5")
    assert status == 302 and logged_in(colleague)


def test_a_successful_login_clears_the_failures_before_the_limit(manager: TeamMember) -> None:
    username = manager.user.username
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        admin_login(username, "wrong", REMOTE_ADDR="203.0.113.5")
    admin_login(username, PASSWORD, REMOTE_ADDR="203.0.113.5")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        admin_login(username, "wrong", REMOTE_ADDR="203.0.113.5")

    client, status = admin_login(username, PASSWORD, REMOTE_ADDR="203.0.113.5")

    assert status == 302 and logged_in(client)


def test_behind_a_trusted_proxy_the_lock_follows_the_forwarded_client_not_the_proxy(
    manager: TeamMember, settings: Any
) -> None:
    settings.TRUSTED_PROXY_COUNT = 1
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    for _ in range(settings.AXES_FAILURE_LIMIT):
        # A client that writes its own X-Forwarded-For still lands on its real address.
        admin_login(manager.user.username, "wrong", HTTP_X_FORWARDED_FOR="192.0.2.1, 203.0.113.5", **proxy)

    locked, status = admin_login(manager.user.username, PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.5", **proxy)
    assert status == 429 and not logged_in(locked)
    other, status = admin_login(manager.user.username, PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.7", **proxy)
    assert status == 302 and logged_in(other)


def test_a_forwarded_entry_that_is_no_address_falls_back_to_the_socket(manager: TeamMember, settings: Any) -> None:
    settings.TRUSTED_PROXY_COUNT = 1
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client, status = admin_login(
            manager.user.username, "wrong", HTTP_X_FORWARDED_FOR="not-an-address", REMOTE_ADDR="203.0.113.5"
        )
        assert status in (200, 429)

    client, status = admin_login(manager.user.username, PASSWORD, REMOTE_ADDR="203.0.113.5")

    assert status == 429 and not logged_in(client)


def test_without_trusted_proxies_a_forwarded_header_is_ignored(manager: TeamMember) -> None:
    for n in range(settings.AXES_FAILURE_LIMIT):
        # A different made-up address each time does not escape the count.
        admin_login(manager.user.username, "wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}", REMOTE_ADDR="203.0.113.5")

    client, status = admin_login(
        manager.user.username, PASSWORD, HTTP_X_FORWARDED_FOR="192.0.2.99", REMOTE_ADDR="203.0.113.5"
    )

    assert status == 429 and not logged_in(client)


def test_a_wrong_api_token_tried_again_and_again_is_locked_out_in_the_api_error_shape(manager: TeamMember) -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = api_get("f" * 40, REMOTE_ADDR="203.0.113.5")
        assert response.status_code == 401
        assert response.json() == {"error": "not_authenticated", "detail": "Invalid token."}

    last = api_get("f" * 40, REMOTE_ADDR="203.0.113.5")
    assert last.status_code == 429
    assert last.json()["error"] == "too_many_requests"
    assert int(last["Retry-After"]) > 0
    assert api_get("f" * 40, REMOTE_ADDR="203.0.113.5").status_code == 429


def test_wrong_tokens_from_an_address_never_lock_out_a_good_token_behind_it(manager: TeamMember) -> None:
    """An office behind one address: one person's wrong (or revoked) tokens
    must not lock everyone else's tokens, other tenants' included."""
    token = Token.objects.create(user=manager.user)
    for n in range(settings.AXES_FAILURE_LIMIT + 2):
        assert api_get(f"{n:040x}", REMOTE_ADDR="203.0.113.5").status_code == 401

    assert api_get(token.key, REMOTE_ADDR="203.0.113.5").status_code == 200


def test_a_fresh_token_works_with_the_token_header(manager: TeamMember) -> None:
    token = Token.objects.create(user=manager.user)

    response = api_get(token.key)

    assert response.status_code == 200
    assert response.json()["count"] == 0


def test_an_expired_token_is_refused_with_401_in_the_error_shape(manager: TeamMember, settings: Any) -> None:
    token = Token.objects.create(user=manager.user)
    # The token was made longer ago than its lifetime.
    Token.objects.filter(pk=token.pk).update(
        created=timezone.now() - timedelta(days=settings.API_TOKEN_TTL_DAYS, seconds=1)
    )

    response = api_get(token.key)

    assert response.status_code == 401
    assert response.json() == {
        "error": "not_authenticated",
        "detail": "Token has expired; ask an administrator for a new one.",
    }
    assert response["WWW-Authenticate"] == "Token"
    assert not Token.objects.filter(user=manager.user).exists(), "so drf_create_token USER issues a new one"


def test_a_token_one_day_short_of_its_lifetime_still_works(manager: TeamMember, settings: Any) -> None:
    token = Token.objects.create(user=manager.user)
    Token.objects.filter(pk=token.pk).update(created=timezone.now() - timedelta(days=settings.API_TOKEN_TTL_DAYS - 1))

    assert api_get(token.key).status_code == 200


@pytest.fixture
def superuser(db: None) -> Any:
    return get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)


def test_a_token_revoked_in_the_admin_is_refused(manager: TeamMember, superuser: Any) -> None:
    token = Token.objects.create(user=manager.user)
    assert api_get(token.key).status_code == 200
    admin = Client()
    admin.force_login(superuser)

    response = admin.post(
        reverse("admin:authtoken_tokenproxy_delete", args=[manager.user.pk]), {"post": "yes"}, follow=True
    )

    assert response.status_code == 200
    refused = api_get(token.key)
    assert refused.status_code == 401
    assert refused.json() == {"error": "not_authenticated", "detail": "Invalid token."}


def test_the_token_admin_shows_expiry_and_never_a_whole_key(manager: TeamMember, superuser: Any) -> None:
    token = Token.objects.create(user=manager.user)
    admin = Client()
    admin.force_login(superuser)

    page = admin.get(reverse("admin:authtoken_tokenproxy_changelist")).content.decode()

    assert token.key not in page
    assert f"{token.key[:6]}…" in page
    assert "active" in page
