"""A real HTTP server standing in for Google's OAuth endpoints and the
Calendar API v3, in their shapes, for the calendar sync tests
(tests/helpers/google_calendar.py) and the demo (devtools/demo_sync.py). Our adapter
reaches it through GOOGLE_OAUTH_URL, GOOGLE_TOKEN_URL and
GOOGLE_CALENDAR_API_URL; nothing of ours is replaced.

- `GET /o/oauth2/v2/auth`, `POST /token`: the OAuth flow
  (devtools/simulator/oauth_stand_in.py); Google keeps the refresh token (none
  comes back on a refresh); `revoke()` makes every token refused
  (`invalid_grant`, 401 on the API).
- `/calendar/v3`: `calendars/primary`, `freeBusy`, `calendars/primary/events`
  (insert with a client id, 409 for a taken id; get, patch, delete: a deleted
  event stays as `status: cancelled` in the changes; list with `timeMin` or
  `syncToken`, `pageToken`), `events/watch`, `channels/stop`.

`busy_extra` adds busy blocks no event explains (another calendar's);
`fail_busy` makes freeBusy answer 500. Every API request is kept in `seen`.
"""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from django.utils import timezone

from devtools.simulator.oauth_stand_in import OAuthStandIn

CLIENT_ID = "gcal-client-id.apps.googleusercontent.com"
CLIENT_SECRET = "gcal-client-secret-0123456789"  # noqa: S105 - the stand-in app's own, public
EMAIL = "tom@example.com"
API = "/calendar/v3"


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class GoogleCalendarServer(OAuthStandIn):
    client_id = CLIENT_ID
    client_secret = CLIENT_SECRET
    authorize_path = "/o/oauth2/v2/auth"
    token_path = "/token"  # noqa: S105 - a path, not a secret
    api_prefix = API
    unauthorized: ClassVar[dict[str, Any]] = {"error": {"code": 401, "message": "Invalid Credentials"}}
    revoked_description = "Token has been expired or revoked."
    # rotates_refresh stays False: Google keeps the refresh token, none comes back on a refresh.
    code_answer_extra: ClassVar[dict[str, str]] = {"scope": "https://www.googleapis.com/auth/calendar.events"}

    def __init__(self, port: int = 0) -> None:
        super().__init__(port)
        self.events: dict[str, dict[str, Any]] = {}
        self.changed: list[tuple[int, str]] = []  # (sequence, event id), in order
        self.sequence = 0
        self.busy_extra: list[tuple[datetime, datetime]] = []
        self.fail_busy = False
        self.channels: dict[str, dict[str, Any]] = {}
        self.stopped: list[str] = []
        self.inserts = 0
        self.clock = timezone.now()

    # -- the calendar
    def _touch(self, event: dict[str, Any]) -> None:
        # Called under the lock: `updated` moves forward, and the change is listed.
        self.clock += timedelta(seconds=1)
        self.sequence += 1
        event["updated"] = rfc3339(self.clock)
        self.changed.append((self.sequence, event["id"]))

    def add(self, starts: datetime, ends: datetime, summary: str = "Dentist") -> str:
        with self.lock:
            event: dict[str, Any] = {
                "kind": "calendar#event",
                "id": secrets.token_hex(8),
                "status": "confirmed",
                "summary": summary,
                "start": {"dateTime": rfc3339(starts)},
                "end": {"dateTime": rfc3339(ends)},
            }
            self.events[event["id"]] = event
            self._touch(event)
            return str(event["id"])

    def move(self, event_id: str, starts: datetime, ends: datetime) -> None:
        with self.lock:
            event = self.events[event_id]
            event["start"], event["end"] = {"dateTime": rfc3339(starts)}, {"dateTime": rfc3339(ends)}
            self._touch(event)

    def delete(self, event_id: str) -> None:
        with self.lock:
            event = self.events[event_id]
            event["status"] = "cancelled"
            self._touch(event)

    def live_events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(e) for e in self.events.values() if e["status"] != "cancelled"]

    def _api(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        with self.lock:
            if (method, path) == ("GET", "/calendars/primary"):
                return 200, {"kind": "calendar#calendar", "id": EMAIL, "summary": EMAIL, "timeZone": "America/Chicago"}
            if (method, path) == ("POST", "/freeBusy"):
                return self._free_busy(body)
            if (method, path) == ("POST", "/calendars/primary/events/watch"):
                expiration = int((time.time() + int(body.get("params", {}).get("ttl", 604800))) * 1000)
                channel = {
                    "kind": "api#channel",
                    "id": body["id"],
                    "resourceId": "res-" + secrets.token_hex(6),
                    "resourceUri": f"{API}/calendars/primary/events",
                    "token": body.get("token", ""),
                    "expiration": str(expiration),
                    "address": body["address"],
                }
                self.channels[body["id"]] = channel
                return 200, channel
            if (method, path) == ("POST", "/channels/stop"):
                if body.get("id") not in self.channels:
                    return 404, {"error": {"code": 404, "message": "Channel not found"}}
                self.stopped.append(self.channels.pop(body["id"])["id"])
                return 204, None
            if (method, path) == ("POST", "/calendars/primary/events"):
                if body.get("id") in self.events:
                    return 409, {"error": {"code": 409, "message": "The requested identifier already exists."}}
                event = {"kind": "calendar#event", "status": "confirmed", **body}
                event.setdefault("id", secrets.token_hex(8))
                self.events[event["id"]] = event
                self.inserts += 1
                self._touch(event)
                return 200, event
            if (method, path) == ("GET", "/calendars/primary/events"):
                return self._list(query)
            if path.startswith("/calendars/primary/events/"):
                found = self.events.get(path.rsplit("/", 1)[1])
                if found is None:
                    return 404, {"error": {"code": 404, "message": "Not Found"}}
                event = found
                if method == "GET":
                    return 200, event
                if event["status"] == "cancelled":
                    return 410, {"error": {"code": 410, "message": "Resource has been deleted"}}
                if method == "PATCH":
                    event.update(body)
                    self._touch(event)
                    return 200, event
                if method == "DELETE":
                    event["status"] = "cancelled"
                    self._touch(event)
                    return 204, None
        return 404, {"error": {"code": 404, "message": "Not Found"}}

    def _free_busy(self, body: dict[str, Any]) -> tuple[int, Any]:
        if self.fail_busy:
            return 500, {"error": {"code": 500, "message": "Backend Error"}}
        start = datetime.fromisoformat(body["timeMin"])
        end = datetime.fromisoformat(body["timeMax"])
        blocks = [
            (datetime.fromisoformat(e["start"]["dateTime"]), datetime.fromisoformat(e["end"]["dateTime"]))
            for e in self.events.values()
            if e["status"] != "cancelled"
        ]
        busy = [
            {"start": rfc3339(s), "end": rfc3339(e)}
            for s, e in sorted(blocks + self.busy_extra)
            if s < end and e > start
        ]
        return 200, {
            "kind": "calendar#freeBusy",
            "timeMin": body["timeMin"],
            "timeMax": body["timeMax"],
            "calendars": {"primary": {"busy": busy}},
        }

    def _list(self, query: dict[str, str]) -> tuple[int, Any]:
        if "syncToken" in query:
            after = int(query["syncToken"].removeprefix("sync-"))
            if after < 0:
                return 410, {"error": {"code": 410, "message": "Sync token is no longer valid"}}
            ids = list(dict.fromkeys(i for seq, i in self.changed if seq > after))
            rows = [self.events[i] for i in ids]
        else:
            since = datetime.fromisoformat(query["timeMin"])
            rows = [
                e
                for e in self.events.values()
                if e["status"] != "cancelled" and datetime.fromisoformat(e["end"]["dateTime"]) > since
            ]
        start = int(query.get("pageToken") or 0)
        size = int(query.get("maxResults") or 250)
        page = rows[start : start + size]
        answer: dict[str, Any] = {"kind": "calendar#events", "items": page}
        if start + size < len(rows):
            answer["nextPageToken"] = str(start + size)
        else:
            answer["nextSyncToken"] = f"sync-{self.sequence}"
        return 200, answer
