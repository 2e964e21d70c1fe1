"""What the simulator's parts share: what a delivery is meant to be, what the
server should store for it, one post and one job of posts, and how answers
are counted; what the simulator knows of the business and the people it
invents, and `Builder`, one provider's deliveries. The phases (bookings,
estimates, payments) and the providers' builders outside core (calls,
marketplaces) build on this module; core, which runs them, imports them."""

from __future__ import annotations

import json
import random
import string
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

# What a delivery is meant to be.
LEAD = "lead"  # a person's first touch, or another channel of a known person
REPLY = "reply"  # a person writing again (SMS, DM)
CALL_STATUS = "call_status"  # the no-answer status that makes a call a missed call
DUPLICATE = "duplicate"  # the exact bytes of an earlier delivery, again
MALFORMED = "malformed"  # correctly signed, but not a readable body
BAD_SIGNATURE = "bad_signature"  # a wrong signature, key or CSRF token
HONEYPOT = "honeypot"  # a bot filling the hosted form's hidden field

# What the server is expected to store for a delivery.
STORES_NEW = "new"  # one new InboundEvent
STORES_SAME = "same"  # nothing new: the event of the earlier identical delivery
STORES_FAILED = "failed"  # one InboundEvent that ends `failed` (kept for inspection and replay)
STORES_NONE = "none"  # nothing

OK = frozenset({200})
REFUSED = frozenset({401, 403})
# A signed body the server cannot read: refused with a 4xx, or acknowledged
# (Meta and Typeform retry or disable a webhook on errors) — stored failed either way.
UNREADABLE = frozenset({200, 400, 422})
HOSTED_RATE_LIMITED = 429


@dataclass
class Post:
    """One HTTP POST (the hosted form GETs its page first) and what it should get."""

    builder: str
    intent: str
    path: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    expect: frozenset[int] = OK
    stores: str = STORES_NEW
    event_provider: str = ""
    person: int | None = None
    label: str = ""
    # The hosted form: the fields a person fills in; the page's CSRF token and
    # nonce are added after the GET. `csrf=False` posts without cookie or token.
    form: dict[str, str] | None = None
    csrf: bool = True
    # Re-send the previous post of the same job byte for byte (a double submit).
    repeat_previous: bool = False
    # Builds (body, headers) when sent, from what exists by then (a payment
    # names the lead the server created from the person's earlier posts).
    prepare: Callable[[], tuple[bytes, dict[str, str]]] | None = None
    # Builds the path when sent (given the server's base URL), for an id
    # known only then (an estimate's, read from the server's API).
    route: Callable[[str], str] | None = None


@dataclass
class Job:
    """Posts sent in order on one HTTP session (one browser, for the hosted form)."""

    phase: int
    posts: list[Post]


class PostNotReady(Exception):
    """What a post needs did not appear on the server in time (reported as no answer)."""

    status = 0


def counts_text(statuses: Iterable[int]) -> str:
    """HTTP statuses and how often each came: "200×12 401×1"."""
    return " ".join(f"{s or 'no answer'}×{n}" for s, n in sorted(Counter(statuses).items()))


@dataclass(frozen=True)
class SourceInfo:
    key: str
    provider: str
    secret: str
    config: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass
class SimContext:
    business_slug: str
    business_name: str
    region: str
    sources: dict[str, list[SourceInfo]]  # by provider, active ones, sorted by key
    meta_app_secret: str = ""
    twilio_auth_token: str = ""
    twilio_account_sid: str = ""
    # Stripe payments and refunds are posted only when the server can verify them.
    stripe_webhook_secret: str = ""
    # Twilio signs the URL it was configured with: PUBLIC_BASE_URL + path.
    public_base_url: str = "http://127.0.0.1:8000"
    # The business's own numbers (its lines, its team): never a simulated person.
    reserved_phones: frozenset[str] = frozenset()
    # A team member's API token: estimates (which have no webhook) are written
    # through the API as a person's tool would, only when one is given.
    api_token: str = ""


