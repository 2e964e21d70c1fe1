"""A request id on every request, every answer and every log line.

`RequestIdMiddleware` (first in MIDDLEWARE) takes the caller's `X-Request-ID`
when it is a plain token (a proxy or load balancer in front usually sets one,
so its logs and ours join up), makes one otherwise, keeps it as the request's id
(crm.context) for the request's duration and answers with it in `X-Request-ID`.
`RequestIdFilter`, on the log handler, copies it onto every record, so the
JSON logs (LOG_FORMAT=json) carry `request_id`; outside a request it is null.

A header value is never trusted as it comes: a newline in it would forge log
lines, and a long one would bloat every line. Anything but 1 to 64 of
[A-Za-z0-9._-] is replaced with a new id.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest
from django.http.response import HttpResponseBase

from crm.context import request_id as current_request_id
from crm.context import request_id_set

HEADER = "X-Request-ID"
_SANE = re.compile(r"[A-Za-z0-9._-]{1,64}")


def request_id_from(value: str | None) -> str:
    """The caller's id when it is sane, else a new one (uuid4, hex)."""
    # fullmatch, not `$`: `$` also matches before a trailing newline.
    if value and _SANE.fullmatch(value):
        return value
    return uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        request_id = request_id_from(request.headers.get(HEADER))
        # Also on the request: Django logs a 4xx/5xx answer (django.request,
        # with the request on the record) after every middleware has returned.
        request.request_id = request_id  # type: ignore[attr-defined]
        # Unset when the block ends: a worker thread serves the next request with a clean slate.
        with request_id_set(request_id):
            response = self.get_response(request)
        response[HEADER] = request_id
        return response


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to every record: the request's being served, else the
    one of the request the record names (django.request), else None."""

    def filter(self, record: logging.LogRecord) -> bool:
        request_id = current_request_id()
        if request_id is None:
            request_id = getattr(getattr(record, "request", None), "request_id", None)
        record.request_id = request_id
        return True
