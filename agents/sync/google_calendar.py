"""Google Calendar: the adapter (agents/sync/base.py) for one team member's
primary calendar, over the Calendar API v3 at `GOOGLE_CALENDAR_API_URL`
(plain JSON over `requests`; tokens refreshed with google-auth).

- OAuth, the authorization-code flow with offline access: the person is
  sent to `GOOGLE_OAUTH_URL` with the scopes `calendar.events` (our visits'
  events, the changes list) and `calendar.freebusy` (busy blocks only, not
  what the other events say). The code is exchanged at `GOOGLE_TOKEN_URL`;
  refreshes go through google-auth's `Credentials.refresh`. Google keeps
  the refresh token (a refresh returns none); `invalid_grant` is a revoked
  grant: the connection waits for the person.
- Busy blocks: `POST /freeBusy` for the primary calendar.
- Our visits: `events.insert` with an id we derive from the appointment
  (Google takes client ids in base32hex), so a retry after a lost answer
  meets 409 and reads the event it made; `events.patch` when ours moves,
  `events.delete` when ours is canceled (410: already gone).
- Changes: `events.watch` opens a channel that POSTs to
  `/hooks/google-calendar/` with `X-Goog-Channel-ID`, `X-Goog-Channel-Token`
  and `X-Goog-Resource-State` headers and no body; the engine then reads
  `events.list` with the stream's `syncToken` (a full read from a time the
  first time, and again when Google answers 410 for an old token). A
  deleted event comes as `status: cancelled`.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar
from urllib.parse import quote, urlencode

import google.auth.exceptions
import google.auth.transport.requests
import requests
from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from google.oauth2.credentials import Credentials

from agents.sync.base import (
    Account,
    AuthRefused,
    Channel,
    Page,
    PullAsk,
    PushBooking,
    Pushed,
    Refused,
    Remote,
    Session,
    SyncError,
    Tokens,
)
from agents.sync.calendar import CalendarAdapter, OAuthWords, busy_blocks

PROVIDER = "google_calendar"
SCOPES = (
    "https://www.googleapis.com/auth/calendar.events",
    "https://www.googleapis.com/auth/calendar.freebusy",
)
PAGE_SIZE = 250
# Google keeps a channel at most a week; we ask for that and renew ahead.
CHANNEL_TTL = timedelta(days=7)
THROTTLED_REASONS = {"rateLimitExceeded", "userRateLimitExceeded", "quotaExceeded"}


def event_id(record: str) -> str:
    """Our event id for an appointment: base32hex (0-9, a-v), as Google takes."""
    return "leadops" + hashlib.sha256(record.encode()).hexdigest()[:32]


def _when(value: Mapping[str, Any] | None) -> datetime | None:
    # An all-day event has a `date` and no time: it is not a visit.
    text = (value or {}).get("dateTime") or ""
    moment = parse_datetime(text) if text else None
    return moment.astimezone(UTC) if moment is not None else None


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


class GoogleCalendarAdapter(CalendarAdapter):
    provider: ClassVar[str] = PROVIDER
    name: ClassVar[str] = "Google Calendar"
    hook_path: ClassVar[str] = "hooks/google-calendar/"
    signature_header: ClassVar[str] = "X-Goog-Channel-Token"
    oauth: ClassVar[OAuthWords] = OAuthWords("Google", missing_refresh="connect again and allow offline access")

    # -- OAuth
    def authorize_url(self, *, redirect_uri: str, state: str) -> str:
        query = {
            "client_id": settings.GOOGLE_CALENDAR_CLIENT_ID,
            "redirect_uri": redirect_uri,
            "response_type": "code",
            "scope": " ".join(SCOPES),
            # A refresh token, and the consent screen again so a reconnect gets a new one.
            "access_type": "offline",
            "prompt": "consent",
            "include_granted_scopes": "true",
            "state": state,
        }
        return f"{settings.GOOGLE_OAUTH_URL}?{urlencode(query)}"

    def _token_url(self) -> str:
        return str(settings.GOOGLE_TOKEN_URL)

    def _token_form(self, form: dict[str, str]) -> dict[str, str]:
        return {
            **form,
            "client_id": settings.GOOGLE_CALENDAR_CLIENT_ID,
            "client_secret": settings.GOOGLE_CALENDAR_CLIENT_SECRET,
        }

    # The code goes through the shared exchange; a refresh through google-auth.
    def tokens_refresh(self, refresh_token: str) -> Tokens:
        credentials = Credentials(
            token=None,
            refresh_token=refresh_token,
            token_uri=settings.GOOGLE_TOKEN_URL,
            client_id=settings.GOOGLE_CALENDAR_CLIENT_ID,
            client_secret=settings.GOOGLE_CALENDAR_CLIENT_SECRET,
        )
        with requests.Session() as http:
            try:
                credentials.refresh(google.auth.transport.requests.Request(http))
            except google.auth.exceptions.RefreshError as exc:
                # google-auth marks an answer worth retrying (5xx, 429) `retryable`.
                if getattr(exc, "retryable", False):
                    raise SyncError(f"Google could not refresh the token now: {exc.args[0]}") from exc
                raise AuthRefused(f"Google refused the refresh token ({exc.args[0]}): connect again") from exc
            except google.auth.exceptions.TransportError as exc:
                raise SyncError(f"Google's token endpoint did not answer: {type(exc).__name__}") from exc
        expiry = credentials.expiry
        return Tokens(
            access_token=str(credentials.token),
            # Google keeps the refresh token: it does not rotate.
            refresh_token=credentials.refresh_token or refresh_token,
            expires_at=expiry.replace(tzinfo=UTC) if expiry is not None else None,
        )

    def account(self, session: Session) -> Account:
        data = self._call(session, "GET", "/calendars/primary")
        return Account(id=str(data.get("id") or ""), name=str(data.get("summary") or data.get("id") or ""))

    # -- busy times
    def busy(self, session: Session, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
        body = {"timeMin": _rfc3339(start), "timeMax": _rfc3339(end), "items": [{"id": "primary"}]}
        data = self._call(session, "POST", "/freeBusy", json=body)
        calendar = (data.get("calendars") or {}).get("primary") or {}
        if calendar.get("errors"):
            reasons = ", ".join(str(e.get("reason")) for e in calendar["errors"])
            raise SyncError(f"Google could not read the calendar's busy times: {reasons}")
        return busy_blocks(
            (parse_datetime(block.get("start") or ""), parse_datetime(block.get("end") or ""))
            for block in calendar.get("busy") or ()
        )

    # -- records
    def pull(self, session: Session, ask: PullAsk) -> Page:
        if ask.external_id:
            data = self._call(session, "GET", f"/calendars/primary/events/{quote(ask.external_id)}", missing_ok=True)
            return Page([self._remote(data)] if data else [])
        query: dict[str, str] = {"maxResults": str(PAGE_SIZE), "showDeleted": "true"}
        since = parse_datetime(ask.since) if ask.since else None
        if since is None and ask.since:
            query["syncToken"] = ask.since
        else:
            # The first read: the events from then on; its last page gives the sync token.
            query["timeMin"] = _rfc3339(since or timezone.now())
        if ask.after:
            query["pageToken"] = ask.after
        data = self._call(session, "GET", "/calendars/primary/events", params=query, gone_ok=True)
        if data is None:
            # The sync token expired (410): read everything again from a day back.
            return Page([], since=_rfc3339(timezone.now() - timedelta(days=1)))
        items = [self._remote(event) for event in data.get("items") or ()]
        if data.get("nextPageToken"):
            return Page(items, cursor=str(data["nextPageToken"]), more=True)
        return Page(items, since=str(data.get("nextSyncToken") or ""))

    def _push_booking(self, session: Session, item: PushBooking) -> Pushed:
        wanted = event_id(item.record)
        body = {"id": wanted, **self._event_body(item)}
        data = self._call(session, "POST", "/calendars/primary/events", json=body, conflict_ok=True)
        if data is None:
            # 409: made by a try whose answer we lost; it is ours, set to this booking.
            data = self._call(session, "PATCH", f"/calendars/primary/events/{wanted}", json=self._event_body(item))
        return Pushed(external_id=str(data.get("id") or wanted), version=str(data.get("updated") or ""))

    def move(self, session: Session, external_id: str, item: PushBooking) -> Pushed:
        path = f"/calendars/primary/events/{quote(external_id)}"
        data = self._call(session, "PATCH", path, json=self._event_body(item))
        return Pushed(external_id=external_id, version=str(data.get("updated") or ""))

    def remove(self, session: Session, external_id: str) -> None:
        path = f"/calendars/primary/events/{quote(external_id)}"
        self._call(session, "DELETE", path, missing_ok=True, gone_ok=True)

    def watch(self, session: Session, *, address: str, current: Channel | None) -> Channel:
        token = secrets.token_hex(32)
        body: dict[str, Any] = {
            "id": secrets.token_hex(24),
            "type": "web_hook",
            "address": address,
            "token": token,
            "params": {"ttl": str(int(CHANNEL_TTL.total_seconds()))},
        }
        data = self._call(session, "POST", "/calendars/primary/events/watch", json=body)
        expiration = int(data.get("expiration") or 0) / 1000
        channel = Channel(
            id=str(data.get("id") or body["id"]),
            token=token,
            resource_id=str(data.get("resourceId") or ""),
            expires_at=datetime.fromtimestamp(expiration, UTC) if expiration else timezone.now() + CHANNEL_TTL,
        )
        if current is not None:
            # The old channel stops once the new one is there: no gap without notifications.
            with contextlib.suppress(Refused):  # it had expired already
                self._call(
                    session, "POST", "/channels/stop", json={"id": current.id, "resourceId": current.resource_id}
                )
        return channel

    # -- the API
    def _event_body(self, item: PushBooking) -> dict[str, Any]:
        return {
            "summary": item.title,
            "location": item.location,
            "description": self._description(item),
            "start": {"dateTime": _rfc3339(item.starts_at), "timeZone": "UTC"},
            "end": {"dateTime": _rfc3339(item.ends_at), "timeZone": "UTC"},
            "extendedProperties": {"private": {"leadops_appointment": item.record}},
        }

    def _remote(self, event: Mapping[str, Any]) -> Remote:
        return self._visit(
            event.get("id"),
            event.get("updated"),
            _when(event.get("start")),
            _when(event.get("end")),
            event.get("summary"),
            gone=event.get("status") == "cancelled",
        )

    # -- the API's shapes for the shared call (agents/sync/calendar.py)
    def _url(self, path: str, *, absolute: bool) -> str:
        return f"{settings.GOOGLE_CALENDAR_API_URL}{path}"

    def _throttled(self, answer: requests.Response, error: Mapping[str, Any]) -> str | None:
        # Google says "over quota" as a 403 with a reason as often as with a 429.
        reasons = {str(e.get("reason")) for e in error.get("errors") or () if isinstance(e, dict)}
        if answer.status_code == 429 or (answer.status_code == 403 and reasons & THROTTLED_REASONS):
            return f"Google Calendar's quota: {', '.join(sorted(reasons)) or answer.status_code}"
        return None
