"""The browser-session middleware, skipped for provider webhooks.

Sessions, authentication and messages serve people in browsers. A provider
webhook (every URL under WEBHOOK_PATH_PREFIX) proves itself by a signature
or secret over the request it sends, never by a cookie: no view there reads
a session or `request.user`. Django's own CSRF middleware stays in place
(`check --deploy` looks for it, and it guards every other URL); every
webhook view is `csrf_exempt`, which it honours before any work. Skipping them keeps a webhook's acceptance to
its own work: find the source, check the signature, store the raw bytes.
Everything else (the https redirect, HSTS, allowed hosts, the size limit,
rate limits, raw-first storage) applies unchanged.

Each class is the Django middleware of the same name with one
difference: under the prefix it passes the request straight on.

`ViewerTimezoneMiddleware` is ours: every page speaks the viewer's time zone;
so are `NoStoreMiddleware` (no cached copy of a page with people on it) and
`SessionIdleMiddleware` (a session ends after hours without a request).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as _AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as _MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as _SessionMiddleware
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.deprecation import MiddlewareMixin

from crm.selectors import viewer_zone

# The API speaks UTC to every client (ISO 8601, "Z"), however it signed in.
API_PATH_PREFIX = "/api/"


def is_webhook(request: HttpRequest) -> bool:
    return request.path_info.startswith(settings.WEBHOOK_PATH_PREFIX)


class _SkippedForWebhooks(MiddlewareMixin):
    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if is_webhook(request):
            return self.get_response(request)
        return super().__call__(request)


class SessionMiddleware(_SkippedForWebhooks, _SessionMiddleware):
    pass


class AuthenticationMiddleware(_SkippedForWebhooks, _AuthenticationMiddleware):
    pass


class MessageMiddleware(_SkippedForWebhooks, _MessageMiddleware):
    pass


class ViewerTimezoneMiddleware:
    """Activates the viewer's time zone for the request (`viewer_zone`: their
    own, else their business's, else UTC), so the admin, the templates' `date`
    filter and forms that read a time all speak it; storage stays UTC.

    After AuthenticationMiddleware. Webhooks and the API keep UTC; a request
    without a session cookie is nobody's, and is not made to load a session
    (which would add `Vary: Cookie` to public pages).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        path = request.path_info
        if (
            is_webhook(request)
            or path.startswith(API_PATH_PREFIX)
            or settings.SESSION_COOKIE_NAME not in request.COOKIES
        ):
            return self.get_response(request)
        timezone.activate(viewer_zone(request.user))
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


# Pages and answers that carry people's names, numbers and words.
PRIVATE_PATH_PREFIXES = ("/app/", "/admin/", "/api/")


class NoStoreMiddleware:
    """`Cache-Control: no-store` (Django's never-cache headers) on every page
    and API answer under PRIVATE_PATH_PREFIXES that set none of its own: a
    shared computer's browser cache, or a proxy, keeps no copy of a
    conversation, a phone number or a payment."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if request.path_info.startswith(PRIVATE_PATH_PREFIXES) and not response.has_header("Cache-Control"):
            add_never_cache_headers(response)
        return response


# When the session last saw its user, in the session itself.
SESSION_SEEN = "leadops_seen"


class SessionIdleMiddleware:
    """A session ends after SESSION_COOKIE_AGE without a request (12 hours
    idle by default), however long it has lasted: each request pushes the
    end back. The session is written at most every SESSION_REFRESH_SECONDS,
    not on every request (the workspace polls every few seconds), so the
    end moves in steps of that size. After AuthenticationMiddleware."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        # Without a session cookie nobody is signed in: no session is loaded
        # (it would add `Vary: Cookie` to public pages).
        signed_in = settings.SESSION_COOKIE_NAME in request.COOKIES and not is_webhook(request)
        if signed_in and request.user.is_authenticated:
            now = int(time.time())
            if now - int(request.session.get(SESSION_SEEN, 0)) >= settings.SESSION_REFRESH_SECONDS:
                # Modifying the session saves it with a fresh expiry.
                request.session[SESSION_SEEN] = now
        return self.get_response(request)


def session_seen_at_login(sender: object, request: HttpRequest | None = None, **kwargs: object) -> None:
    """Mark a new session seen at login (`user_logged_in`)."""
    if request is not None and hasattr(request, "session"):
        request.session[SESSION_SEEN] = int(time.time())
