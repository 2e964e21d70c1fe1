"""Microsoft 365: the adapter (agents/sync/base.py) for one team member's
Outlook calendar, over Microsoft Graph at `MS_GRAPH_URL` (plain JSON over
`requests`).

- OAuth, the authorization-code flow of the Microsoft identity platform at
  `MS_LOGIN_URL` (`/authorize`, `/token`), scopes `offline_access
  User.Read Calendars.ReadWrite`. Refresh tokens rotate: each refresh
  returns a new one. `invalid_grant` (revoked, expired, password changed)
  stops the connection for the person.
- Busy blocks: `POST /me/calendar/getSchedule` for the person's own
  address, times asked in UTC (`Prefer: outlook.timezone="UTC"`).
- Our visits: `POST /me/events` with a `transactionId` derived from the
  appointment (Graph makes one event per id, so a retry after a lost
  answer makes no second one), `PATCH` when ours moves, `DELETE` when ours
  is canceled (404: already gone).
- Changes: a subscription on `me/events` (created, updated, deleted) posts
  to `/hooks/microsoft-calendar/` with our `clientState`; it lives at most
  three days here and is renewed ahead (`PATCH /subscriptions/{id}`). A
  notification names the event, which is read (404: deleted); the
  reconcile reads the events modified since the stream's cursor.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar
from urllib.parse import quote, urlencode

import requests
from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents.sync.base import Account, Channel, Page, PullAsk, PushBooking, Pushed, Refused, Remote, Session, SyncError
from agents.sync.calendar import CalendarAdapter, OAuthWords, busy_blocks

PROVIDER = "microsoft365"
SCOPES = ("offline_access", "User.Read", "Calendars.ReadWrite")
PAGE_SIZE = 50
# Graph's limit for a subscription on events is about three days (4230 minutes).
SUBSCRIPTION_LIFETIME = timedelta(minutes=4200)
BUSY_STATUSES = {"busy", "oof", "tentative", "workingElsewhere"}
UTC_PREFER = 'outlook.timezone="UTC"'


def transaction_id(record: str) -> str:
    """The create's idempotency id for an appointment (a GUID, as Graph documents it)."""
    return str(uuid.UUID(hashlib.sha256(record.encode()).hexdigest()[:32]))


