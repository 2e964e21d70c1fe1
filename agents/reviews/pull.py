"""Reviews in: the business's Google reviews read back, kept, and matched to
the customer who was asked for one.

- The location: one per business. The first pull lists the profile's
  locations; exactly one is kept at once, several wait for an owner to pick
  one on the reviews page (`location_choose`). It is kept on the
  connection, in its `cursors` under `reviews` (with when it was last read),
  beside the streams the sync engine reads for other providers.
- `reviews_pull` reads every page of the location's reviews (the network
  outside any transaction), then upserts each review in its own short
  transaction: one row per review (`crm_review_unique_external_id`), so a
  pull read again, or two at once, changes nothing; an edited review
  updates its row; a reply already on Google is recorded as posted, with
  its time. A reply a person is deciding here is left alone until it is
  decided.
- Matching (new reviews only): Google gives a reviewer's display name and
  nothing else, so a review is tied to a contact only when the name, first
  and last, normalised, is one contact's of the business and no other's,
  and that contact's lead was sent a review request within the 60 days
  before the review. Anything less stays unmatched (and still shown).
- Errors are the sync engine's: a refused token is refreshed once, a
  refused grant puts the connection to a person (`reauthorize`, an item for
  the manager), a rate limit sets `throttled_until`; each failure is said on
  the connection (`last_error`).
- `reviews_sweep`, the periodic job: every connected business whose reviews
  were last read PULL_EVERY ago or more, within a time budget.
"""

from __future__ import annotations

import time
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents.reviews.google_business import PROVIDER, GoogleBusinessAdapter, Location
from agents.sync.base import ADAPTERS, Session, SyncError, Throttled
from agents.sync.engine import with_session
from crm.models import Business, Contact, Review, ReviewRequest, SyncConnection
from crm.services.inbound_handlers import RetryLater
from crm.services.receipts import receipt_write

ACTOR = "agent:reviews"
GOOGLE = "google"  # Review.provider
STREAM = "reviews"  # the connection's `cursors` key
PULL_EVERY = timedelta(hours=3)
# A review is matched to a request sent at most this long before it.
MATCH_WINDOW = timedelta(days=60)
# 40 pages of 50: a profile with more reviews than that is read from the newest, the rest next time.
MAX_PAGES = 40
SWEEP_SECONDS = 30.0
STARS = {"ONE": 1, "TWO": 2, "THREE": 3, "FOUR": 4, "FIVE": 5}
NEW, EDITED, SAME = "new", "edited", "same"


class LocationUnchosen(SyncError):
    """The profile has several locations (or none): an owner picks the one
    whose reviews are read, on the reviews page."""


@dataclass(frozen=True)
class PullResult:
    read: int
    new: int
    edited: int
    matched: int


# --- the connection and its location ---------------------------------------------------------------


def connection_of(business: Business) -> SyncConnection | None:
    return SyncConnection.objects.filter(business=business, provider=PROVIDER, member__isnull=True).first()


def location_of(connection: SyncConnection) -> Location | None:
    kept = (connection.cursors or {}).get(STREAM) or {}
    if not kept.get("location"):
        return None
    return Location(str(kept.get("account") or ""), str(kept["location"]), str(kept.get("title") or ""))


def pulled_at(connection: SyncConnection) -> datetime | None:
    """When the location's reviews were last read (or a read found no location to read)."""
    return _moment(((connection.cursors or {}).get(STREAM) or {}).get("pulled_at"))


def location_choices(connection: SyncConnection) -> list[Location]:
    """The locations the last pull found when it could not pick one."""
    kept = (connection.cursors or {}).get(STREAM) or {}
    return [Location(*map(str, row)) for row in kept.get("choices") or () if len(row) == 3]


def _stream_set(connection: SyncConnection, **values: Any) -> None:
    """Set keys of the connection's `reviews` entry in place (the sync
    engine's streams, and any other key, are left as they are in the row)."""
    with transaction.atomic():
        locked = SyncConnection.objects.select_for_update().get(pk=connection.pk)
        cursors = dict(locked.cursors or {})
        cursors[STREAM] = {**(cursors.get(STREAM) or {}), **values}
        SyncConnection.objects.filter(pk=connection.pk).update(cursors=cursors)
    connection.cursors = cursors


def location_choose(connection: SyncConnection, name: str, *, actor: str) -> Location:
    """An owner picked the location whose reviews are read: one of those
    the last pull listed. ValueError for any other."""
    chosen = next((loc for loc in location_choices(connection) if loc.name == name), None)
    if chosen is None:
        raise ValueError(f"{name!r} is not a location of the connected Google account")
    _location_keep(connection, chosen, actor=actor)
    return chosen


