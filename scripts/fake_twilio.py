"""Twilio's REST API as far as LeadOps uses it, as a real local HTTP server
that can be told to misbehave: the real twilio SDK and its real transport
talk to it (TWILIO_API_BASE_URL). For the fault drill and the tests.

Per-account Messages and Calls under /2010-04-01/Accounts/{AccountSid}/:
create, fetch by id, list by To (and From); HTTP Basic auth that must be that
account's SID and auth token (401 otherwise, as Twilio answers); every
request is kept in `seen`. Like Twilio it keeps a text as it stores it (Smart Encoding turns
look-alike characters into GSM-7 ones for a Messaging Service) and it keeps
every text it *took*, whatever it then answered: a send that timed out or
whose connection dropped after the provider took it is still a send, which is
what the drill counts duplicates against. A text it took stays queued there
(no DateSent, so a `DateSent>` filter leaves it out), as one waiting in a
Messaging Service's queue does.

How it answers a create is set by `behave` (every create from then on) or
`storm` (a run of outcomes, one per create, then back to the steady one):

- `ok`: take it, answer 201 (after `delay` seconds: a slow provider);
- `5xx`: answer 503 without taking it; `5xx-taken`: take it, answer 503;
- `429`: answer 429 with Retry-After, without taking it;
- `timeout`: take it and answer only after `timeout_s` (longer than the
  client waits), so the client gives up on a send that was made;
- `drop`: close the connection before taking it; `drop-taken`: take it and
  close without answering;
- `hold`: take it, set `held`, and answer only once `release` is set (a
  worker killed while the provider has its text);
- `down`: answer 503 to every request, reads included.

Calls are always taken (unless `down`): the outcomes are for texts.

Lookup v2 (`GET /v2/PhoneNumbers/{number}?Fields=line_type_intelligence`,
any account's credentials) answers each number's line from `lines` (a
mobile when it is not there); `lookups` counts the lookups made.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

OUTCOMES = ("ok", "5xx", "5xx-taken", "429", "timeout", "drop", "drop-taken", "hold", "down")
SMART_ENCODING = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u2014": "-"})
# The number a Messaging Service picks from its pool for a text.
POOL_NUMBER = "+13125550999"
# The path part after the account: a list or create (Messages.json), or a
# fetch by id (Messages/{sid}.json).
RESOURCES = {
    "Messages.json": "messages",
    "Messages": "messages",
    "Calls.json": "calls",
    "Calls": "calls",
    "Recordings": "recordings",
}


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
    # Every text taken, per account, in order (what a real provider would send).
    sent: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    calls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)  # every request, in order
    # Recordings Twilio holds (sid → call sid); a DELETE removes one.
    recordings: dict[str, str] = field(default_factory=dict)
    answered: Counter[str] = field(default_factory=Counter)  # outcome → creates answered so
    in_flight: int = 0  # creates being answered right now
    steady: str = "ok"
    delay: float = 0.0
    timeout_s: float = 15.0  # above the twilio client's 10 s
    retry_after: int = 1
    held: threading.Event = field(default_factory=threading.Event)  # a `hold` text was taken
    release: threading.Event = field(default_factory=threading.Event)  # ...and may now be answered
    # Line types Lookup answers per number (mobile otherwise), and its count.
    lines: dict[str, str] = field(default_factory=dict)
    lookups: Counter[str] = field(default_factory=Counter)
    _storm: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def __post_init__(self) -> None:
        fake, sids = self, count(1)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's session expects

            def _answer(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _drop(self) -> None:
                # A reset, not a polite close: what a provider's load balancer does.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                self.close_connection = True
                self.connection.close()

            def _handle(self, method: str) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode() if length else url.query
                form = {k: v[-1] for k, v in parse_qs(raw, keep_blank_values=True).items()}
                scheme, _, encoded = (self.headers.get("Authorization") or "").partition(" ")
                user, _, password = (
                    base64.b64decode(encoded).decode().partition(":") if scheme == "Basic" else ("", "", "")
                )
                with fake._lock:
                    fake.seen.append(Seen(method, url.path, user, password, form))
                if url.path.startswith("/v2/PhoneNumbers/"):
                    return self._lookup(url.path.removeprefix("/v2/PhoneNumbers/"), user, password)
                parts = url.path.split("/")  # "", "2010-04-01", "Accounts", sid, "Messages.json" [or sid.json]
                if len(parts) not in (5, 6) or parts[2] != "Accounts" or parts[4] not in RESOURCES:
                    return self._answer(404, {"code": 20404, "message": "not found", "status": 404})
                sid, resource = parts[3], RESOURCES[parts[4]]
                if user != sid or fake.accounts.get(sid) != password:
                    return self._answer(401, {"code": 20003, "message": "Authenticate", "status": 401})
                if fake.steady == "down":
                    return self._answer(503, {"code": 20503, "message": "unavailable", "status": 503})
                if method == "GET":
                    return self._read(sid, resource, parts, form)
                if method == "DELETE" or (method == "POST" and len(parts) == 6):
                    return self._change(sid, resource, parts[5].removesuffix(".json"), method, form)
                if resource == "calls":
                    return self._answer(201, self._record(sid, "calls", form, next(sids)))
                outcome = fake._next_outcome()
                with fake._lock:
                    fake.in_flight += 1
                try:
                    self._create(sid, form, outcome, next(sids))
                finally:
                    with fake._lock:
                        fake.in_flight -= 1
                        fake.answered[outcome] += 1

            def _lookup(self, number: str, user: str, password: str) -> None:
                if fake.accounts.get(user) != password:
                    return self._answer(401, {"code": 20003, "message": "Authenticate", "status": 401})
                if fake.steady == "down":
                    return self._answer(503, {"code": 20503, "message": "unavailable", "status": 503})
                number = unquote(number)
                with fake._lock:
                    fake.lookups[number] += 1
                line = fake.lines.get(number, "mobile")
                intelligence = {
                    "error_code": None,
                    "mobile_country_code": "310" if line == "mobile" else None,
                    "mobile_network_code": "260" if line == "mobile" else None,
                    "carrier_name": "T-Mobile USA, Inc." if line == "mobile" else "AT&T Local",
                    "type": line,
                }
                body = {
                    "calling_country_code": "1",
                    "country_code": "US",
                    "phone_number": number,
                    "national_format": number,
                    "valid": True,
                    "validation_errors": [],
                    "caller_name": None,
                    "sim_swap": None,
                    "call_forwarding": None,
                    "line_status": None,
                    "line_type_intelligence": intelligence,
                    "identity_match": None,
                    "reassigned_number": None,
                    "sms_pumping_risk": None,
                    "phone_number_quality_score": None,
                    "pre_fill": None,
                    "url": f"https://lookups.twilio.com/v2/PhoneNumbers/{number}",
                }
                return self._answer(200, body)

            def _read(self, sid: str, resource: str, parts: list[str], form: dict[str, str]) -> None:
                with fake._lock:
                    kept = list((fake.sent if resource == "messages" else fake.calls).get(sid, []))
                if len(parts) == 6:  # a fetch by id
                    wanted = parts[5].removesuffix(".json")
                    for record in kept:
                        if record["sid"] == wanted:
                            return self._answer(200, record)
                    return self._answer(404, {"code": 20404, "message": "not found", "status": 404})
                listed = [
                    m
                    for m in kept
                    if m["to"] == form.get("To")
                    and (not form.get("From") or m["from"] == form["From"])
                    # A text the provider still queues has no DateSent yet: a DateSent filter leaves it out.
                    and ("DateSent>" not in form or m["date_sent"] is not None)
                ]
                return self._answer(200, {resource: list(reversed(listed)), "next_page_uri": None})

            def _change(self, sid: str, resource: str, wanted: str, method: str, form: dict[str, str]) -> None:
                """A message's update (its body redacted: Body="") or a recording's delete."""
                with fake._lock:
                    if resource == "recordings" and method == "DELETE" and wanted in fake.recordings:
                        del fake.recordings[wanted]
                        self.send_response(204)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return None
                    for record in fake.sent.get(sid, []) if resource == "messages" else []:
                        if record["sid"] == wanted and method == "POST":
                            if "Body" in form:
                                record["body"] = form["Body"]
                            return self._answer(200, record)
                return self._answer(404, {"code": 20404, "message": "not found", "status": 404})

            def _record(self, sid: str, resource: str, form: dict[str, str], number: int) -> dict[str, Any]:
                """Keep a created text or call as Twilio stores it, and return it."""
                service = form.get("MessagingServiceSid")
                body = form.get("Body", "")
                created = {
                    "sid": f"{'SM' if resource == 'messages' else 'CA'}{number:032x}",
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
                with fake._lock:
                    (fake.sent if resource == "messages" else fake.calls).setdefault(sid, []).append(created)
                return created

            def _create(self, sid: str, form: dict[str, str], outcome: str, number: int) -> None:
                if outcome == "drop":
                    return self._drop()
                if outcome == "429":
                    throttled = {"code": 20429, "message": "Too Many Requests", "status": 429}
                    return self._answer(429, throttled, {"Retry-After": str(fake.retry_after)})
                if outcome in ("5xx", "down"):
                    return self._answer(503, {"code": 20503, "message": "unavailable", "status": 503})
                created = self._record(sid, "messages", form, number)
                if fake.delay:
                    time.sleep(fake.delay)  # a slow provider: the send is in flight
                if outcome == "timeout":
                    time.sleep(fake.timeout_s)
                elif outcome == "hold":
                    fake.held.set()
                    fake.release.wait(30)
                elif outcome == "drop-taken":
                    return self._drop()
                elif outcome == "5xx-taken":
                    return self._answer(503, {"code": 20503, "message": "unavailable", "status": 503})
                with suppress(OSError):  # the client is gone (killed, gave up): the text was sent all the same
                    self._answer(201, created)

            def do_POST(self) -> None:
                self._handle("POST")

            def do_GET(self) -> None:
                self._handle("GET")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

            def log_message(self, format: str, *args: Any) -> None:
                return

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                return  # a client that vanished mid-answer is part of the drill

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def _next_outcome(self) -> str:
        with self._lock:
            return self._storm.pop(0) if self._storm else self.steady

    def behave(self, outcome: str = "ok", *, delay: float = 0.0) -> None:
        """How every create is answered from now on (after any storm left)."""
        assert outcome in OUTCOMES, outcome
        with self._lock:
            self.steady, self.delay = outcome, delay

    def storm(self, outcomes: list[str]) -> None:
        """The next creates are answered so, one each, in order."""
        assert set(outcomes) <= set(OUTCOMES), outcomes
        with self._lock:
            self._storm = list(outcomes)

    def storm_left(self) -> int:
        with self._lock:
            return len(self._storm)

    def taken(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(m) for texts in self.sent.values() for m in texts]

    def start(self) -> FakeTwilio:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
