"""What the calendar adapters (Google Calendar, Microsoft 365) share: one
team member's calendar (`per_member`), our bookings pushed as visits, the
OAuth token endpoint's answers and the API's answers mapped to the
engine's errors (agents/sync/base.py), and busy blocks read as UTC pairs.

Each provider's module keeps only its own shapes: its URLs and scopes, its
event bodies, its change feed and push channels, and the few answers it
reads differently (which statuses mean "slow down", how a token refresh
goes).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import requests
from django.utils import timezone

from agents.sync.base import (
    VISIT,
    AuthRefused,
    Notice,
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

TIMEOUT = (3.05, 15.0)


@dataclass(frozen=True)
class OAuthWords:
    """How a provider's token endpoint is named and read: `owner` names it
    in errors ("Google"); `missing_refresh` tells the person what to do
    when a code brings no refresh token; `busy_on_429`: its 429 is a
    passing failure rather than a refusal of the grant."""

    owner: str
    missing_refresh: str
    busy_on_429: bool = False


class CalendarAdapter(SyncAdapter):
    """One team member's calendar, connected by them: our visits go in, its
    events and busy blocks come out. A provider fills in `oauth`, its
    token endpoint (`_token_url`, `_token_form`), its API's addresses
    (`_url`, `_headers`, `_throttled`) and its own shapes."""

    pulls: ClassVar[tuple[str, ...]] = (VISIT,)
    pushes: ClassVar[frozenset[str]] = frozenset({BOOKING, CANCEL})
    person_kind: ClassVar[str | None] = None
    booking_kind: ClassVar[str] = VISIT
    per_member: ClassVar[bool] = True

    oauth: ClassVar[OAuthWords]
    # The API as its errors name it ("Microsoft Graph"; empty: the adapter's name).
    api_name: ClassVar[str] = ""

    # -- hooks each provider fills in
    @abstractmethod
    def _token_url(self) -> str: ...

    @abstractmethod
    def _token_form(self, form: dict[str, str]) -> dict[str, str]:
        """`form` (the grant) with the client's credentials and whatever else the endpoint wants."""

    @abstractmethod
    def _url(self, path: str, *, absolute: bool) -> str:
        """The API address of `path` (`absolute`: a whole URL the provider gave)."""

    def _headers(self) -> dict[str, str]:
        """Headers every API call carries besides the access token."""
        return {}

    def _throttled(self, answer: requests.Response, error: Mapping[str, Any]) -> str | None:
        """What to say when this answer is the provider's rate limit; None when it is not."""
        return f"{self.api_name or self.name}'s limit: {answer.status_code}" if answer.status_code == 429 else None

    # -- OAuth
    def tokens_exchange(self, *, code: str, redirect_uri: str) -> Tokens:
        tokens = self._token({"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri})
        if not tokens.refresh_token:
            raise Refused(f"{self.oauth.owner} gave no refresh token: {self.oauth.missing_refresh}")
        return tokens

    def tokens_refresh(self, refresh_token: str) -> Tokens:
        return self._token({"grant_type": "refresh_token", "refresh_token": refresh_token})

    def _token(self, grant: dict[str, str]) -> Tokens:
        """One answer of the token endpoint, as tokens or the engine's error."""
        try:
            answer = requests.post(self._token_url(), data=self._token_form(grant), timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise SyncError(f"{self.oauth.owner}'s token endpoint did not answer: {type(exc).__name__}") from exc
        data = json_of(answer)
        status = answer.status_code
        if status >= 500 or (status == 429 and self.oauth.busy_on_429):
            raise SyncError(f"{self.oauth.owner}'s token endpoint answered {status}")
        if status != 200 or not data.get("access_token"):
            error = str(data.get("error") or status)
            if grant["grant_type"] == "refresh_token":
                raise AuthRefused(f"{self.oauth.owner} refused the refresh token ({error}): connect again")
            raise Refused(f"{self.oauth.owner} refused the code: {error}")
        return Tokens(
            access_token=str(data["access_token"]),
            # A provider that keeps the refresh token answers none: the one we had stays.
            refresh_token=str(data.get("refresh_token") or grant.get("refresh_token") or ""),
            expires_at=timezone.now() + timedelta(seconds=int(data.get("expires_in") or 3600)),
        )

    # -- records: a calendar takes our bookings as visits, never a person
    def push(self, session: Session, item: PushPerson | PushBooking) -> Pushed:
        if not isinstance(item, PushBooking):
            raise Refused("a calendar takes visits, not people")
        return self._push_booking(session, item)

    @abstractmethod
    def _push_booking(self, session: Session, item: PushBooking) -> Pushed:
        """Find or create the event of our booking `item`; its id (a retry makes no second one)."""

    # -- webhooks: a calendar's notifications are no signed body; agents/sync/calendar_hooks.py
    # checks their channel token (Google's headers, Microsoft's clientState) and reads them.
    def verify(self, body: bytes, headers: Mapping[str, str]) -> bool:
        return False

    def notice(self, data: dict[str, Any]) -> Notice:
        raise MalformedPayload(f"{self.name} notifications are read by agents/sync/calendar_hooks.py")

    # -- the API
    def _call(
        self,
        session: Session,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        missing_ok: bool = False,
        gone_ok: bool = False,
        conflict_ok: bool = False,
        absolute: bool = False,
    ) -> Any:
        """One API call: its JSON (None for a tolerated 404, 410 or 409)."""
        api = self.api_name or self.name
        url = self._url(path, absolute=absolute)
        headers = {"Authorization": f"Bearer {session.access_token}", **self._headers()}
        try:
            answer = session.http.request(method, url, params=params, json=json, headers=headers, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise SyncError(f"{api} did not answer: {type(exc).__name__}") from exc
        status = answer.status_code
        if status == 401:
            raise TokenExpired(f"{api} refused the access token")
        if (status == 404 and missing_ok) or (status == 410 and gone_ok) or (status == 409 and conflict_ok):
            return None
        data = json_of(answer)
        error: dict[str, Any] = data["error"] if isinstance(data.get("error"), dict) else {}
        throttled = self._throttled(answer, error)
        if throttled is not None:
            wait = int(answer.headers.get("Retry-After") or 60)
            raise Throttled(throttled, wait=timedelta(seconds=wait))
        if status >= 500:
            raise SyncError(f"{api} answered {status}")
        if status >= 400:
            raise Refused(f"{api} refused {method} {path.split('?')[0]}: {status} {error.get('message', '')}")
        return data

    # -- shapes both use
    @staticmethod
    def _description(item: PushBooking) -> str:
        return "\n\n".join(part for part in (item.notes, f"The lead in LeadOps: {item.link}") if part)

    @staticmethod
    def _visit(
        external_id: Any, version: Any, starts: datetime | None, ends: datetime | None, title: Any, *, gone: bool
    ) -> Remote:
        return Remote(
            kind=VISIT,
            external_id=str(external_id or ""),
            version=str(version or ""),
            fields={"status": "scheduled", "starts_at": starts, "ends_at": ends, "title": title or ""},
            gone=gone,
        )


def busy_blocks(pairs: Iterable[tuple[datetime | None, datetime | None]]) -> list[tuple[datetime, datetime]]:
    """The (start, end) pairs that have both ends, in UTC."""
    return [
        (starts.astimezone(UTC), ends.astimezone(UTC))
        for starts, ends in pairs
        if starts is not None and ends is not None
    ]


def json_of(answer: requests.Response) -> dict[str, Any]:
    """The answer's JSON object; {} for an empty body, another shape or no JSON."""
    if not answer.content:
        return {}
    try:
        data = answer.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