def _graph_time(value: Mapping[str, Any] | None) -> datetime | None:
    # {"dateTime": "2026-12-08T15:00:00.0000000", "timeZone": "UTC"}: seven decimals, no offset.
    text = str((value or {}).get("dateTime") or "")
    if not text:
        return None
    head, _, fraction = text.partition(".")
    moment = parse_datetime(f"{head}.{fraction[:6]}" if fraction else head)
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _graph_value(moment: datetime) -> dict[str, str]:
    return {"dateTime": moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S"), "timeZone": "UTC"}


class MicrosoftCalendarAdapter(CalendarAdapter):
    provider: ClassVar[str] = PROVIDER
    name: ClassVar[str] = "Microsoft 365"
    api_name: ClassVar[str] = "Microsoft Graph"
    hook_path: ClassVar[str] = "hooks/microsoft-calendar/"
    # Graph's notifications carry our clientState (agents/sync/calendar_hooks.py checks it).
    signature_header: ClassVar[str] = "clientState"
    # The identity platform's 429 is its busy signal, not a refusal of the grant.
    oauth: ClassVar[OAuthWords] = OAuthWords(
        "Microsoft", missing_refresh="the offline_access scope was not granted", busy_on_429=True
    )

    # -- OAuth
    def authorize_url(self, *, redirect_uri: str, state: str) -> str:
        query = {
            "client_id": settings.MS_CLIENT_ID,
            "response_type": "code",
            "redirect_uri": redirect_uri,
            "response_mode": "query",
            "scope": " ".join(SCOPES),
            "state": state,
        }
        return f"{settings.MS_LOGIN_URL}/authorize?{urlencode(query)}"

    def _token_url(self) -> str:
        return f"{settings.MS_LOGIN_URL}/token"

    def _token_form(self, form: dict[str, str]) -> dict[str, str]:
        return {
            **form,
            "client_id": settings.MS_CLIENT_ID,
            "client_secret": settings.MS_CLIENT_SECRET,
            "scope": " ".join(SCOPES),
        }

    def account(self, session: Session) -> Account:
        data = self._call(session, "GET", "/me", params={"$select": "id,displayName,mail,userPrincipalName"})
        # The address names the schedule getSchedule reads: it is the account's name here.
        address = str(data.get("mail") or data.get("userPrincipalName") or "")
        return Account(id=str(data.get("id") or ""), name=address)

    # -- busy times
    def busy(self, session: Session, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
        address = session.connection.account_name
        if not address:
            raise Refused("the connection names no mailbox address: connect the calendar again")
        body = {
            "schedules": [address],
            "startTime": _graph_value(start),
            "endTime": _graph_value(end),
            "availabilityViewInterval": 15,
        }
        data = self._call(session, "POST", "/me/calendar/getSchedule", json=body)
        schedules = data.get("value") or ()
        for schedule in schedules:
            if schedule.get("error"):
                message = (schedule["error"] or {}).get("message") or "an error"
                raise SyncError(f"Microsoft could not read the schedule of {address}: {message}")
        return busy_blocks(
            (_graph_time(item.get("start")), _graph_time(item.get("end")))
            for schedule in schedules
            for item in schedule.get("scheduleItems") or ()
            if item.get("status") in BUSY_STATUSES
        )

    # -- records
    def pull(self, session: Session, ask: PullAsk) -> Page:
        if ask.external_id:
            data = self._call(session, "GET", f"/me/events/{quote(ask.external_id)}", missing_ok=True)
            return Page([self._remote(data)] if data else [])
        if ask.after:
            # Graph's next page is a whole URL, under its own base.
            data = self._call(session, "GET", ask.after, absolute=True)
        else:
            since = parse_datetime(ask.since) if ask.since else None
            since_text = (since or timezone.now()).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            params = {
                "$filter": f"lastModifiedDateTime ge {since_text}",
                "$orderby": "lastModifiedDateTime",
                "$top": str(PAGE_SIZE),
            }
            data = self._call(session, "GET", "/me/events", params=params)
        items = [self._remote(event) for event in data.get("value") or ()]
        following = str(data.get("@odata.nextLink") or "")
        return Page(items, cursor=following, more=bool(following))

    def _push_booking(self, session: Session, item: PushBooking) -> Pushed:
        body = {**self._event_body(item), "transactionId": transaction_id(item.record)}
        data = self._call(session, "POST", "/me/events", json=body)
        return Pushed(external_id=str(data.get("id") or ""), version=str(data.get("lastModifiedDateTime") or ""))

    def move(self, session: Session, external_id: str, item: PushBooking) -> Pushed:
        data = self._call(session, "PATCH", f"/me/events/{quote(external_id)}", json=self._event_body(item))
        return Pushed(external_id=external_id, version=str(data.get("lastModifiedDateTime") or ""))

    def remove(self, session: Session, external_id: str) -> None:
        self._call(session, "DELETE", f"/me/events/{quote(external_id)}", missing_ok=True)

    def watch(self, session: Session, *, address: str, current: Channel | None) -> Channel:
        expires = timezone.now() + SUBSCRIPTION_LIFETIME
        expiration = expires.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if current is not None:
            path = f"/subscriptions/{quote(current.id)}"
            data = self._call(session, "PATCH", path, json={"expirationDateTime": expiration}, missing_ok=True)
            if data is not None:
                return Channel(current.id, current.token, current.resource_id, expires)
        token = secrets.token_hex(32)
        body = {
            "changeType": "created,updated,deleted",
            "notificationUrl": address,
            "resource": "me/events",
            "expirationDateTime": expiration,
            "clientState": token,
        }
        data = self._call(session, "POST", "/subscriptions", json=body)
        ends = parse_datetime(str(data.get("expirationDateTime") or ""))
        return Channel(str(data.get("id") or ""), token, str(data.get("resource") or "me/events"), ends or expires)

    # -- the API
    def _event_body(self, item: PushBooking) -> dict[str, Any]:
        return {
            "subject": item.title,
            "body": {"contentType": "text", "content": self._description(item)},
            "start": _graph_value(item.starts_at),
            "end": _graph_value(item.ends_at),
            "location": {"displayName": item.location},
        }

    def _remote(self, event: Mapping[str, Any]) -> Remote:
        starts, ends = _graph_time(event.get("start")), _graph_time(event.get("end"))
        if event.get("isAllDay"):
            starts = ends = None
        return self._visit(
            event.get("id"),
            event.get("lastModifiedDateTime"),
            starts,
            ends,
            event.get("subject"),
            gone=bool(event.get("isCancelled")),
        )

    # -- Graph's shapes for the shared call (agents/sync/calendar.py)
    def _url(self, path: str, *, absolute: bool) -> str:
        if not absolute:
            return f"{settings.MS_GRAPH_URL}{path}"
        # Graph's next page is a whole URL: only one under our Graph base is followed.
        if not path.startswith(settings.MS_GRAPH_URL):
            raise Refused("Graph's next page is not under MS_GRAPH_URL")
        return path

    def _headers(self) -> dict[str, str]:
        # Busy blocks and events in UTC, whatever the mailbox's own time zone.
        return {"Prefer": UTC_PREFER}

    def _throttled(self, answer: requests.Response, error: Mapping[str, Any]) -> str | None:
        # Graph also says "slow down" as a 503 that names a wait.
        if answer.status_code == 429 or (answer.status_code == 503 and answer.headers.get("Retry-After")):
            return f"Microsoft Graph's limit: {error.get('code') or answer.status_code}"
        return None