def _location_keep(connection: SyncConnection, location: Location, *, actor: str) -> None:
    _stream_set(connection, account=location.account, location=location.name, title=location.title, choices=[])
    receipt_write(
        business=connection.business,
        subject=connection.public_id,
        actor=actor,
        action="reviews.location_chosen",
        after={"account": location.account, "location": location.name, "title": location.title},
    )


# --- reading ------------------------------------------------------------------------------------


def reviews_pull(connection: SyncConnection, *, now: datetime) -> PullResult:
    """Read every review of the connection's location and keep each (see
    the module). Raises the sync engine's errors: a SyncError once said on
    the connection (LocationUnchosen when an owner must pick the location),
    RetryLater for a connection that waits for a person."""
    adapter = ADAPTERS[PROVIDER]
    assert isinstance(adapter, GoogleBusinessAdapter)
    chosen = location_of(connection)

    def read(session: Session) -> tuple[Location, list[dict[str, Any]]]:
        location = chosen
        if location is None:
            found = adapter.locations(session)
            if len(found) != 1:
                # Listed for the owner, and not asked again before the next due pull.
                choices = [[loc.account, loc.name, loc.title] for loc in found]
                _stream_set(connection, choices=choices, pulled_at=now.isoformat())
                many = f"{len(found)} locations" if found else "no location"
                raise LocationUnchosen(f"the Google account has {many}: pick the one whose reviews we read")
            location = found[0]
            _location_keep(connection, location, actor=ACTOR)
        pages: list[dict[str, Any]] = []
        token = ""
        for _ in range(MAX_PAGES):
            page = adapter.reviews_page(session, location, token)
            pages.append(page)
            token = str(page.get("nextPageToken") or "")
            if not token:
                break
        return location, pages

    try:
        location, pages = with_session(connection, read)
    except Throttled as exc:
        _failed(connection, exc, now=now, throttled_until=now + exc.wait)
        raise
    except SyncError as exc:
        # RetryLater passes as it is: the connection waits for a person (and
        # says why already), or another worker is refreshing its tokens.
        _failed(connection, exc, now=now)
        raise
    new = edited = matched = read_count = 0
    for page in pages:
        for data in page.get("reviews") or ():
            if not isinstance(data, dict) or not data.get("name") or not data.get("createTime"):
                continue
            read_count += 1
            review, what = review_upsert(connection.business, data, location=location.parent, now=now)
            new += what == NEW
            edited += what == EDITED
            matched += what == NEW and review.review_request_id is not None
    _stream_set(connection, pulled_at=now.isoformat())
    SyncConnection.objects.filter(pk=connection.pk).update(last_success_at=timezone.now(), last_error="")
    return PullResult(read=read_count, new=new, edited=edited, matched=matched)


def _failed(connection: SyncConnection, exc: Exception, *, now: datetime, **more: Any) -> None:
    SyncConnection.objects.filter(pk=connection.pk).update(
        last_error=f"reviews: {exc}"[:500], last_error_at=now, **more
    )


def _moment(text: Any) -> datetime | None:
    return parse_datetime(str(text)) if text else None


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    """Google's review as our fields."""
    reviewer = data.get("reviewer") or {}
    created = _moment(data.get("createTime"))
    updated = _moment(data.get("updateTime"))
    return {
        "reviewer_name": "" if reviewer.get("isAnonymous") else str(reviewer.get("displayName") or "")[:200],
        "rating": STARS.get(str(data.get("starRating") or "")),
        "comment": str(data.get("comment") or ""),
        "posted_at": created,
        # Google sets updateTime to createTime on a review never edited.
        "edited_at": updated if updated is not None and updated != created else None,
    }


def _reply_read(review: Review, reply: dict[str, Any], now: datetime) -> bool:
    """Google's reply onto the row; whether anything changed. A reply a
    person is deciding here waits for its decision."""
    if review.reply_status == Review.ReplyStatus.PENDING_APPROVAL:
        return False
    comment = str(reply.get("comment") or "")
    if comment:
        at = _moment(reply.get("updateTime")) or now
        if (review.reply_status, review.reply_body, review.reply_posted_at) == (Review.ReplyStatus.POSTED, comment, at):
            return False
        review.reply_status, review.reply_body, review.reply_posted_at = Review.ReplyStatus.POSTED, comment, at
        review.reply_error = ""
        return True
    if review.reply_status == Review.ReplyStatus.POSTED:
        # Deleted on Google: no reply shows there now.
        review.reply_status, review.reply_posted_at = Review.ReplyStatus.NONE, None
        return True
    return False


