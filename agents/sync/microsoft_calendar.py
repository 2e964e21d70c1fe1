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

from agents.sync.base import (
    VISIT,
    Account,
    AuthRefused,
    Channel,
    Notice,
    Page,
    PullAsk,
    PushBooking,
    Pushed,
    PushPerson,
    Refused,
    Remote,
    Session,
    SyncAdapter,
    SyncError,
    Throttled,
    TokenExpired,
    Tokens,
)
from crm.services.inbound_handlers import MalformedPayload
from crm.services.sync import BOOKING, CANCEL

PROVIDER = "microsoft365"
SCOPES = ("offline_access", "User.Read", "Calendars.ReadWrite")
TIMEOUT = (3.05, 15.0)
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


class MicrosoftCalendarAdapter(SyncAdapter):
    provider: ClassVar[str] = PROVIDER
    name: ClassVar[str] = "Microsoft 365"
    pulls: ClassVar[tuple[str, ...]] = (VISIT,)
    pushes: ClassVar[frozenset[str]] = frozenset({BOOKING, CANCEL})
    person_kind: ClassVar[str | None] = None
    booking_kind: ClassVar[str] = VISIT
    per_member: ClassVar[bool] = True
    hook_path: ClassVar[str] = "hooks/microsoft-calendar/"
    signature_header: ClassVar[str] = "clientState"

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

    def _token(self, form: dict[str, str]) -> Tokens:
        form = {
            **form,
            "client_id": settings.MS_CLIENT_ID,
            "client_secret": settings.MS_CLIENT_SECRET,
            "scope": " ".join(SCOPES),
        }
        try:
            answer = requests.post(f"{settings.MS_LOGIN_URL}/token", data=form, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise SyncError(f"Microsoft's token endpoint did not answer: {type(exc).__name__}") from exc
        data = _json(answer)
        if answer.status_code >= 500 or answer.status_code == 429:
            raise SyncError(f"Microsoft's token endpoint answered {answer.status_code}")
        if answer.status_code != 200 or not data.get("access_token"):
            error = str(data.get("error") or answer.status_code)
            if form["grant_type"] == "refresh_token":
                raise AuthRefused(f"Microsoft refused the refresh token ({error}): connect again")
            raise Refused(f"Microsoft refused the code: {error}")
        return Tokens(
            access_token=str(data["access_token"]),
            refresh_token=str(data.get("refresh_token") or form.get("refresh_token") or ""),
            expires_at=timezone.now() + timedelta(seconds=int(data.get("expires_in") or 3600)),
        )

    def tokens_exchange(self, *, code: str, redirect_uri: str) -> Tokens:
        tokens = self._token({"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri})
        if not tokens.refresh_token:
            raise Refused("Microsoft gave no refresh token: the offline_access scope was not granted")
        return tokens

    def tokens_refresh(self, refresh_token: str) -> Tokens:
        return self._token({"grant_type": "refresh_token", "refresh_token": refresh_token})

    def account(self, session: Session) -> Account:
        data = self._call(session, "GET", "/me", params={"$select": "id,displayName,mail,userPrincipalName"})
        # The address names the schedule getSchedule reads: it is the account's name here.
        address = str(data.get("mail") or data.get("userPrincipalName") or "")
        return Account(id=str(data.get("id") or ""), name=address)

    # -- webhooks: Graph's notifications are checked by clientState (agents/sync/calendar_hooks.py)
    def verify(self, body: bytes, headers: Mapping[str, str]) -> bool:
        return False

    def notice(self, data: dict[str, Any]) -> Notice:
        raise MalformedPayload("Microsoft 365 notifications are read by agents/sync/calendar_hooks.py")

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
        blocks = []
        for schedule in data.get("value") or ():
            if schedule.get("error"):
                message = (schedule["error"] or {}).get("message") or "an error"
                raise SyncError(f"Microsoft could not read the schedule of {address}: {message}")
            for item in schedule.get("scheduleItems") or ():
                starts, ends = _graph_time(item.get("start")), _graph_time(item.get("end"))
                if item.get("status") in BUSY_STATUSES and starts is not None and ends is not None:
                    blocks.append((starts, ends))
        return blocks

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

    def push(self, session: Session, item: PushPerson | PushBooking) -> Pushed:
        if not isinstance(item, PushBooking):
            raise Refused("a calendar takes visits, not people")
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
        content = "\n\n".join(part for part in (item.notes, f"The lead in LeadOps: {item.link}") if part)
        return {
            "subject": item.title,
            "body": {"contentType": "text", "content": content},
            "start": _graph_value(item.starts_at),
            "end": _graph_value(item.ends_at),
            "location": {"displayName": item.location},
        }

    def _remote(self, event: Mapping[str, Any]) -> Remote:
        starts, ends = _graph_time(event.get("start")), _graph_time(event.get("end"))
        if event.get("isAllDay"):
            starts = ends = None
        return Remote(
            kind=VISIT,
            external_id=str(event.get("id") or ""),
            version=str(event.get("lastModifiedDateTime") or ""),
            fields={"status": "scheduled", "starts_at": starts, "ends_at": ends, "title": event.get("subject") or ""},
            gone=bool(event.get("isCancelled")),
        )

    def _call(
        self,
        session: Session,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        missing_ok: bool = False,
        absolute: bool = False,
    ) -> Any:
        """One Graph call: its JSON (None for a tolerated 404)."""
        url = path if absolute else f"{settings.MS_GRAPH_URL}{path}"
        if absolute and not url.startswith(settings.MS_GRAPH_URL):
            raise Refused("Graph's next page is not under MS_GRAPH_URL")
        headers = {"Authorization": f"Bearer {session.access_token}", "Prefer": UTC_PREFER}
        try:
            answer = session.http.request(method, url, params=params, json=json, headers=headers, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise SyncError(f"Microsoft Graph did not answer: {type(exc).__name__}") from exc
        status = answer.status_code
        if status == 401:
            raise TokenExpired("Microsoft Graph refused the access token")
        if status == 404 and missing_ok:
            return None
        data = _json(answer)
        error: dict[str, Any] = data["error"] if isinstance(data.get("error"), dict) else {}
        if status == 429 or (status == 503 and answer.headers.get("Retry-After")):
            wait = int(answer.headers.get("Retry-After") or 60)
            raise Throttled(f"Microsoft Graph's limit: {error.get('code') or status}", wait=timedelta(seconds=wait))
        if status >= 500:
            raise SyncError(f"Microsoft Graph answered {status}")
        if status >= 400:
            raise Refused(f"Microsoft Graph refused {method} {path.split('?')[0]}: {status} {error.get('message', '')}")
        return data


def _json(answer: requests.Response) -> dict[str, Any]:
    if not answer.content:
        return {}
    try:
        data = answer.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
