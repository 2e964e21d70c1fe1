"""What a sync adapter is, and the shapes the engine and adapters share.

An adapter speaks one provider's API and nothing else: its OAuth (the
authorize URL, code and refresh-token exchanges), its webhooks (`verify` the
signature of the raw bytes, read a `Notice` from the body), `pull` (one
record of theirs, or the page of records changed since a cursor) and `push`
(a person, a booking). It translates their records into `Remote`s in our
vocabulary — kinds client, request, estimate, job, visit, invoice, payment;
statuses our records use; money as a Decimal — so that the engine
(agents/sync/engine.py) owns everything else: the links, idempotency,
cursors, the conflict rule, receipts and the connection's status. A new
provider (Housecall Pro, a calendar) is one more adapter class.

Errors say what the engine does next: `Throttled` waits the time the
provider needs to restore its budget; `TokenExpired` refreshes the tokens
once and tries again; `AuthRefused` stops the connection for a person;
`Refused` fails the change for a person; any other `SyncError` is a
passing failure, tried again with backoff.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

import requests

from crm.models import SyncConnection
from crm.registry import Registry

# Our kinds, in the order a record's parents come before it.
CLIENT, REQUEST, ESTIMATE, JOB, VISIT, INVOICE, PAYMENT = (
    "client",
    "request",
    "estimate",
    "job",
    "visit",
    "invoice",
    "payment",
)
KINDS = (CLIENT, REQUEST, ESTIMATE, JOB, VISIT, INVOICE, PAYMENT)


class SyncError(Exception):
    """A passing failure (network, 5xx): the change is tried again later.
    The message never holds a token."""


class Throttled(SyncError):
    """The provider's rate limit: nothing more is asked for `wait`."""

    def __init__(self, message: str, *, wait: timedelta) -> None:
        super().__init__(message)
        self.wait = wait


class TokenExpired(SyncError):
    """The access token was refused: refresh it and try once more."""


class AuthRefused(SyncError):
    """The provider refused our credentials for good (a revoked grant, a
    refused refresh token): a person must connect again."""


class Refused(SyncError):
    """The provider refused this change for good (a validation error)."""


@dataclass(frozen=True)
class Tokens:
    access_token: str
    refresh_token: str
    expires_at: datetime | None


@dataclass(frozen=True)
class Account:
    id: str
    name: str


@dataclass(frozen=True)
class Remote:
    """One record of theirs in our vocabulary. `version` is theirs (an
    updatedAt) and orders what we read; `fields` are named and valued as our
    records are (see each kind's mapper in agents/sync/apply.py); `refs`
    names their related records by our kind (`{"job": …, "client": …}`)."""

    kind: str
    external_id: str
    version: str
    fields: dict[str, Any]
    refs: dict[str, str] = field(default_factory=dict)
    # Deleted there (a calendar's changes list its deleted events too).
    gone: bool = False


@dataclass(frozen=True)
class Page:
    items: list[Remote]
    cursor: str = ""  # where the next page starts
    more: bool = False
    # The stream's next `since` when the provider names it (a calendar's
    # sync token) rather than the newest version read.
    since: str = ""


@dataclass(frozen=True)
class PullAsk:
    """One record (`external_id`), or the records of `kind` changed after
    `since` (their time), from the page at `after`."""

    kind: str
    external_id: str = ""
    since: str = ""
    after: str = ""


@dataclass(frozen=True)
class PushPerson:
    record: str  # our contact's public id
    first_name: str
    last_name: str
    emails: tuple[str, ...]
    phones: tuple[str, ...]
    address: str = ""


@dataclass(frozen=True)
class PushBooking:
    record: str  # our lead's public id: one request of theirs per lead
    client_id: str
    title: str
    starts_at: datetime
    ends_at: datetime
    location: str = ""
    notes: str = ""
    link: str = ""  # the lead's thread in LeadOps


@dataclass(frozen=True)
class Channel:
    """A calendar's push channel: Google's watch channel, Microsoft's
    subscription. `token` comes back with every notification."""

    id: str
    token: str
    resource_id: str
    expires_at: datetime


