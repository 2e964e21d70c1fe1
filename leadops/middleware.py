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

`ViewerTimezoneMiddleware` is ours: every page speaks the viewer's time zone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as _AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as _MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as _SessionMiddleware
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.utils import timezone
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
