"""What the simulator's parts share: what a delivery is meant to be, what the
server should store for it, one post and one job of posts, and how answers
are counted. The phases (bookings, estimates, payments) build on this module;
core, which runs them, imports them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

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
