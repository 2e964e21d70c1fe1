"""The browser-session middleware, skipped for provider webhooks.

Sessions, CSRF, authentication and messages serve people in browsers. A provider webhook (every URL under WEBHOOK_PATH_PREFIX) proves
itself by a signature or secret over the request it sends, never by a
cookie: no view there reads a session or `request.user`, so CSRF (which
guards ambient cookie credentials) has nothing to guard, and every webhook
view is `csrf_exempt` anyway. Skipping them keeps a webhook's acceptance to
its own work: find the source, check the signature, store the raw bytes.
Everything else (the https redirect, HSTS, allowed hosts, the size limit,
rate limits, raw-first storage) applies unchanged.

Each class is the Django middleware of the same name with one
difference: under the prefix it passes the request straight on.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as _AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as _MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as _SessionMiddleware
from django.http import HttpRequest, HttpResponseForbidden
from django.http.response import HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware as _CsrfViewMiddleware
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


class CsrfViewMiddleware(_SkippedForWebhooks, _CsrfViewMiddleware):
    # The check itself runs in process_view, which the handler calls directly.
    def process_view(
        self, request: HttpRequest, callback: Any, callback_args: Any, callback_kwargs: Any
    ) -> HttpResponseForbidden | None:
        if is_webhook(request):
            return None
        return super().process_view(request, callback, callback_args, callback_kwargs)
