"""A stand-in for Twilio's HTTP transport only: the real twilio SDK builds the
requests and parses the answers; this records each request and replies from
a script (JSON answers, or an exception the real transport would raise)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twilio.http import HttpClient
from twilio.http.response import Response

Answer = tuple[int, dict[str, Any]] | Exception | Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]


@dataclass
class Recorded:
    method: str
    url: str
    params: dict[str, Any]
    data: dict[str, Any]


@dataclass
class ScriptedTwilio(HttpClient):
    answers: list[Answer] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(logging.getLogger("tests.fake_twilio"), is_async=False, timeout=5)

    def request(
        self,
        method: str,
        uri: str,
        params: Any = None,
        data: Any = None,
        headers: Any = None,
        auth: Any = None,
        timeout: Any = None,
        allow_redirects: bool = False,
    ) -> Response:
        self.requests.append(Recorded(method, uri, dict(params or {}), dict(data or {})))
        answer = self.answers.pop(0) if self.answers else (500, {"message": "unscripted request"})
        if isinstance(answer, Exception):
            raise answer
        if callable(answer):
            answer = answer(dict(data or {}))
        status, body = answer
        return Response(status, json.dumps(body))


def created(sid: str = "SM" + "0" * 31 + "1", **more: Any) -> tuple[int, dict[str, Any]]:
    return 201, {"sid": sid, "status": "queued", "account_sid": "AC" + "0" * 32, **more}


def error(status: int, code: int, message: str) -> tuple[int, dict[str, Any]]:
    return status, {
        "code": code,
        "message": message,
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }
