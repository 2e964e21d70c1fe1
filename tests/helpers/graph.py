"""A real HTTP server standing in for graph.facebook.com: Lead Ads lead reads
(`GET …/<leadgen id>`) and the Send API (`POST …/me/messages`), in Meta's
shapes, for the capture and the outbound tests. Our Graph clients talk to it
through `META_GRAPH_URL`; nothing of ours is replaced.

Each request is answered per `plan` (one entry per request, in order), then
per `default`:

- 200: a lead read answers the lead (404 for an unknown id); a send is taken
  and answered `{"recipient_id", "message_id"}`;
- an HTTP status (400, 500, 503…): Meta's error shape, code 2;
- "stall": never answers in time (a send is taken first: Meta sent it, the
  answer is lost);
- "hold": a send is taken, `held` is set, and the answer waits for `release`;
- "window": Meta's refusal outside the 24-hour window (400, code 10,
  subcode 2534022, as Instagram answers it);
- "throttle": Meta's rate limit (400, code 613);
- "invalid": Meta's refusal of a bad parameter (400, code 100), final.

The Conversions API for CRM (`POST …/<dataset id>/events`) takes a body
`{"data": [events]}` and answers `{"events_received", "messages",
"fbtrace_id"}`; each event taken is kept in `events` (with its dataset).

The Marketing API's insights of an ad account (`GET
…/act_<id>/insights?level=campaign&time_increment=1&time_range=…&fields=…`)
answer the campaign days planted in `insights` (per ad account id, digits;
`insight_row`) whose `date_start` falls in the `time_range`, `limit` rows a
page (at most `insights_page_size`), each page with Meta's `paging`: its
cursors and, while more follow, a `next` link carrying the whole query and
the `after` cursor.

"token" answers Meta's refusal of an expired token (400, OAuthException
code 190, subcode 463).

Every request is kept in `seen`; every DM the server took in `sent`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

Behaviour = int | str

ERRORS: dict[str, tuple[int, dict[str, Any]]] = {
    "window": (
        400,
        {"message": "This message is sent outside of allowed window.", "type": "IGApiException", "code": 10},
    ),
    "throttle": (400, {"message": "Calls to this api have exceeded the rate limit.", "code": 613}),
    "invalid": (400, {"message": "Invalid parameter", "type": "OAuthException", "code": 100}),
    "token": (
        400,
        {
            "message": "Error validating access token: Session has expired on Friday, 04-Dec-26 10:00:00 PST.",
            "type": "OAuthException",
            "code": 190,
        },
    ),
}
SUBCODES = {"window": 2534022, "token": 463}
INSIGHTS_PAGE_SIZE = 500


def insight_row(
    campaign_id: str,
    *,
    day: str,
    name: str,
    spend: str,
    clicks: int = 0,
    impressions: int = 0,
    currency: str = "USD",
) -> dict[str, Any]:
    """One campaign's day as Meta's insights serve it (numbers as strings)."""
    return {
        "campaign_id": campaign_id,
        "campaign_name": name,
        "spend": spend,
        "clicks": str(clicks),
        "impressions": str(impressions),
        "account_currency": currency,
        "date_start": day,
        "date_stop": day,
    }


class GraphServer:
    def __init__(self, leads: dict[str, dict[str, Any]] | None = None) -> None:
        self.leads: dict[str, dict[str, Any]] = dict(leads or {})
        self.plan: list[Behaviour] = []
        self.default: Behaviour = 200
        self.seen: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.insights: dict[str, list[dict[str, Any]]] = {}
        self.insights_page_size = INSIGHTS_PAGE_SIZE
        self.held = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self._ids = count(1)
        graph = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                behaviour = graph._next({"method": "GET", "path": url.path, "query": query, **self._auth()})
                if "access_token" in query:  # a token in a URL leaks to logs: we never send one
                    behaviour = 400
                if behaviour == "stall":
                    graph.release.wait(10)  # the client gave up long before
                    return
                if url.path.endswith("/insights"):
                    self._insights(url.path, query, behaviour)
                    return
                lead = graph.leads.get(url.path.rsplit("/", 1)[-1])
                if behaviour == 200 and lead is None:
                    behaviour = 404
                self._answer(200, lead) if behaviour == 200 else self._error(behaviour)

            def do_POST(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"null")
                except ValueError:
                    body = None
                request = {"method": "POST", "path": url.path, "query": parse_qs(url.query), "json": body}
                behaviour = graph._next({**request, **self._auth()})
                if url.path.endswith("/events") and isinstance(body, dict):
                    self._conversions(url.path, body, behaviour)
                    return
                if not url.path.endswith("/messages") or not isinstance(body, dict):
                    self._error(400)
                    return
                if behaviour in (200, "stall", "hold"):
                    taken = graph._take(body)
                    if behaviour == "stall":
                        graph.release.wait(10)
                        return
                    if behaviour == "hold":
                        graph.held.set()
                        graph.release.wait(30)
                    self._answer(200, {"recipient_id": taken["recipient"], "message_id": taken["message_id"]})
                    return
                self._error(behaviour)

            def _conversions(self, path: str, body: dict[str, Any], behaviour: Behaviour) -> None:
                data = body.get("data")
                if behaviour != 200 or not isinstance(data, list) or not data:
                    self._error(behaviour if behaviour != 200 else 400)
                    return
                dataset = path.rstrip("/").split("/")[-2]
                with graph.lock:
                    graph.events.extend({"dataset": dataset, **event} for event in data)
                self._answer(200, {"events_received": len(data), "messages": [], "fbtrace_id": "AbCdEfGh"})

            def _insights(self, path: str, query: dict[str, list[str]], behaviour: Behaviour) -> None:
                if behaviour != 200:
                    self._error(behaviour)
                    return
                account = path.rstrip("/").split("/")[-2]
                try:
                    period = json.loads(query.get("time_range", ["{}"])[0])
                    since, until = str(period["since"]), str(period["until"])
                    # Meta serves at most its own page size, whatever `limit` asks.
                    limit = min(int(query.get("limit", ["25"])[0]), graph.insights_page_size)
                    offset = int(query.get("after", ["0"])[0] or 0)
                except (ValueError, KeyError, TypeError):
                    self._error("invalid")
                    return
                if not account.startswith("act_") or query.get("level") != ["campaign"]:
                    self._error("invalid")
                    return
                with graph.lock:
                    rows = [
                        row
                        for row in graph.insights.get(account.removeprefix("act_"), [])
                        if since <= row["date_start"] <= until
                    ]
                rows.sort(key=lambda row: (row["date_start"], row["campaign_id"]))
                wanted = set(",".join(query.get("fields", [""])).split(",")) | {"date_start", "date_stop"}
                page = [{k: v for k, v in row.items() if k in wanted} for row in rows[offset : offset + limit]]
                paging: dict[str, Any] = {"cursors": {"before": str(offset), "after": str(offset + len(page))}}
                if offset + limit < len(rows):
                    following = {k: v[0] for k, v in query.items()}
                    following["after"] = str(offset + limit)
                    host = f"http://{self.headers.get('Host')}"
                    paging["next"] = f"{host}{path}?{urlencode(following)}"
                self._answer(200, {"data": page, "paging": paging})

            def _auth(self) -> dict[str, str]:
                return {"authorization": self.headers.get("Authorization", "")}

            def _answer(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, behaviour: Behaviour) -> None:
                if isinstance(behaviour, str):
                    status, error = ERRORS[behaviour]
                    error = {**error, **({"error_subcode": SUBCODES[behaviour]} if behaviour in SUBCODES else {})}
                else:
                    status, error = behaviour, {"message": f"Synthetic error {behaviour}", "code": 2}
                self._answer(status, {"error": {**error, "fbtrace_id": "AbCdEfGh"}})

            def log_message(self, format: str, *args: Any) -> None:
                return  # keep test output quiet

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v21.0"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def _next(self, request: dict[str, Any]) -> Behaviour:
        with self.lock:
            self.seen.append(request)
            return self.plan.pop(0) if self.plan else self.default

    def _take(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            recipient = body.get("recipient") or {}
            message = body.get("message") or {}
            taken = {
                # Long, like Instagram's own ids.
                "message_id": f"aWdfZAG1faXRlbToxOklHTWVzc2FnZAUlEOjE3ODQxNDAwMDAwMDAwMDAxOj{next(self._ids):040d}",
                "recipient": str(recipient.get("id", "")),
                "text": message.get("text", ""),
                "messaging_type": body.get("messaging_type"),
            }
            self.sent.append(taken)
            return taken

    def posts(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.seen if r["method"] == "POST"]

    def recover(self) -> None:
        with self.lock:
            self.plan, self.default = [], 200
        self.release.set()


@contextmanager
def graph_running(settings: Any, leads: dict[str, dict[str, Any]] | None = None) -> Iterator[GraphServer]:
    """A started server, with META_GRAPH_URL pointing at it and the Graph
    timeouts shrunk (a stalled read gives up after 0.3 s)."""
    server = GraphServer(leads)
    server.thread.start()
    settings.META_GRAPH_URL = server.url
    settings.META_GRAPH_TIMEOUT = (2.0, 0.3)
    settings.META_GRAPH_RETRY_DELAY = 0.0
    try:
        yield server
    finally:
        server.release.set()
        server.httpd.shutdown()
        server.httpd.server_close()
        server.thread.join(5)
