"""Every request has an id: the caller's when sane, a new one otherwise; it is
answered in X-Request-ID and carried by every log line of the request."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils.module_loading import import_string

pytestmark = pytest.mark.django_db

NEW_ID = re.compile(r"[0-9a-f]{32}")


def test_a_sane_request_id_is_echoed() -> None:
    for given in ("abc-123", "req_7.f-X", "a" * 64):
        response = Client().get("/healthz/", HTTP_X_REQUEST_ID=given)
        assert response["X-Request-ID"] == given


def test_a_request_without_an_id_gets_a_new_one_each_time() -> None:
    first = Client().get("/healthz/")["X-Request-ID"]
    second = Client().get("/healthz/")["X-Request-ID"]
    assert NEW_ID.fullmatch(first) and NEW_ID.fullmatch(second)
    assert first != second


@pytest.mark.parametrize(
    "hostile",
    ["abc\ninjected=1", "abc\r\nX-Evil: 1", "a" * 65, "x" * 200, "two words", "café", "", "<script>", "abc\n"],
)
def test_a_hostile_request_id_is_replaced(hostile: str) -> None:
    response = Client().get("/healthz/", HTTP_X_REQUEST_ID=hostile)
    assert NEW_ID.fullmatch(response["X-Request-ID"]), response["X-Request-ID"]


def test_a_refused_or_redirected_answer_carries_the_id_too() -> None:
    assert Client().get("/app/", HTTP_X_REQUEST_ID="r-1")["X-Request-ID"] == "r-1"  # a redirect to sign in
    assert Client().get("/no-such-page/", HTTP_X_REQUEST_ID="r-2")["X-Request-ID"] == "r-2"


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """django.request's records, through the settings' own request-id filter and JSON formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    config: dict[str, Any] = settings.LOGGING
    formatter = dict(config["formatters"]["json"])
    handler.setFormatter(import_string(formatter.pop("()"))(**formatter))
    handler.addFilter(import_string(config["filters"]["request_id"]["()"])())
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)


def test_a_json_log_line_of_a_request_carries_its_id(json_lines: io.StringIO) -> None:
    # A 404 is logged by django.request (a warning) while the request runs.
    Client().get("/no-such-page/", HTTP_X_REQUEST_ID="trace-42")
    records = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    assert records, "the 404 was logged"
    assert records[-1]["request_id"] == "trace-42"
    assert records[-1]["level"] == "WARNING"
    assert "Not Found" in records[-1]["message"]
    # Outside a request there is no id.
    logging.getLogger("django.request").warning("outside")
    assert json.loads(json_lines.getvalue().splitlines()[-1])["request_id"] is None


def test_log_format_json_makes_every_line_a_json_object() -> None:
    """The settings themselves: a process started with LOG_FORMAT=json logs JSON; without it, the plain message."""
    script = (
        "import django, logging; django.setup();"
        "from crm.context import request_id_set; held = request_id_set('proc-1'); held.__enter__();"
        "logging.getLogger('leadops.test').warning('hello %s', 'there')"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "leadops.settings_test", "LOG_FORMAT": "json"}
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    line = json.loads(run.stderr.strip().splitlines()[-1])
    assert (line["message"], line["request_id"], line["logger"]) == ("hello there", "proc-1", "leadops.test")
    env.pop("LOG_FORMAT")
    plain = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert plain.stderr.strip().splitlines()[-1] == "hello there"
