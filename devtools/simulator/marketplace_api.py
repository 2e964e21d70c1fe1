"""A real HTTP server on 127.0.0.1 standing in for Thumbtack's and Yelp's
APIs, for the simulator (devtools/simulator/marketplaces.py) and the tests
(tests/helpers/marketplaces.py). Our code reaches it through
THUMBTACK_API_URL and YELP_API_URL; nothing of ours is replaced.

`MarketplaceServer` answers, in each marketplace's shape:

- Thumbtack: `POST /api/v4/negotiations/<id>/messages` `{"text"}` takes a
  business message into the thread and answers it (`messageID`…); `GET` of
  the same path lists the thread (`{"data": [...], "pagination"}`);
- Yelp: `GET /v3/leads/<id>` (the lead, 404 for one it does not hold),
  `GET /v3/leads/<id>/events` (`{"events": [...]}`, oldest first, as Yelp
  shows the thread), `POST /v3/leads/<id>/events` `{"request_content",
  "request_type": "TEXT"}` (201), `POST /v3/leads/<id>/mark_as_read`,
  `GET /v3/businesses/<id>/lead_ids` and `POST /v3/businesses/subscriptions`
  (202).

Every request needs `Authorization: Bearer <token>` with a token in `tokens`
(any token while `tokens` is empty). Each request is answered per `plan`
(one entry per request, in order), then per `default`: 200 (as above), an
HTTP status (that error), or "stall" (a POST is taken first, then the answer
never comes in time: the marketplace has it, the answer is lost). Every
request is kept in `seen`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from django.utils import timezone

Behaviour = int | str


def iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class MarketplaceServer:
    def __init__(self, port: int = 0) -> None:
        self.tokens: set[str] = set()
        self.plan: list[Behaviour] = []
        self.default: Behaviour = 200
        self.seen: list[dict[str, Any]] = []
        # Thumbtack: each negotiation's messages, as its GET lists them.
        self.threads: dict[str, list[dict[str, Any]]] = {}
        # Yelp: leads, their events, and each business's lead ids.
        self.leads: dict[str, dict[str, Any]] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        self.business_leads: dict[str, list[str]] = {}
        self.read: list[str] = []  # Yelp leads marked as read, in order
        self.subscriptions: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        self._ids = count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # --- the marketplaces' contents --------------------------------------------

    def yelp_lead(self, lead: dict[str, Any], events: list[dict[str, Any]] | None = None) -> None:
        """Hold a Yelp lead (and its events so far) for its business."""
        with self.lock:
            self.leads[lead["id"]] = lead
            self.events.setdefault(lead["id"], []).extend(events or [])
            ids = self.business_leads.setdefault(str(lead.get("business_id", "")), [])
            if lead["id"] not in ids:
                ids.append(lead["id"])

    def yelp_event(self, lead_id: str, event: dict[str, Any]) -> None:
        with self.lock:
            self.events.setdefault(lead_id, []).append(event)

    def posts(self, prefix: str = "") -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.seen if r["method"] == "POST" and r["path"].startswith(prefix)]

    # --- running ---------------------------------------------------------------------

    def start(self) -> MarketplaceServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="marketplaces", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self.release.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()

    def __enter__(self) -> MarketplaceServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- answering -------------------------------------------------------------------

    def _next(self, request: dict[str, Any]) -> Behaviour:
        with self.lock:
            self.seen.append(request)
            if self.tokens and request["authorization"].removeprefix("Bearer ").strip() not in self.tokens:
                return 401
            return self.plan.pop(0) if self.plan else self.default

    def _now(self) -> str:
        return iso(timezone.now())

    def _thumbtack(self, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
        # /api/v4/negotiations/<id>/messages
        if len(parts) != 5 or parts[2] != "negotiations" or parts[4] != "messages":
            return 404, {"error": "not_found"}
        negotiation = parts[3]
        with self.lock:
            thread = self.threads.setdefault(negotiation, [])
            if method == "GET":
                return 200, {"data": list(thread), "pagination": {"limit": 50}}
            text = body.get("text") if isinstance(body, dict) else None
            if not isinstance(text, str) or not text.strip():
                return 400, {"error": {"message": "text is required"}}
            message = {
                "messageID": f"7{next(self._ids):017d}",
                "negotiationID": negotiation,
                "from": "Business",
                "text": text,
                "attachments": [],
                "sentAt": self._now(),
            }
            thread.append(message)
            return 201, message

    def _yelp(self, method: str, parts: list[str], body: Any, query: dict[str, list[str]]) -> tuple[int, Any]:
        not_found = 404, {"error": {"code": "NOT_FOUND", "description": "Resource could not be found."}}
        with self.lock:
            if parts[:2] == ["v3", "leads"] and len(parts) >= 3:
                lead_id = parts[2]
                if lead_id not in self.leads:
                    return not_found
                if len(parts) == 3 and method == "GET":
                    return 200, self.leads[lead_id]
                if parts[3:] == ["events"] and method == "GET":
                    return 200, {"events": list(self.events.get(lead_id, []))}
                if parts[3:] == ["events"] and method == "POST":
                    content = body.get("request_content") if isinstance(body, dict) else None
                    if not isinstance(content, str) or not content or body.get("request_type") != "TEXT":
                        return 400, {"error": {"code": "VALIDATION_ERROR", "description": "request_content"}}
                    self.events.setdefault(lead_id, []).append(
                        {
                            "cursor": f"c{next(self._ids)}",
                            "event_content": {"fallback_text": content, "text": content},
                            "event_type": "TEXT",
                            "id": f"biz{next(self._ids):08d}",
                            "time_created": self._now(),
                            "user_display_name": "Business",
                            "user_type": "BIZ",
                        }
                    )
                    return 201, {}
                if parts[3:] == ["mark_as_read"] and method == "POST":
                    self.read.append(lead_id)
                    return 200, {}
                return not_found
            if parts[:2] == ["v3", "businesses"] and parts[3:] == ["lead_ids"] and method == "GET":
                ids = self.business_leads.get(parts[2], [])
                limit = int((query.get("limit") or ["20"])[0])
                offset = int((query.get("offset") or ["0"])[0])
                return 200, {"lead_ids": ids[offset : offset + limit], "has_more": offset + limit < len(ids)}
            if parts == ["v3", "businesses", "subscriptions"] and method == "POST":
                self.subscriptions.append(body if isinstance(body, dict) else {})
                return 202, {}
        return not_found

    def _answer(self, method: str, raw_path: str, body: Any, authorization: str) -> tuple[int, Any] | None:
        url = urlsplit(raw_path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        query = parse_qs(url.query)
        behaviour = self._next(
            {"method": method, "path": url.path, "query": query, "json": body, "authorization": authorization}
        )
        if behaviour not in (200, "stall"):
            status = int(behaviour) if isinstance(behaviour, int) else 500
            return status, {"error": {"code": "SYNTHETIC", "description": f"Synthetic error {status}"}}
        if parts[:2] == ["api", "v4"]:
            answer = self._thumbtack(method, parts, body)
        elif parts[:1] == ["v3"]:
            answer = self._yelp(method, parts, body, query)
        else:
            answer = 404, {"error": "not_found"}
        if behaviour == "stall":
            self.release.wait(10)  # the client gave up long before
            return None
        return answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._reply(server._answer("GET", self.path, None, self.headers.get("Authorization", "")))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"null")
                except ValueError:
                    body = None
                self._reply(server._answer("POST", self.path, body, self.headers.get("Authorization", "")))

            def _reply(self, answer: tuple[int, Any] | None) -> None:
                if answer is None:
                    return
                status, payload = answer
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: tests and the summary report

        return Handler


@contextmanager
def marketplaces_running(settings: Any) -> Iterator[MarketplaceServer]:
    """A started server with THUMBTACK_API_URL and YELP_API_URL pointing at
    it, and the marketplace timeouts shrunk (a stalled answer gives up after
    0.3 s)."""
    with MarketplaceServer() as server:
        settings.THUMBTACK_API_URL = server.url
        settings.YELP_API_URL = server.url
        settings.MARKETPLACE_TIMEOUT = (2.0, 0.3)
        yield server