@dataclass(frozen=True)
class Pushed:
    external_id: str
    version: str = ""


@dataclass(frozen=True)
class Notice:
    """What one webhook says: a record of theirs changed (`kind`,
    `external_id`), was deleted, or the account removed our app."""

    account_id: str
    topic: str
    kind: str
    external_id: str
    occurred_at: str
    deleted: bool = False
    disconnected: bool = False


@dataclass
class Session:
    """One connection's authenticated use of the provider's API."""

    connection: SyncConnection
    access_token: str
    http: requests.Session


class SyncAdapter(ABC):
    provider: ClassVar[str]
    name: ClassVar[str]
    # The kinds the reconcile loop reads, parents first.
    pulls: ClassVar[tuple[str, ...]]
    # The changes of ours it takes (crm.services.sync.BOOKING).
    pushes: ClassVar[frozenset[str]]
    # What a person and a booking of ours become there (None: not pushed).
    person_kind: ClassVar[str | None] = CLIENT
    booking_kind: ClassVar[str] = REQUEST
    # Its webhooks: the topics processed (any other is stored, ignored) and
    # the header that carries the signature.
    topics: ClassVar[tuple[str, ...]] = ()
    signature_header: ClassVar[str] = ""
    # A calendar: one team member's, connected by them (SyncConnection.member).
    per_member: ClassVar[bool] = False
    # How an owner connects it: "oauth" (consent, a code, refreshed tokens)
    # or "api_key" (a key pasted in the back office: it never expires, so
    # one refused is a person's to replace, never a refresh).
    connects_with: ClassVar[str] = "oauth"

    # -- OAuth (an API-key adapter has none: asked, it refuses)
    def authorize_url(self, *, redirect_uri: str, state: str) -> str:
        raise Refused(f"{self.name} connects with an API key, not OAuth")

    def tokens_exchange(self, *, code: str, redirect_uri: str) -> Tokens:
        raise Refused(f"{self.name} connects with an API key, not OAuth")

    def tokens_refresh(self, refresh_token: str) -> Tokens:
        raise AuthRefused(f"{self.name}'s API key cannot be refreshed: a person pastes a new one")

    @abstractmethod
    def account(self, session: Session) -> Account: ...

    # -- webhooks
    @abstractmethod
    def verify(self, body: bytes, headers: Mapping[str, str]) -> bool:
        """Whether these exact bytes carry the provider's signature."""

    @abstractmethod
    def notice(self, data: dict[str, Any]) -> Notice:
        """What a verified webhook says; MalformedPayload when it cannot be read."""

    # -- records
    @abstractmethod
    def pull(self, session: Session, ask: PullAsk) -> Page:
        """One record (none in the page: it is gone), or a page of changed ones."""

    @abstractmethod
    def push(self, session: Session, item: PushPerson | PushBooking) -> Pushed:
        """Find or create the person or booking there; its id. Find first:
        a retry after an answer we lost must not make a second one."""

    # -- a booking moved or canceled here (calendars)
    def move(self, session: Session, external_id: str, item: PushBooking) -> Pushed:
        """Their booking `external_id` set to the new time of ours."""
        raise Refused(f"{self.name} takes no moved bookings")

    def remove(self, session: Session, external_id: str) -> None:
        """Their booking deleted; one already gone is not an error."""
        raise Refused(f"{self.name} takes no canceled bookings")

    # -- a person's calendar (per_member adapters)
    hook_path: ClassVar[str] = ""  # where its notifications come (`hooks/…/`)

    def busy(self, session: Session, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
        """The busy blocks of the calendar between `start` and `end`, in UTC."""
        raise Refused(f"{self.name} has no busy times")

    def watch(self, session: Session, *, address: str, current: Channel | None) -> Channel:
        """A push channel to `address` for the calendar's events, made or
        renewed (`current`: the one that is about to expire)."""
        raise Refused(f"{self.name} has no push channels")


# provider -> its adapter, filled at startup (agents.sync.engine.register).
ADAPTERS: Registry[SyncAdapter] = Registry("sync adapter")
