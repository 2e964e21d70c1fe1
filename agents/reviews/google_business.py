"""Google Business Profile: the connection and the three APIs reviews need.

- The connection is a sync adapter (`google_business`), so an owner connects
  it where every other system of the business is connected (`/admin/sync/`:
  consent, callback, tokens kept encrypted, refreshed by the sync engine's
  `session_open`, a refused grant put to a person). It borrows the calendar
  adapters' OAuth token exchange and API call (agents/sync/calendar.py): the
  same Google token endpoint and the same mapping of answers to the engine's
  errors. It is no calendar and no system of record: the engine pulls and
  pushes nothing for it (`pulls` and `pushes` are empty), and it has no
  webhooks (Google's review notifications go through Pub/Sub, which we do
  not use: reviews are read on a schedule, agents/reviews/pull.py).
- OAuth: `GOOGLE_OAUTH_URL` with the scope `business.manage`, offline
  access; the client is `GOOGLE_BUSINESS_CLIENT_ID` (the calendars' by
  default). The account is the first one `GET /v1/accounts` lists on the
  Account Management API (`GOOGLE_BUSINESS_ACCOUNTS_URL`).
- Locations: `GET /v1/{account}/locations?readMask=name,title` on the
  Business Information API (`GOOGLE_BUSINESS_INFO_URL`), every account.
- Reviews: `GET /v4/{account}/{location}/reviews` (50 a page, `pageToken`)
  and `PUT /v4/{review}/reply` on the v4 API (`GOOGLE_BUSINESS_REVIEWS_URL`).
  A reply is a PUT: a review has one reply, and a second PUT replaces it, so
  a retry after a lost answer never makes two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import quote, urlencode

from django.conf import settings

from agents.sync.base import Account, Notice, Page, PullAsk, PushBooking, Pushed, PushPerson, Refused, Session
from agents.sync.calendar import CalendarAdapter, OAuthWords
from agents.sync.engine import adapter_register
from crm.services.inbound_handlers import MalformedPayload

PROVIDER = "google_business"
SCOPE = "https://www.googleapis.com/auth/business.manage"
REVIEWS_PAGE_SIZE = 50  # the most the v4 API gives a page
LOCATIONS_PAGE_SIZE = 100
# Google takes a reply of at most 4096 bytes.
REPLY_MAX_BYTES = 4096


@dataclass(frozen=True)
class Location:
    """One location of the profile: `account` and `name` as Google names
    them (`accounts/1…`, `locations/2…`), `title` as the owner sees it."""

    account: str
    name: str
    title: str

    @property
    def parent(self) -> str:
        """The v4 API's name of the location: `accounts/1…/locations/2…`."""
        return f"{self.account}/{self.name}"


class GoogleBusinessAdapter(CalendarAdapter):
    provider: ClassVar[str] = PROVIDER
    name: ClassVar[str] = "Google Business Profile"
    # Not a calendar: the business's own profile, connected by an owner.
    per_member: ClassVar[bool] = False
    pulls: ClassVar[tuple[str, ...]] = ()
    pushes: ClassVar[frozenset[str]] = frozenset()
    person_kind: ClassVar[str | None] = None
    oauth: ClassVar[OAuthWords] = OAuthWords("Google", missing_refresh="connect again and allow offline access")

    # -- OAuth
    def authorize_url(self, *, redirect_uri: str, state: str) -> str:
        query = {
            "client_id": settings.GOOGLE_BUSINESS_CLIENT_ID,
            "redirect_uri": redirect_uri,
            "response_type": "code",
            "scope": SCOPE,
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
            "client_id": settings.GOOGLE_BUSINESS_CLIENT_ID,
            "client_secret": settings.GOOGLE_BUSINESS_CLIENT_SECRET,
        }

    def account(self, session: Session) -> Account:
        accounts = self._accounts(session)
        if not accounts:
            raise Refused("this Google account manages no Business Profile: sign in as the profile's owner or manager")
        first = accounts[0]
        return Account(id=str(first.get("name") or ""), name=str(first.get("accountName") or first.get("name") or ""))

    # -- what the sync engine asks of every adapter: nothing here
    def pull(self, session: Session, ask: PullAsk) -> Page:
        raise Refused("Google Business Profile is read by agents/reviews/pull.py, not the sync engine")

    def push(self, session: Session, item: PushPerson | PushBooking) -> Pushed:
        raise Refused("Google Business Profile takes no people or bookings")

    def _push_booking(self, session: Session, item: PushBooking) -> Pushed:
        raise Refused("Google Business Profile takes no bookings")

    def notice(self, data: dict[str, Any]) -> Notice:
        raise MalformedPayload("Google Business Profile sends us no webhooks")

    # -- the APIs
    def _accounts(self, session: Session) -> list[dict[str, Any]]:
        base = f"{settings.GOOGLE_BUSINESS_ACCOUNTS_URL}/v1/accounts"
        return self._all(session, base, "accounts", {})

    def locations(self, session: Session) -> list[Location]:
        """Every location of every account the person manages, in Google's order."""
        found: list[Location] = []
        for account in self._accounts(session):
            name = str(account.get("name") or "")
            url = f"{settings.GOOGLE_BUSINESS_INFO_URL}/v1/{name}/locations"
            query = {"readMask": "name,title", "pageSize": str(LOCATIONS_PAGE_SIZE)}
            for location in self._all(session, url, "locations", query):
                found.append(Location(name, str(location.get("name") or ""), str(location.get("title") or "")))
        return found

    def reviews_page(self, session: Session, location: Location, page_token: str = "") -> dict[str, Any]:
        """One page of the location's reviews, as Google answers it."""
        query = {"pageSize": str(REVIEWS_PAGE_SIZE)}
        if page_token:
            query["pageToken"] = page_token
        url = f"{settings.GOOGLE_BUSINESS_REVIEWS_URL}/v4/{location.parent}/reviews"
        return dict(self._call(session, "GET", url, params=query, absolute=True) or {})

    def reply_put(self, session: Session, review_name: str, comment: str) -> dict[str, Any]:
        """The review's reply set to `comment` (made, or replaced); Google's reply back."""
        url = f"{settings.GOOGLE_BUSINESS_REVIEWS_URL}/v4/{quote(review_name, safe='/')}/reply"
        return dict(self._call(session, "PUT", url, json={"comment": comment}, absolute=True) or {})

    def _all(self, session: Session, url: str, key: str, query: dict[str, str]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        token = ""
        # Bounded: an account with more than fifty pages of locations is no small business.
        for _ in range(50):
            data = self._call(
                session, "GET", url, params={**query, **({"pageToken": token} if token else {})}, absolute=True
            )
            rows += [row for row in (data or {}).get(key) or () if isinstance(row, dict)]
            token = str((data or {}).get("nextPageToken") or "")
            if not token:
                break
        return rows

    def _url(self, path: str, *, absolute: bool) -> str:
        # Three APIs on three hosts: every call names its whole address.
        return path


def register() -> None:
    adapter_register(GoogleBusinessAdapter())
