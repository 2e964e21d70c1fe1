"""API plumbing shared by every endpoint: one error shape."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.defaults import page_not_found
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle
from rest_framework.views import exception_handler as drf_exception_handler

_CODES = {
    400: "bad_request",
    401: "not_authenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    415: "unsupported_media_type",
    429: "too_many_requests",
}


def _throttle_setup(throttle: UserRateThrottle | AnonRateThrottle) -> None:
    # The "throttle" cache (Redis, else this process's memory: leadops.settings).
    throttle.cache = caches["throttle"]


class UserThrottle(UserRateThrottle):
    """Every API view: per signed-in user (a token's or a session's),
    whatever address they call from. The rate is read from
    API_THROTTLE_RATES at each request, not frozen at import as DRF's own
    throttles read theirs (so an operator's or a test's setting holds)."""

    def __init__(self) -> None:
        _throttle_setup(self)
        super().__init__()

    def get_rate(self) -> str | None:
        return settings.API_THROTTLE_RATES.get(self.scope or "")


class AnonThrottle(AnonRateThrottle):
    """Every API view a caller may reach without signing in: per address."""

    def __init__(self) -> None:
        _throttle_setup(self)
        super().__init__()

    def get_rate(self) -> str | None:
        return settings.API_THROTTLE_RATES.get(self.scope or "")


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every API error is `{"error": <code>, "detail": ...}`."""
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    detail = data.get("detail", data) if isinstance(data, dict) else data
    response.data = {"error": _CODES.get(response.status_code, "error"), "detail": detail}
    return response


# Where a client is a program: an error answers in the API's shape, never
# an HTML page (a webhook provider logs the body; a client parses it).
MACHINE_PATHS = ("/api/", "/hooks/")


def _for_machines(request: HttpRequest) -> bool:
    return request.path.startswith(MACHINE_PATHS)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 404 (`handler404`): under `/api/` and `/hooks/` the error
    shape, since a path no route matches (an id with a dot, say) never
    reaches a viewset; elsewhere Django's own page."""
    if _for_machines(request):
        return JsonResponse({"error": "not_found", "detail": "No endpoint matches this path."}, status=404)
    return page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 400 (`handler400`: a request it refused before any view,
    e.g. a disallowed host or a malformed body)."""
    if _for_machines(request):
        return JsonResponse({"error": "bad_request", "detail": "The request could not be read."}, status=400)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 403 (`handler403`)."""
    if _for_machines(request):
        return JsonResponse({"error": "forbidden", "detail": "Not allowed."}, status=403)
    return defaults.permission_denied(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's 500 (`handler500`): nothing about the failure is said (it is
    in the server's log); a program gets the error shape to retry on."""
    if _for_machines(request):
        return JsonResponse({"error": "server_error", "detail": "The server failed; try again."}, status=500)
    return defaults.server_error(request)
