"""A real HTTP server standing in for the Microsoft identity platform and
Microsoft Graph's calendar API, in their shapes, for the calendar sync
tests. Our adapter reaches it through MS_LOGIN_URL and MS_GRAPH_URL.

- `GET /common/oauth2/v2.0/authorize`: a person who consents.
- `POST /common/oauth2/v2.0/token`: code and refresh grants; refresh tokens
  rotate (the old one dies); `revoke()` makes every token refused
  (`invalid_grant`, 401 on Graph).
- `/v1.0`: `me`, `me/calendar/getSchedule`, `me/events` (create — one per
  `transactionId` —, get, patch, delete, list by `lastModifiedDateTime`),
  `subscriptions` (create, after the validation handshake `validate(url)`
  answers the token back; patch to renew).

Times are as Graph writes them: `{"dateTime": "…T15:00:00.0000000",
"timeZone": "UTC"}`. `busy_extra` adds busy schedule items.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

CLIENT_ID = "00000000-aaaa-bbbb-cccc-111111111111"
CLIENT_SECRET = "ms-client-secret-0123456789"
USER_ID = "6e7b768e-07e2-4810-8459-485f84f8f204"
MAIL = "tom@contoso.example"
LOGIN = "/common/oauth2/v2.0"
GRAPH = "/v1.0"


def graph_time(moment: datetime) -> dict[str, str]:
    return {"dateTime": moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.0000000"), "timeZone": "UTC"}


def _parse(value: dict[str, str]) -> datetime:
    return datetime.fromisoformat(value["dateTime"][:19]).replace(tzinfo=UTC)


class GraphServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.codes: dict[str, str] = {}
        self.access: set[str] = set()
        self.refresh: set[str] = set()
        self.events: dict[str, dict[str, Any]] = {}
        self.transactions: dict[str, str] = {}
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self.busy_extra: list[tuple[datetime, datetime]] = []
        self.creates = 0
        self.clock = datetime.now(UTC)
        # The validation handshake: called with the notification URL and the token; returns what came back.
        self.validate: Callable[[str, str], tuple[int, str, str]] | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def do_PATCH(self) -> None:
                self._route("PATCH")

            def do_DELETE(self) -> None:
                self._route("DELETE")

            def _route(self, method: str) -> None:
                url = urlsplit(self.path)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == f"{LOGIN}/authorize":
                    code = secrets.token_urlsafe(12)
                    with server.lock:
                        server.codes[code] = query.get("redirect_uri", "")
                    back = urlencode({"state": query.get("state", ""), "code": code})
                    self.send_response(302)
                    self.send_header("Location", f"{query.get('redirect_uri', '')}?{back}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if url.path == f"{LOGIN}/token":
                    self._answer(*server._token({k: v[0] for k, v in parse_qs(raw.decode()).items()}))
                    return
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                with server.lock:
                    live = token in server.access
                if not live:
                    self._answer(401, {"error": {"code": "InvalidAuthenticationToken", "message": "expired"}})
                    return
                body = json.loads(raw) if raw else {}
                self._answer(*server._graph(method, url.path.removeprefix(GRAPH), query, body))

            def _answer(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode() if payload is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # -- OAuth
    def _pair(self) -> dict[str, Any]:
        access, refresh = secrets.token_urlsafe(16), secrets.token_urlsafe(24)
        self.access.add(access)
        self.refresh.add(refresh)
        return {"access_token": access, "refresh_token": refresh, "expires_in": 3599, "token_type": "Bearer"}

    def grant(self) -> dict[str, str]:
        with self.lock:
            return self._pair()

    def _token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != CLIENT_SECRET:
            return 401, {"error": "invalid_client"}
        with self.lock:
            if form.get("grant_type") == "authorization_code":
                if self.codes.pop(form.get("code", ""), None) != form.get("redirect_uri"):
                    return 400, {"error": "invalid_grant"}
                return 200, self._pair()
            if form.get("grant_type") == "refresh_token":
                old = form.get("refresh_token", "")
                if old not in self.refresh:
                    return 400, {"error": "invalid_grant", "error_description": "AADSTS70000: the grant is revoked"}
                self.refresh.discard(old)
                return 200, self._pair()
        return 400, {"error": "unsupported_grant_type"}

    def expire_access(self) -> None:
        with self.lock:
            self.access.clear()

    def revoke(self) -> None:
        with self.lock:
            self.access.clear()
            self.refresh.clear()

    # -- the calendar
    def _touch(self, event: dict[str, Any]) -> None:
        self.clock += timedelta(seconds=1)
        event["lastModifiedDateTime"] = self.clock.strftime("%Y-%m-%dT%H:%M:%SZ")

    def move(self, event_id: str, starts: datetime, ends: datetime) -> None:
        with self.lock:
            event = self.events[event_id]
            event["start"], event["end"] = graph_time(starts), graph_time(ends)
            self._touch(event)

    def delete(self, event_id: str) -> None:
        with self.lock:
            del self.events[event_id]

    def _graph(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        if (method, path) == ("POST", "/subscriptions"):
            return self._subscribe(body)
        with self.lock:
            if (method, path) == ("GET", "/me"):
                return 200, {"id": USER_ID, "displayName": "Tom Technician", "mail": MAIL, "userPrincipalName": MAIL}
            if (method, path) == ("POST", "/me/calendar/getSchedule"):
                start, end = _parse(body["startTime"]), _parse(body["endTime"])
                blocks = [(_parse(e["start"]), _parse(e["end"])) for e in self.events.values()] + self.busy_extra
                items = [
                    {"status": "busy", "start": graph_time(s), "end": graph_time(e)}
                    for s, e in sorted(blocks)
                    if s < end and e > start
                ]
                return 200, {"value": [{"scheduleId": body["schedules"][0], "scheduleItems": items}]}
            if (method, path) == ("POST", "/me/events"):
                made = self.transactions.get(str(body.get("transactionId") or ""))
                if made is not None and made in self.events:
                    return 201, self.events[made]
                event: dict[str, Any] = {
                    "id": "AAMk" + secrets.token_hex(12),
                    "isCancelled": False,
                    "isAllDay": False,
                    **body,
                }
                self.events[event["id"]] = event
                if body.get("transactionId"):
                    self.transactions[body["transactionId"]] = event["id"]
                self.creates += 1
                self._touch(event)
                return 201, event
            if (method, path) == ("GET", "/me/events"):
                since = datetime.fromisoformat(query["$filter"].split(" ge ")[1])
                rows = sorted(
                    (e for e in self.events.values() if datetime.fromisoformat(e["lastModifiedDateTime"]) >= since),
                    key=lambda e: e["lastModifiedDateTime"],
                )
                return 200, {"value": rows}
            if path.startswith("/me/events/"):
                found = self.events.get(path.rsplit("/", 1)[1])
                if found is None:
                    return 404, {"error": {"code": "ErrorItemNotFound", "message": "not found"}}
                event = found
                if method == "GET":
                    return 200, event
                if method == "PATCH":
                    event.update(body)
                    self._touch(event)
                    return 200, event
                if method == "DELETE":
                    del self.events[event["id"]]
                    return 204, None
            if method == "PATCH" and path.startswith("/subscriptions/"):
                subscription = self.subscriptions.get(path.rsplit("/", 1)[1])
                if subscription is None:
                    return 404, {"error": {"code": "ResourceNotFound", "message": "no subscription"}}
                subscription["expirationDateTime"] = body["expirationDateTime"]
                return 200, subscription
        return 404, {"error": {"code": "ResourceNotFound", "message": path}}

    def _subscribe(self, body: dict[str, Any]) -> tuple[int, Any]:
        # Graph validates the URL before it makes the subscription (outside our lock: it calls back).
        token = secrets.token_urlsafe(16)
        if self.validate is None:
            return 400, {"error": {"code": "ValidationError", "message": "the notification URL did not answer"}}
        status, kind, text = self.validate(body["notificationUrl"], token)
        if status != 200 or not kind.startswith("text/plain") or text != token:
            return 400, {"error": {"code": "ValidationError", "message": "validation token not echoed"}}
        subscription = {"id": secrets.token_hex(16), **body}
        with self.lock:
            self.subscriptions[subscription["id"]] = subscription
        return 201, subscription


@contextmanager
def graph_running(settings: Any) -> Iterator[GraphServer]:
    server = GraphServer()
    server.thread.start()
    settings.MS_GRAPH_URL = f"{server.url}{GRAPH}"
    settings.MS_LOGIN_URL = f"{server.url}{LOGIN}"
    settings.MS_CLIENT_ID = CLIENT_ID
    settings.MS_CLIENT_SECRET = CLIENT_SECRET
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
        server.thread.join(5)
