"""A real HTTP server standing in for Jobber: its OAuth endpoints and its
GraphQL API, in Jobber's shapes, for the sync tests (tests/helpers/jobber.py)
and the demo (devtools/standins.py). Our adapter reaches it through
JOBBER_API_URL and JOBBER_AUTH_URL; nothing of ours is replaced.

- `GET /api/oauth/authorize` answers as a person who consents: a redirect to
  `redirect_uri` with `code` and `state` (`consent = False`: `error=access_denied`).
- `POST /api/oauth/token` (form): `authorization_code` and `refresh_token`
  grants, checked against the app's client id and secret. Refresh tokens
  rotate: each use returns a new pair and kills the old refresh token;
  `revoke()` kills every token (a contractor who removed the app).
  Access tokens are JWT-shaped with an `exp`; `expire_access()` makes the
  server refuse the ones it issued (401), whatever their `exp`.
- `POST /api/graphql`: needs a live bearer token (401) and
  `X-JOBBER-GRAPHQL-VERSION` (an error without it). Each request costs
  points from a budget (`extensions.cost` on every answer); `throttle(n)`
  makes the next n requests answer `THROTTLED` with the budget they found.
  Root fields: account, clients (searchTerm, first, after), client,
  clientCreate, requestCreate, and for quotes, jobs, visits, invoices and
  paymentRecords one record by id or a page changed after a time, with
  `pageInfo {hasNextPage endCursor}`. A deleted record reads as null.

Records live in `records[kind][id]`; `add` and `change` keep `updatedAt`
moving forward. Every GraphQL request is kept in `seen`; `made` counts
creates by kind; `create_delay` holds every create that long (races).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from django.utils import timezone

from agents.sync.jobber import jobber_signature
from devtools.simulator.local_server import LocalServer

CLIENT_ID = "jobber-app-client-id"
CLIENT_SECRET = "jobber-app-client-secret-0123456789"  # noqa: S105 - the stand-in app's own, public
ACCOUNT_ID = "Z2lkOi8vSm9iYmVyL0FjY291bnQvMTIzNDU="
APP_ID = "a1b2c3d4-app"
MAXIMUM = 10_000
RESTORE_RATE = 500
# One record's field name -> its list field.
LISTS = {
    "quote": "quotes",
    "job": "jobs",
    "visit": "visits",
    "invoice": "invoices",
    "paymentRecord": "paymentRecords",
    "client": "clients",
}
GIDS = {
    "client": "Client",
    "request": "Request",
    "quote": "Quote",
    "job": "Job",
    "visit": "Visit",
    "invoice": "Invoice",
    "paymentRecord": "PaymentRecord",
}


def gid(kind: str, number: int) -> str:
    """An id as Jobber encodes them: base64 of gid://Jobber/<Type>/<n>."""
    return base64.b64encode(f"gid://Jobber/{GIDS[kind]}/{number}".encode()).decode()


def _b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _digits(value: str) -> str:
    digits = "".join(c for c in value if c.isdigit())
    return digits[1:] if len(digits) == 11 and digits.startswith("1") else digits


def webhook_body(topic: str, item_id: str, *, account_id: str = ACCOUNT_ID, occurred_at: str = "") -> bytes:
    """A webhook as Jobber sends it: ids only."""
    event = {
        "topic": topic,
        "appId": APP_ID,
        "accountId": account_id,
        "itemId": item_id,
        "occurredAt": occurred_at or iso(timezone.now()),
    }
    return json.dumps({"data": {"webHookEvent": event}}).encode()


def webhook_headers(body: bytes, *, secret: str = CLIENT_SECRET) -> dict[str, str]:
    return {"X-Jobber-Hmac-SHA256": jobber_signature(secret, body)}


