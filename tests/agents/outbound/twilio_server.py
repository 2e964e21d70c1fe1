"""Twilio's REST API as far as we use it, as a real local HTTP server: the
real twilio SDK and its real transport talk to it (TWILIO_API_BASE_URL).

Per-account Messages and Calls under /2010-04-01/Accounts/{AccountSid}/, HTTP
Basic auth that must be that account's SID and auth token (401 otherwise, as
Twilio answers). Like Twilio it keeps what it was sent as it stores it: with
Smart Encoding (on by default for Messaging Services) look-alike characters
become GSM-7 ones and the body is trimmed; a message it still queues has no
DateSent, so a `DateSent>` filter leaves it out. It can be told to take a
text and answer 503 (`ambiguous`), to answer 503 to everything (`down`), or
to take a text and hold the answer until released (`hold`).
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any
from urllib.parse import parse_qs, urlsplit

SMART_ENCODING = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u2014": "-"})
# The number a Messaging Service picks from its pool for a text.
POOL_NUMBER = "+13125550999"


@dataclass
class Seen:
    method: str
    path: str
    username: str
    password: str
    form: dict[str, str]


@dataclass
class FakeTwilio:
    accounts: dict[str, str]
    seen: list[Seen] = field(default_factory=list)
    sent: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    calls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Accounts whose next text is taken but answered 503: an ambiguous outcome.
    ambiguous: set[str] = field(default_factory=set)
    down: bool = False
    # While `hold` is set, a text is taken, `taken` is set, and the answer waits for `release`.
    hold: bool = False
    taken: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def __post_init__(self) -> None:
        fake, sids = self, count(1)

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode() if length else url.query
                form = {k: v[-1] for k, v in parse_qs(raw, keep_blank_values=True).items()}
                scheme, _, encoded = (self.headers.get("Authorization") or "").partition(" ")
                user, _, password = (
                    base64.b64decode(encoded).decode().partition(":") if scheme == "Basic" else ("", "", "")
                )
                fake.seen.append(Seen(method, url.path, user, password, form))
                parts = url.path.split("/")  # "", "2010-04-01", "Accounts", sid, "Messages.json" [or sid.json]
                if len(parts) not in (5, 6) or parts[2] != "Accounts":
                    return self._answer(404, {"code": 20404, "message": "not found", "status": 404})
                sid, resource = parts[3], parts[4]
                if user != sid or fake.accounts.get(sid) != password:
                    return self._answer(401, {"code": 20003, "message": "Authenticate", "status": 401})
                if fake.down:
                    return self._answer(503, {"code": 20503, "message": "unavailable", "status": 503})
                kept = fake.sent if resource == "Messages" or resource == "Messages.json" else fake.calls
                if len(parts) == 6 and method == "GET":  # a fetch by id
                    wanted = parts[5].removesuffix(".json")
                    for record in kept.get(sid, []):
                        if record["sid"] == wanted:
                            return self._answer(200, record)
                    return self._answer(404, {"code": 20404, "message": "not found", "status": 404})
                if method == "GET":
                    listed = [
                        m
                        for m in kept.get(sid, [])
                        if m["to"] == form.get("To")
                        and (not form.get("From") or m["from"] == form["From"])
                        and ("DateSent>" not in form or m["date_sent"] is not None)
                    ]
                    key = "messages" if resource == "Messages.json" else "calls"
                    return self._answer(200, {key: list(reversed(listed)), "next_page_uri": None})
                prefix = {"Messages.json": "SM", "Calls.json": "CA"}[resource]
                service = form.get("MessagingServiceSid")
                body = form.get("Body", "")
                created = {
                    "sid": f"{prefix}{next(sids):032x}",
                    "account_sid": sid,
                    "status": "queued",
                    "direction": "outbound-api",
                    "to": form.get("To", ""),
                    "from": form.get("From") or POOL_NUMBER,
                    "messaging_service_sid": service,
                    "body": body.translate(SMART_ENCODING).strip() if service else body,
                    "date_created": format_datetime(datetime.now(UTC), usegmt=True),
                    "date_sent": None,  # still queued at the provider
                    "error_code": None,
                }
                kept.setdefault(sid, []).append(created)
                if resource == "Messages.json" and fake.hold:
                    fake.taken.set()
                    fake.release.wait(30)
                if resource == "Messages.json" and sid in fake.ambiguous:
                    fake.ambiguous.discard(sid)
                    return self._answer(503, {"code": 20503, "message": "unavailable", "status": 503})
                return self._answer(201, created)

            def do_POST(self) -> None:
                self._handle("POST")

            def do_GET(self) -> None:
                self._handle("GET")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
