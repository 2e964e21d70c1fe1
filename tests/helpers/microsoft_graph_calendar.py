"""A real HTTP server standing in for the Microsoft identity platform and
Microsoft Graph's calendar API, in their shapes, for the calendar sync
tests. Our adapter reaches it through MS_LOGIN_URL and MS_GRAPH_URL.

- `GET /common/oauth2/v2.0/authorize`, `POST /common/oauth2/v2.0/token`:
  the OAuth flow (devtools/simulator/oauth_stand_in.py); refresh tokens rotate
  (the old one dies); `revoke()` makes every token refused (`invalid_grant`,
  401 on Graph).
- `/v1.0`: `me`, `me/calendar/getSchedule`, `me/events` (create — one per
  `transactionId` —, get, patch, delete, list by `lastModifiedDateTime`),
  `subscriptions` (create, after the validation handshake `validate(url)`
  answers the token back; patch to renew).

Times are as Graph writes them: `{"dateTime": "…T15:00:00.0000000",
"timeZone": "UTC"}`. `busy_extra` adds busy schedule items.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from django.utils import timezone

from devtools.simulator.oauth_stand_in import OAuthStandIn, serving

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


class GraphServer(OAuthStandIn):
    client_id = CLIENT_ID
    client_secret = CLIENT_SECRET
    authorize_path = f"{LOGIN}/authorize"
    token_path = f"{LOGIN}/token"
    api_prefix = GRAPH
    unauthorized: ClassVar[dict[str, Any]] = {"error": {"code": "InvalidAuthenticationToken", "message": "expired"}}
    rotates_refresh = True
    revoked_description = "AADSTS70000: the grant is revoked"

    def __init__(self) -> None:
        super().__init__()
        self.events: dict[str, dict[str, Any]] = {}
        self.transactions: dict[str, str] = {}
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self.busy_extra: list[tuple[datetime, datetime]] = []
        self.creates = 0
        self.clock = timezone.now()
        # The validation handshake: called with the notification URL and the token; returns what came back.
        self.validate: Callable[[str, str], tuple[int, str, str]] | None = None

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

    def _api(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
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
    settings.MS_GRAPH_URL = f"{server.url}{GRAPH}"
    settings.MS_LOGIN_URL = f"{server.url}{LOGIN}"
    settings.MS_CLIENT_ID = CLIENT_ID
    settings.MS_CLIENT_SECRET = CLIENT_SECRET
    with serving(server):
        yield server