class JobberServer(LocalServer):
    def __init__(self, port: int = 0) -> None:
        self.lock = threading.Lock()
        self.consent = True
        self.codes: dict[str, str] = {}  # code -> redirect_uri
        self.access: dict[str, float] = {}  # live access tokens -> exp
        self.refresh: set[str] = set()  # live refresh tokens
        self.refreshed: list[str] = []  # refresh tokens used, in order
        self.records: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in GIDS}
        self.numbers: Counter[str] = Counter()
        self.made: Counter[str] = Counter()
        self.seen: list[dict[str, Any]] = []
        self.available = float(MAXIMUM)
        self.throttles: list[tuple[float, float]] = []  # (currently available, requested cost)
        self.create_delay = 0.0
        self.clock = timezone.now()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if url.path != "/api/oauth/authorize":
                    self._answer(404, {"error": "not_found"})
                    return
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if query.get("client_id") != CLIENT_ID or query.get("response_type") != "code":
                    self._answer(400, {"error": "invalid_request"})
                    return
                back = {"state": query.get("state", "")}
                if server.consent:
                    code = secrets.token_urlsafe(12)
                    with server.lock:
                        server.codes[code] = query.get("redirect_uri", "")
                    back["code"] = code
                else:
                    back["error"] = "access_denied"
                self.send_response(302)
                self.send_header("Location", f"{query.get('redirect_uri', '')}?{urlencode(back)}")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                url = urlsplit(self.path)
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if url.path == "/api/oauth/token":
                    status, body = server._token({k: v[0] for k, v in parse_qs(raw.decode()).items()})
                    self._answer(status, body)
                    return
                if url.path != "/api/graphql":
                    self._answer(404, {"error": "not_found"})
                    return
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if not server._live(token):
                    self._answer(401, {"message": "Unauthorized"})
                    return
                try:
                    payload = json.loads(raw)
                except ValueError:
                    self._answer(400, {"errors": [{"message": "invalid JSON"}]})
                    return
                version = self.headers.get("X-JOBBER-GRAPHQL-VERSION", "")
                self._answer(200, server._graphql(payload, version))

            def _answer(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.serve(port, Handler)

    # -- OAuth ------------------------------------------------------------------------------

    def accept(self, access: str, refresh: str) -> None:
        """A token pair issued earlier (the demo's, kept in its connection)
        taken as live: the access token until its JWT's `exp`."""
        payload = access.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        with self.lock:
            self.access[access] = float(claims["exp"])
            self.refresh.add(refresh)

    def grant(self) -> dict[str, str]:
        """A fresh token pair, as an authorization-code exchange gives."""
        with self.lock:
            return self._pair()

    def _pair(self) -> dict[str, str]:
        exp = time.time() + 3600
        access = ".".join(
            [_b64url({"alg": "HS256", "typ": "JWT"}), _b64url({"exp": int(exp), "sub": ACCOUNT_ID}), "c2ln"]
        )
        refresh = secrets.token_urlsafe(24)
        self.access[access] = exp
        self.refresh.add(refresh)
        return {"access_token": access, "refresh_token": refresh}

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
                self.refreshed.append(old)
                if old not in self.refresh:
                    return 401, {"error": "invalid_grant", "error_description": "refresh token is invalid"}
                self.refresh.discard(old)  # rotation: the old one dies now
                return 200, self._pair()
        return 400, {"error": "unsupported_grant_type"}

    def _live(self, token: str) -> bool:
        with self.lock:
            exp = self.access.get(token)
        return exp is not None and exp > time.time()

    def expire_access(self) -> None:
        with self.lock:
            self.access.clear()

    def revoke(self) -> None:
        with self.lock:
            self.access.clear()
            self.refresh.clear()

    # -- records ----------------------------------------------------------------------------

    def _tick(self) -> str:
        self.clock += timedelta(seconds=1)
        return iso(self.clock)

    def add(self, kind: str, **fields: Any) -> str:
        with self.lock:
            self.numbers[kind] += 1
            record_id = gid(kind, self.numbers[kind])
            self.records[kind][record_id] = {"id": record_id, **fields, "updatedAt": self._tick()}
            return record_id

    def change(self, kind: str, record_id: str, **fields: Any) -> None:
        with self.lock:
            self.records[kind][record_id].update(fields, updatedAt=self._tick())

    def delete(self, kind: str, record_id: str) -> None:
        with self.lock:
            self.records[kind].pop(record_id)

    def throttle(self, times: int = 1, *, available: float = 100, requested: float = 1100) -> None:
        with self.lock:
            self.throttles += [(available, requested)] * times

    # -- GraphQL ------------------------------------------------------------------------------

    def _graphql(self, payload: dict[str, Any], version: str) -> dict[str, Any]:
        query, variables = str(payload.get("query") or ""), payload.get("variables") or {}
        root = re.search(r"^\s*(?:query|mutation)\b[^{]*\{\s*(\w+)", query)
        field = root.group(1) if root else ""
        with self.lock:
            self.seen.append({"field": field, "variables": variables, "version": version})
            cost = 10.0 if field not in LISTS.values() else 2.0 * float(variables.get("first") or 100)
            if self.throttles:
                available, requested = self.throttles.pop(0)
                return {
                    "errors": [{"message": "Throttled", "extensions": {"code": "THROTTLED"}}],
                    "extensions": {"cost": self._cost(requested, 0, available)},
                }
        if not version:
            return {"errors": [{"message": "X-JOBBER-GRAPHQL-VERSION header is required"}]}
        data = self._answer(field, variables)
        return {"data": data, "extensions": {"cost": self._cost(cost, cost, self.available)}}

    def _cost(self, requested: float, actual: float, available: float) -> dict[str, Any]:
        return {
            "requestedQueryCost": requested,
            "actualQueryCost": actual,
            "throttleStatus": {
                "maximumAvailable": MAXIMUM,
                "currentlyAvailable": available,
                "restoreRate": RESTORE_RATE,
            },
        }

    def _answer(self, field: str, variables: dict[str, Any]) -> dict[str, Any]:
        if field == "account":
            return {"account": {"id": ACCOUNT_ID, "name": "Acme Heating & Air (Jobber)"}}
        if field == "clientCreate":
            return {"clientCreate": self._create("client", variables["input"])}
        if field == "requestCreate":
            return {"requestCreate": self._create("request", variables["input"])}
        if field == "clients" and variables.get("search") is not None:
            return {"clients": self._search(str(variables["search"]))}
        if field in LISTS:
            with self.lock:
                node = self.records[field].get(str(variables.get("id")))
                node = self._expand(field, node) if node else None
            return {field: node}
        kind = next((one for one, many in LISTS.items() if many == field), "")
        if kind:
            return {field: self._page(kind, variables)}
        return {}

    def _create(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        time.sleep(self.create_delay)
        if kind == "client":
            fields = {
                "firstName": data.get("firstName", ""),
                "lastName": data.get("lastName", ""),
                "emails": [{"address": e["address"]} for e in data.get("emails") or []],
                "phones": [{"number": p["number"]} for p in data.get("phones") or []],
            }
        else:
            if data.get("clientId") not in self.records["client"]:
                return {"request": None, "userErrors": [{"message": "Client not found", "path": ["clientId"]}]}
            fields = {"title": data.get("title", ""), "client": {"id": data["clientId"]}}
        record_id = self.add(kind, **fields)
        with self.lock:
            self.made[kind] += 1
            record = self.records[kind][record_id]
        return {kind: {"id": record_id, "updatedAt": record["updatedAt"]}, "userErrors": []}

    def _expand(self, kind: str, node: dict[str, Any]) -> dict[str, Any]:
        node = dict(node)
        if kind == "client":
            requests = [r for r in self.records["request"].values() if r["client"]["id"] == node["id"]]
            node["requests"] = {
                "nodes": [{"id": r["id"], "title": r["title"], "updatedAt": r["updatedAt"]} for r in requests]
            }
        if kind == "paymentRecord" and node.get("client"):
            client = self.records["client"].get(node["client"]["id"]) or {}
            node["client"] = {
                "id": node["client"]["id"],
                "emails": client.get("emails", []),
                "phones": client.get("phones", []),
            }
        return node

    def _search(self, term: str) -> dict[str, Any]:
        with self.lock:
            found = [
                c
                for c in self.records["client"].values()
                if term.lower() in {e["address"].lower() for e in c.get("emails", [])}
                or (_digits(term) and _digits(term) in {_digits(p["number"]) for p in c.get("phones", [])})
            ]
        return {"nodes": found, "pageInfo": {"hasNextPage": False, "endCursor": None}}

    def _page(self, kind: str, variables: dict[str, Any]) -> dict[str, Any]:
        since = variables.get("since") or ""
        first = int(variables.get("first") or 100)
        start = int(base64.b64decode(variables["after"]).decode()) if variables.get("after") else 0
        with self.lock:
            rows = sorted(
                (r for r in self.records[kind].values() if not since or r["updatedAt"] > since),
                key=lambda r: (r["updatedAt"], r["id"]),
            )
            nodes = [self._expand(kind, r) for r in rows[start : start + first]]
        end = start + len(nodes)
        more = end < len(rows)
        cursor = base64.b64encode(str(end).encode()).decode() if nodes else None
        return {"nodes": nodes, "pageInfo": {"hasNextPage": more, "endCursor": cursor}}

    def fields_asked(self, field: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s["variables"] for s in self.seen if s["field"] == field]
