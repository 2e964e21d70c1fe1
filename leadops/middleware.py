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
"""

from __future__ import annotations

from collections.abc import Awaitable

from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as _AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as _MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as _SessionMiddleware
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.utils.deprecation import MiddlewareMixin


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