@transaction.atomic
def review_upsert(business: Business, data: dict[str, Any], *, location: str = "", now: datetime) -> tuple[Review, str]:
    """One review as Google answers it, kept: inserted (and matched, with a
    `review.received` receipt), updated when edited there (`review.edited`),
    or left as it is. Returns the row and which of NEW, EDITED, SAME. One
    transaction, the review's row locked."""
    name = str(data["name"])
    fields = _fields(data)
    reply = data.get("reviewReply") or {}
    review = Review.objects.select_for_update().filter(business=business, provider=GOOGLE, external_id=name).first()
    if review is None:
        review = Review(
            business=business, provider=GOOGLE, external_id=name, location=location, fetched_at=now, **fields
        )
        _reply_read(review, reply, now)
        request = review_match(business, review.reviewer_name, review.posted_at)
        if request is not None:
            review.contact_id, review.lead_id, review.review_request = request.contact_id, request.lead_id, request
        try:
            with transaction.atomic():
                review.save(force_insert=True)
        except IntegrityError:
            # Another pull inserted it between our read and our insert: it is kept.
            return Review.objects.get(business=business, provider=GOOGLE, external_id=name), SAME
        receipt_write(
            business=business,
            lead=review.lead,
            subject=review.public_id,
            actor=ACTOR,
            action="review.received",
            reason=f"matched to {request.public_id}" if request is not None else "not matched to a request",
            after={"external_id": name, "rating": review.rating, "reply": review.reply_status},
        )
        return review, NEW
    before = {"rating": review.rating, "edited_at": review.edited_at}
    edited = any(getattr(review, key) != fields[key] for key in ("reviewer_name", "rating", "comment", "edited_at"))
    for key in ("reviewer_name", "rating", "comment", "edited_at"):
        setattr(review, key, fields[key])
    replied = _reply_read(review, reply, now)
    review.fetched_at = now
    review.save(
        update_fields=[
            "reviewer_name",
            "rating",
            "comment",
            "edited_at",
            "reply_status",
            "reply_body",
            "reply_posted_at",
            "reply_error",
            "fetched_at",
        ]
    )
    if edited or replied:
        receipt_write(
            business=business,
            lead=review.lead,
            subject=review.public_id,
            actor=ACTOR,
            action="review.edited" if edited else "review.reply_read",
            reason="changed on Google" if edited else f"the reply on Google is {review.reply_status or 'gone'}",
            before=before,
            after={"rating": review.rating, "edited_at": review.edited_at, "reply": review.reply_status},
        )
    return review, EDITED if edited else SAME


# --- matching ----------------------------------------------------------------------------------------


def name_key(text: str) -> str:
    """A name as compared: accents, case, punctuation and spacing aside."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    words = "".join(c if c.isalnum() else " " for c in plain.casefold()).split()
    return " ".join(words)


def review_match(business: Business, reviewer_name: str, posted_at: datetime | None) -> ReviewRequest | None:
    """The request whose customer wrote this review, when the name says so
    beyond doubt (see the module); None otherwise."""
    key = name_key(reviewer_name)
    if posted_at is None or len(key.split()) < 2:
        return None  # a first name alone, or no name (anonymous), names nobody
    requests = (
        ReviewRequest.objects.filter(
            business=business,
            status=ReviewRequest.Status.SENT,
            sent_at__lte=posted_at,
            sent_at__gte=posted_at - MATCH_WINDOW,
        )
        .select_related("contact")
        .order_by("-sent_at", "-pk")
    )
    found = [r for r in requests if name_key(f"{r.contact.first_name} {r.contact.last_name}") == key]
    if not found or len({r.contact_id for r in found}) > 1:
        return None
    contact = found[0].contact
    namesakes = Contact.objects.filter(
        business=business, merged_into__isnull=True, last_name__iexact=contact.last_name.strip()
    ).exclude(pk=contact.pk)
    if any(name_key(f"{c.first_name} {c.last_name}") == key for c in namesakes):
        return None  # two customers of that name: which one wrote it is a guess
    return found[0]


# --- the periodic job ---------------------------------------------------------------------------------


def _due(connection: SyncConnection, now: datetime) -> bool:
    if connection.throttled_until is not None and connection.throttled_until > now:
        return False
    pulled = pulled_at(connection)
    return pulled is None or pulled <= now - PULL_EVERY


def reviews_sweep(*, now: datetime | None = None, seconds: float = SWEEP_SECONDS) -> dict[str, int]:
    """Each connected business's reviews read when due, until `seconds`
    have passed (the next run takes the rest). One business's failure is
    said on its connection and stops no other."""
    at = now or timezone.now()
    started = time.monotonic()
    counts = {"pulled": 0, "failed": 0, "new": 0}
    connections = SyncConnection.objects.select_related("business").filter(
        provider=PROVIDER, member__isnull=True, status=SyncConnection.Status.ACTIVE
    )
    for connection in connections.order_by("pk"):
        if time.monotonic() - started > seconds:
            break
        if not _due(connection, at):
            continue
        try:
            result = reviews_pull(connection, now=at)
        except (SyncError, RetryLater):
            counts["failed"] += 1
            continue
        counts["pulled"] += 1
        counts["new"] += result.new
    return counts
