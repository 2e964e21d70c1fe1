"""Real HTTP servers speaking the two language-model wire formats, for the
tests of agents/ai: OpenAI's chat completions (`POST /v1/chat/completions`,
structured output through `response_format` JSON schema) and Anthropic's
messages (`POST /v1/messages`, structured output through a forced tool use).
The official `openai` and `anthropic` SDKs talk to them through
LLM_BASE_URL; nothing of ours is replaced.

Each request is answered per `plan` (one entry per request, in order), then
per `default`:

- a dict: the structured answer the model gives (`intent`, `confidence`,
  `reply`, `facts`), wrapped in the wire format's envelope;
- "malformed": an envelope whose content is not the JSON asked for;
- "stall": never answers within the client's timeout;
- 429 (with `retry-after: 0`), 500 or any other status: the provider's
  error shape;
- a function of the request's JSON body: whichever of the above it returns
  (a scripted model that answers each message its own way).

Every request is kept in `seen` (its path, headers and JSON body).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any

Behaviour = dict[str, Any] | str | int | Callable[[dict[str, Any]], Any]

GOOD_DRAFT: dict[str, Any] = {
    "intent": "booking_request",
    "confidence": 0.91,
    "reply": "Hi {first_name}, thanks for reaching out to {business}. You can pick a time that suits you here: "
    "{booking_url}",
    "facts": ["booking_url"],
}
# What the Done-when flow's message tempts a model into: a price and a time
# the playbook never stated.
PROMISING_DRAFT: dict[str, Any] = {
    "intent": "price_question",
    "confidence": 0.88,
    "reply": "Hi {first_name}! A new AC runs about $4,500 installed and we can be there tomorrow at 9am.",
    "facts": ["service:hvac"],
}


def json_answer(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    """A provider's JSON answer, as the OpenAI and Anthropic servers send it."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    if status == 429:
        # Both SDKs honour the provider's own hint: no waiting in tests.
        handler.send_header("retry-after", "0")
    handler.end_headers()
    handler.wfile.write(data)


class ModelServer:
    def __init__(self, wire: str) -> None:
        assert wire in ("openai", "anthropic")
        self.wire = wire
        self.plan: list[Behaviour] = []
        self.default: Behaviour = GOOD_DRAFT
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        self._ids = count(1)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"null")
                except ValueError:
                    body = None
                behaviour = server._next(
                    {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "json": body}
                )
                wanted = "/v1/chat/completions" if server.wire == "openai" else "/v1/messages"
                if self.path != wanted or not isinstance(body, dict):
                    self._answer(404, server._error(404, "not found"))
                    return
                if callable(behaviour):
                    behaviour = behaviour(body)
                if behaviour == "stall":
                    server.release.wait(10)  # the client gave up long before
                    return
                if isinstance(behaviour, int):
                    self._answer(behaviour, server._error(behaviour, f"synthetic error {behaviour}"))
                    return
                self._answer(200, server._envelope(body, behaviour))

            def _answer(self, status: int, payload: Any) -> None:
                json_answer(self, status, payload)

            def log_message(self, format: str, *args: Any) -> None:
                return  # keep test output quiet

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        port = self.httpd.server_address[1]
        # The OpenAI SDK appends /chat/completions to its base URL (which
        # carries /v1); Anthropic's appends /v1/messages to the host.
        self.url = f"http://127.0.0.1:{port}/v1" if wire == "openai" else f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def _next(self, request: dict[str, Any]) -> Behaviour:
        with self.lock:
            self.seen.append(request)
            return self.plan.pop(0) if self.plan else self.default

    def _error(self, status: int, message: str) -> dict[str, Any]:
        if self.wire == "openai":
            kind = "rate_limit_exceeded" if status == 429 else "server_error"
            return {"error": {"message": message, "type": kind, "param": None, "code": kind}}
        kind = "rate_limit_error" if status == 429 else "api_error"
        return {"type": "error", "error": {"type": kind, "message": message}}

    def _envelope(self, body: dict[str, Any], behaviour: Behaviour) -> dict[str, Any]:
        n = next(self._ids)
        model = str(body.get("model", ""))
        if self.wire == "openai":
            content = "Sure! Here is my answer: not JSON at all" if behaviour == "malformed" else json.dumps(behaviour)
            return {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 1_760_000_000,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "finish_reason": "stop",
                        "logprobs": None,
                    }
                ],
                "usage": {"prompt_tokens": 412, "completion_tokens": 57, "total_tokens": 469},
            }
        tool = (body.get("tools") or [{}])[0].get("name", "answer")
        if behaviour == "malformed":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": "Sure! Here is my answer: not a tool call"}]
            stop = "end_turn"
        else:
            blocks = [{"type": "tool_use", "id": f"toolu_{n:024d}", "name": tool, "input": behaviour}]
            stop = "tool_use"
        return {
            "id": f"msg_{n:024d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 398, "output_tokens": 61},
        }

    def posts(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.seen)


@contextmanager
def model_server(settings: Any, wire: str = "openai", *, model: str = "test-model") -> Iterator[ModelServer]:
    """A started server with the LLM_* settings pointing at it: a short read
    timeout (a stalled answer gives up after 0.5 s) and one retry."""
    server = ModelServer(wire)
    server.thread.start()
    settings.LLM_PROVIDER = wire
    settings.LLM_MODEL = model
    settings.LLM_BASE_URL = server.url
    settings.LLM_API_KEY = "test-key-not-secret"
    settings.LLM_TIMEOUT_SECONDS = 0.5
    settings.LLM_CONNECT_TIMEOUT_SECONDS = 0.5
    settings.LLM_MAX_RETRIES = 1
    try:
        yield server
    finally:
        server.release.set()
        server.httpd.shutdown()
        server.httpd.server_close()
        server.thread.join(5)


def customer_message(body: dict[str, Any]) -> str:
    """The latest customer message a request asks about (either wire format)."""
    if "messages" in body and body["messages"] and body["messages"][-1].get("role") == "user":
        content = body["messages"][-1]["content"]
        return str(json.loads(content).get("latest_customer_message", ""))
    return ""