AREA_CODES: tuple[tuple[str, str, str, str], ...] = (
    ("312", "CHICAGO", "IL", "60601"),
    ("773", "CHICAGO", "IL", "60614"),
    ("872", "CHICAGO", "IL", "60640"),
    ("630", "NAPERVILLE", "IL", "60540"),
    ("708", "OAK LAWN", "IL", "60453"),
    ("847", "EVANSTON", "IL", "60201"),
    ("212", "NEW YORK", "NY", "10001"),
    ("415", "SAN FRANCISCO", "CA", "94105"),
    ("617", "BOSTON", "MA", "02108"),
    ("202", "WASHINGTON", "DC", "20001"),
    ("303", "DENVER", "CO", "80202"),
    ("305", "MIAMI", "FL", "33131"),
    ("404", "ATLANTA", "GA", "30303"),
    ("512", "AUSTIN", "TX", "78701"),
    ("602", "PHOENIX", "AZ", "85004"),
    ("206", "SEATTLE", "WA", "98101"),
    ("213", "LOS ANGELES", "CA", "90012"),
    ("313", "DETROIT", "MI", "48226"),
    ("414", "MILWAUKEE", "WI", "53202"),
    ("612", "MINNEAPOLIS", "MN", "55401"),
    ("615", "NASHVILLE", "TN", "37203"),
    ("713", "HOUSTON", "TX", "77002"),
    ("214", "DALLAS", "TX", "75201"),
    ("215", "PHILADELPHIA", "PA", "19107"),
    ("216", "CLEVELAND", "OH", "44113"),
    ("503", "PORTLAND", "OR", "97204"),
    ("504", "NEW ORLEANS", "LA", "70112"),
    ("801", "SALT LAKE CITY", "UT", "84111"),
    ("919", "RALEIGH", "NC", "27601"),
    ("317", "INDIANAPOLIS", "IN", "46204"),
)


@dataclass(frozen=True)
class Person:
    number: int  # 1-based, for labels
    first_name: str
    last_name: str
    phone: str  # E.164; "" for someone known only by an Instagram id
    email: str  # lower case; channels vary its case
    postal_code: str
    service: str
    request: str
    area: tuple[str, str, str, str] = AREA_CODES[0]
    igsid: str = ""
    is_google_test: bool = False

    @property
    def name(self) -> str:
        return f"{self.first_name} {self.last_name}"


@dataclass
class Plan:
    seed: int
    people: list[Person]
    jobs: list[Job]
    builders: list[str]
    skipped: dict[str, str]
    graph_leads: dict[str, dict[str, Any]] = field(default_factory=dict)
    graph_tokens: set[str] = field(default_factory=set)
    # Each person's channels (builder names) in order, by person number.
    channels: dict[int, list[str]] = field(default_factory=dict)

    @property
    def posts(self) -> list[Post]:
        return [post for job in self.jobs for post in job.posts]


class Ids:
    """Provider-shaped ids, from the plan's random generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def digits(self, n: int) -> str:
        return str(self.rng.randint(1, 9)) + "".join(self.rng.choice(string.digits) for _ in range(n - 1))

    def token(self, n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    def sid(self, prefix: str) -> str:
        return prefix + f"{self.rng.getrandbits(128):032x}"


def iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def compact(data: Any) -> bytes:
    # Providers send compact JSON with non-ASCII escaped (\u00e9), which is
    # what Meta signs; json.dumps does the same by default.
    return json.dumps(data, separators=(",", ":")).encode()


class Builder(ABC):
    """One provider: which source it needs and how its deliveries look."""

    name = ""
    source_provider = ""
    event_provider = ""
    needs_setting = ""  # a setting without which the server refuses everything
    carries_phone = True  # may be one of a person's several channels

    def __init__(self, ctx: SimContext, rng: random.Random, plan: Plan) -> None:
        self.ctx, self.rng, self.plan, self.ids = ctx, rng, plan, Ids(rng)

    def unavailable(self) -> str:
        """Why this builder cannot run against the business ("" when it can)."""
        if not self.ctx.sources.get(self.source_provider):
            return f"no active {self.source_provider} source"
        if self.needs_setting and not getattr(self.ctx, self.needs_setting.lower()):
            return f"{self.needs_setting} is not set (the server refuses every delivery without it)"
        return ""

    def source(self) -> SourceInfo:
        return self.rng.choice(self.ctx.sources[self.source_provider])

    def post(self, intent: str, path: str, body: bytes, headers: dict[str, str], **kw: Any) -> Post:
        return Post(self.name, intent, path, body, headers, event_provider=self.event_provider, **kw)

    @abstractmethod
    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        """A person reaching the business here (`nth` 0: their first channel)."""

    def reply(self, person: Person, at: datetime, phase: int) -> list[Job]:
        return []

    @abstractmethod
    def malformed(self, at: datetime, phase: int) -> Job:
        """A correctly signed body the server cannot read (meant to fail)."""

    @abstractmethod
    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        """A delivery the server must refuse (meant to fail)."""

    def extra_noise(self, stranger: Person, at: datetime) -> list[Job]:
        return []

    def duplicate(self, job: Job) -> Job | None:
        """The same bytes again, one phase later (a provider's retry)."""
        originals = [p for p in job.posts if p.intent in (LEAD, REPLY, CALL_STATUS) and p.form is None]
        if not originals:
            return None
        original = originals[-1]
        return Job(job.phase + 1, [replace(original, intent=DUPLICATE, stores=STORES_SAME, label=original.label)])
