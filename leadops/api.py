"""API plumbing shared by every endpoint: one error shape."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found
from rest_framework.response import Response
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


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every API error is `{"error": <code>, "detail": ...}`."""
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    detail = data.get("detail", data) if isinstance(data, dict) else data
    response.data = {"error": _CODES.get(response.status_code, "error"), "detail": detail}
    return response


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 404 (`handler404`): under `/api/` the error shape, since a
    path no route matches (an id with a dot, say) never reaches a viewset;
    elsewhere Django's own page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": "not_found", "detail": "No API endpoint matches this path."}, status=404)
    return page_not_found(request, exception)
