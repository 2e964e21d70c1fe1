"""What the OAuth providers' stand-ins share (devtools/simulator/google_calendar_api.py,
tests/helpers/microsoft_graph_calendar.py): a real HTTP server on 127.0.0.1
with the authorization-code flow in the shape both providers answer it.

- `GET <authorize_path>`: a person who consents (redirect with `code`).
- `POST <token_path>`: the `authorization_code` and `refresh_token` grants
  for our client only; a refresh token rotates (the old one dies) or is
  kept (none comes back on a refresh) as `rotates_refresh` says;
  `revoke()` makes every token refused (`invalid_grant`, 401 on the API).
- Anything else is the API under `api_prefix`: a live bearer token or 401
  (`unauthorized`), then `_api`, which each provider's stand-in answers.
  Every API request is kept in `seen`.
"""

from __future__ import annotations

import json
import secrets
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlencode, urlsplit

from devtools.simulator.local_server import LocalServer


class OAuthStandIn(LocalServer, ABC):
    client_id: ClassVar[str]
    client_secret: ClassVar[str]
    authorize_path: ClassVar[str]
    token_path: ClassVar[str]
    api_prefix: ClassVar[str]
    # What the API answers a refused access token, in the provider's shape.
    unauthorized: ClassVar[dict[str, Any]]
    rotates_refresh: ClassVar[bool] = False
    # What a refused refresh token is told, beside `invalid_grant`.
    revoked_description: ClassVar[str] = ""
    # More fields of the answer to a code (Google names the scopes granted).
    code_answer_extra: ClassVar[dict[str, str]] = {}

    def __init__(self, port: int = 0) -> None:
        self.lock = threading.Lock()
        self.codes: dict[str, str] = {}
        self.access: set[str] = set()
        self.refresh: set[str] = set()
        # Every API request, (method, path), refused ones too.
        self.seen: list[tuple[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def do_PATCH(self) -> None:
                self._route("PATCH")

            def do_PUT(self) -> None:
                self._route("PUT")

            def do_DELETE(self) -> None:
                self._route("DELETE")

            def _route(self, method: str) -> None:
                url = urlsplit(self.path)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == server.authorize_path:
                    code = secrets.token_urlsafe(12)
                    with server.lock:
                        server.codes[code] = query.get("redirect_uri", "")
                    back = urlencode({"state": query.get("state", ""), "code": code})
                    self.send_response(302)
                    self.send_header("Location", f"{query.get('redirect_uri', '')}?{back}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if url.path == server.token_path:
                    self._answer(*server._token({k: v[0] for k, v in parse_qs(raw.decode()).items()}))
                    return
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                with server.lock:
                    live = token in server.access
                    server.seen.append((method, url.path))
                if not live:
                    self._answer(401, server.unauthorized)
                    return
                body = json.loads(raw) if raw else {}
                self._answer(*server._api(method, url.path.removeprefix(server.api_prefix), query, body))

            def _answer(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode() if payload is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.serve(port, Handler)

    # -- what each provider's stand-in answers
    @abstractmethod
    def _api(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        """(status, JSON) for an API request with a live token; `path` without `api_prefix`."""

    # -- OAuth
    def _issue(self, *, refresh: bool = True) -> dict[str, Any]:
        # Called under the lock.
        answer: dict[str, Any] = {"access_token": secrets.token_urlsafe(16), "expires_in": 3599, "token_type": "Bearer"}
        self.access.add(answer["access_token"])
        if refresh:
            answer["refresh_token"] = secrets.token_urlsafe(24)
            self.refresh.add(answer["refresh_token"])
        return answer

    def grant(self) -> dict[str, Any]:
        """Tokens as a consent would have brought them, for a connection made in a test."""
        with self.lock:
            return self._issue()

    def _token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("client_id") != self.client_id or form.get("client_secret") != self.client_secret:
            return 401, {"error": "invalid_client"}
        with self.lock:
            if form.get("grant_type") == "authorization_code":
                if self.codes.pop(form.get("code", ""), None) != form.get("redirect_uri"):
                    return 400, {"error": "invalid_grant"}
                return 200, {**self._issue(), **self.code_answer_extra}
            if form.get("grant_type") == "refresh_token":
                old = form.get("refresh_token", "")
                if old not in self.refresh:
                    return 400, {"error": "invalid_grant", "error_description": self.revoked_description}
                if self.rotates_refresh:
                    self.refresh.discard(old)
                return 200, self._issue(refresh=self.rotates_refresh)
        return 400, {"error": "unsupported_grant_type"}

    def accept(self, access: str, refresh: str) -> None:
        """A token pair issued earlier (the demo's, kept in its connection) taken as live."""
        with self.lock:
            self.access.add(access)
            self.refresh.add(refresh)

    def expire_access(self) -> None:
        with self.lock:
            self.access.clear()

    def revoke(self) -> None:
        with self.lock:
            self.access.clear()
            self.refresh.clear()


@contextmanager
def serving(server: OAuthStandIn) -> Iterator[None]:
    """The stand-in answering for the block."""
    server.start()
    try:
        yield
    finally:
        server.stop()
