"""Who is calling: the real client address, login throttling, expiring API tokens.

Failed admin logins and failed API tokens are counted by django-axes in its
database tables; a username and client address pair that failed
AXES_FAILURE_LIMIT times is refused until AXES_COOLOFF_TIME has passed.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.http import HttpRequest
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.authtoken.models import Token
from rest_framework.request import Request

# Wrong API tokens are counted per presented key (a digest of it, under a
# name no user can have: usernames hold no spaces or parentheses) and
# address: a key tried again and again is locked out, while an office
# behind one address keeps every other key working. A token is 160 random
# bits, so trying new keys is no way in.
API_TOKEN_LOGIN = "(api token {})"  # noqa: S105 (a name, not a password)


def _token_login(key: bytes) -> str:
    return API_TOKEN_LOGIN.format(hashlib.sha256(key).hexdigest()[:16])


class LoginThrottleBackend(AxesStandaloneBackend):
    """django-axes' lockout check, for logins that come with an HTTP request.

    A call without a request (the test client's `login()`, a shell) has no
    client to throttle; axes itself would refuse it outright."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> None:
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


def token_expires_at(token: Token) -> Any:
    return token.created + timedelta(days=settings.API_TOKEN_TTL_DAYS)


def token_is_expired(token: Token) -> bool:
    return bool(token_expires_at(token) <= timezone.now())


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF's `Authorization: Token <key>`, with an expiry and failure throttling.

    A token stops working API_TOKEN_TTL_DAYS after it was made; the first
    refused use deletes it, so `drf_create_token USER` then issues a new one.
    A revoked token (deleted in the admin) is simply unknown. Wrong tokens
    count as failed logins of that key from the client address; a key locked
    there is refused (429) until the cool-off has passed."""

    def authenticate(self, request: Request) -> tuple[Any, Token] | None:
        auth = get_authorization_header(request).split()
        if not auth or auth[0].lower() != self.keyword.lower().encode():
            return None
        django_request = request._request
        credentials = {"username": _token_login(auth[1] if len(auth) > 1 else b"")}
        if not AxesProxyHandler.is_allowed(django_request, credentials):
            raise _locked_out()
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            user_login_failed.send(sender=__name__, credentials=credentials, request=django_request)
            if getattr(django_request, "axes_locked_out", False):
                # This failure reached the limit. Answer in the API's own error
                # shape rather than letting axes' middleware swap in its page.
                django_request.axes_locked_out = False  # type: ignore[attr-defined]
                raise _locked_out() from None
            raise

    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        user, token = super().authenticate_credentials(key)
        if token_is_expired(token):
            token.delete()
            raise exceptions.AuthenticationFailed("Token has expired; ask an administrator for a new one.")
        return user, token


def _locked_out() -> exceptions.Throttled:
    wait = get_cool_off()
    return exceptions.Throttled(
        wait=wait.total_seconds() if wait else None,
        detail="Too many failed logins from this address; try again later.",
    )
