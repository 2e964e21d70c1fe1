"""A real HTTP server standing in for Housecall Pro's public API (v1), in its
shapes, for the sync tests. Our adapter reaches it through
HOUSECALLPRO_API_URL; nothing of ours is replaced.

- Every request needs `Authorization: Token <api key>` naming a live key
  (401 otherwise); `revoke()` kills the key (an owner who deleted it).
- `GET /company`; `GET /customers?q=&page=&page_size=` and `POST /customers`;
  `GET /jobs?customer_id=&page=&page_size=&sort_by=&sort_direction=` and
  `POST /jobs`; `GET /estimates`, `GET /invoices` the same way; one record at
  `GET /<list>/<id>` (404 when deleted). Lists answer
  `{<list>: [...], page, page_size, total_pages, total_items}`.
- Money in cents. `add` and `change` keep `updated_at` moving forward.
- `throttle(n, retry_after=s)`: the next n requests answer 429 with Retry-After.

Every request is kept in `seen` (method, path, query); `made` counts creates
by list; `create_delay` holds every create that long (races).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.db import transaction
from django.utils import timezone

from agents.sync.housecall_pro import housecall_pro_signature
from crm.models import Business, SyncConnection
from crm.services.sync import connection_connect
from devtools.simulator.local_server import LocalServer

API_KEY = "hcp-company-api-key-0123456789"
WEBHOOK_SECRET = "hcp-webhook-signing-secret-abcdef"  # the stand-in company's own, public
COMPANY_ID = "e3b0c442-company-acme"
LISTS = ("customers", "jobs", "estimates", "invoices")


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _digits(value: str) -> str:
    digits = "".join(c for c in value if c.isdigit())
    return digits[1:] if len(digits) == 11 and digits.startswith("1") else digits


def webhook_body(event: str, record: dict[str, Any], *, company_id: str = COMPANY_ID) -> bytes:
    """A webhook as Housecall Pro sends it: the event, the company and the record."""
    what = event.split(".")[0]
    return json.dumps({"event": event, "company_id": company_id, what: record}).encode()


def webhook_headers(body: bytes, *, secret: str = WEBHOOK_SECRET, timestamp: str = "") -> dict[str, str]:
    stamp = timestamp or str(int(time.time()))
    return {"Api-Timestamp": stamp, "Api-Signature": housecall_pro_signature(secret, stamp, body)}


class HousecallProServer(LocalServer):
    def __init__(self, port: int = 0) -> None:
        self.lock = threading.Lock()
        self.keys = {API_KEY}
        self.records: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in LISTS}
        self.numbers: Counter[str] = Counter()
        self.made: Counter[str] = Counter()
        self.seen: list[dict[str, Any]] = []
        self.throttles: list[int] = []  # Retry-After of the next 429s
        self.create_delay = 0.0
        self.clock = timezone.now() - timedelta(hours=1)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def _handle(self, method: str) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server.lock:
                    server.seen.append({"method": method, "path": url.path, "query": query})
                    throttled = server.throttles.pop(0) if server.throttles else None
                if self.headers.get("Authorization", "") not in {f"Token {k}" for k in server.keys}:
                    self._answer(401, {"error": "unauthorized"})
                    return
                if throttled is not None:
                    self._answer(429, {"error": "rate limit exceeded"}, {"Retry-After": str(throttled)})
                    return
                parts = [p for p in url.path.split("/") if p]
                if method == "GET" and parts == ["company"]:
                    self._answer(200, {"id": COMPANY_ID, "name": "Acme Heating (Housecall Pro)"})
                elif method == "GET" and len(parts) == 1 and parts[0] in LISTS:
                    self._answer(200, server._page(parts[0], query))
                elif method == "GET" and len(parts) == 2 and parts[0] in LISTS:
                    found = server.records[parts[0]].get(parts[1])
                    self._answer(200, found) if found else self._answer(404, {"error": "not found"})
                elif method == "POST" and len(parts) == 1 and parts[0] in ("customers", "jobs"):
                    try:
                        payload = json.loads(raw or b"{}")
                    except ValueError:
                        self._answer(400, {"error": "invalid JSON"})
                        return
                    self._answer(201, server._create(parts[0], payload))
                else:
                    self._answer(404, {"error": "not found"})

            def _answer(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.serve(port, Handler)

    # -- the company's side ----------------------------------------------------------------

    def revoke(self) -> None:
        with self.lock:
            self.keys.clear()

    def throttle(self, times: int = 1, *, retry_after: int = 30) -> None:
        with self.lock:
            self.throttles.extend([retry_after] * times)

    def _tick(self) -> str:
        self.clock += timedelta(seconds=1)
        return iso(self.clock)

    def add(self, name: str, **fields: Any) -> str:
        with self.lock:
            self.numbers[name] += 1
            record_id = f"{name[:3]}_{self.numbers[name]:04d}"
            stamp = self._tick()
            self.records[name][record_id] = {"id": record_id, "created_at": stamp, **fields, "updated_at": stamp}
        return record_id

    def change(self, name: str, record_id: str, **fields: Any) -> dict[str, Any]:
        with self.lock:
            record = self.records[name][record_id]
            record.update(fields, updated_at=self._tick())
            return dict(record)

    def delete(self, name: str, record_id: str) -> None:
        with self.lock:
            self.records[name].pop(record_id, None)

    def _create(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        time.sleep(self.create_delay)
        fields = dict(payload)
        if name == "jobs":
            customer = self.records["customers"].get(str(payload.get("customer_id")), {})
            fields = {
                "work_status": "unscheduled",
                "schedule": {"scheduled_start": None, "scheduled_end": None},
                "total_amount": 0,
                **fields,
                "customer": {"id": customer.get("id"), "first_name": customer.get("first_name")},
            }
        record_id = self.add(name, **fields)
        with self.lock:
            self.made[name] += 1
            return dict(self.records[name][record_id])

    def _page(self, name: str, query: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            items = list(self.records[name].values())
        term = query.get("q", "").lower()
        if term:
            digits = _digits(term)

            def hit(item: dict[str, Any]) -> bool:
                texts = [str(item.get(k) or "") for k in ("first_name", "last_name", "email")]
                phones = [str(item.get(k) or "") for k in ("mobile_number", "home_number", "work_number")]
                return any(term in t.lower() for t in texts) or bool(digits and digits in map(_digits, phones))

            items = [i for i in items if hit(i)]
        if query.get("customer_id"):
            items = [i for i in items if (i.get("customer") or {}).get("id") == query["customer_id"]]
        key = query.get("sort_by") or "created_at"
        items.sort(key=lambda i: (str(i.get(key) or ""), i["id"]), reverse=query.get("sort_direction") == "desc")
        page, size = max(int(query.get("page") or 1), 1), max(int(query.get("page_size") or 10), 1)
        total_pages = max((len(items) + size - 1) // size, 1)
        return {
            name: items[(page - 1) * size : page * size],
            "page": page,
            "page_size": size,
            "total_pages": total_pages,
            "total_items": len(items),
        }

    def asked(self, path: str) -> list[dict[str, str]]:
        """The queries of the GETs to `path`, in order."""
        return [s["query"] for s in self.seen if s["method"] == "GET" and s["path"] == path]


@contextmanager
def housecall_pro_running(settings: Any) -> Iterator[HousecallProServer]:
    """A started server, with HOUSECALLPRO_API_URL pointing at it."""
    server = HousecallProServer()
    server.start()
    settings.HOUSECALLPRO_API_URL = server.url
    try:
        yield server
    finally:
        server.stop()


def housecall_pro_connect(shop: Business) -> SyncConnection:
    """The shop connected to the stand-in's company, as the key form leaves it."""
    with transaction.atomic():
        conn = connection_connect(
            shop,
            provider="housecall_pro",
            account_id=COMPANY_ID,
            account_name="Acme Heating (Housecall Pro)",
            access_token=API_KEY,
            refresh_token="",
            expires_at=None,
            actor="olivia",
        )
        conn.webhook_secret = WEBHOOK_SECRET
        conn.save(update_fields=["webhook_secret", "updated_at"])
    return conn
