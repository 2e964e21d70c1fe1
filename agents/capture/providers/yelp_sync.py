"""Yelp's periodic work (the `leadops.yelp_sync` job) and its subscription.

- The daily resync: Yelp's webhooks are best effort, so once a day per
  source the business's lead ids are listed (`GET {YELP_API_URL}/v3/
  businesses/<business_id>/lead_ids`) and each lead we do not hold, or hold
  open, is stored as a `lead_sync` event (one per lead and day), read by the
  intake loop exactly as a notification is (agents/capture/providers/
  yelp.py): a missed lead or message is recorded, nothing twice. Its
  `PollCursor` (`yelp_resync`) holds when the last resync began; claiming
  it is a conditional UPDATE, so two clusters never resync one source at
  once, and a resync Yelp did not answer hands the day back.
- Marking read: Yelp asks that a lead be marked read only once a person
  read it. A person reading a thread in the workspace records a
  ConversationRead; each one since the `yelp_read` cursor, for a lead with
  a Yelp thread and a message from the person on or before it, becomes
  `POST /v3/leads/<lead_id>/mark_as_read`. The cursor moves only past what
  Yelp took, so a failure is tried again on the next run.
- `yelp_subscribe`: Yelp sends webhooks only for the businesses a partner
  subscribed (`POST /v3/businesses/subscriptions`), with the partner's API
  key: the source's `secret`, else its access token.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents.capture.intake import event_accept
from agents.capture.providers.yelp import BUSINESS_KEY, LEAD_SYNC, YelpError, sync_event_id, yelp_get
from agents.outbound.marketplace import ThreadOutcome, thread_post
from crm.models import CLOSED_STAGES, ConversationRead, LeadTouch, Message, PollCursor, Provider, Source

RESYNC_EVERY = timedelta(hours=24)
RESYNC_CURSOR = "yelp_resync"
READ_CURSOR = "yelp_read"
LEAD_IDS_PAGE = 20
# Leads listed per resync (Yelp lists the newest first): older ones are settled.
RESYNC_MAX = 200
READ_BATCH = 20


def _api(path: str) -> str:
    return f"{settings.YELP_API_URL.rstrip('/')}/v3/{path}"


def yelp_sources() -> list[Source]:
    return list(
        Source.objects.select_related("business")
        .filter(provider=Provider.YELP, is_active=True)
        .exclude(page_token="")
        .order_by("pk")
    )


def yelp_sync(*, now: datetime | None = None) -> dict[str, int]:
    """One run of the job: every source's marks read, then the resyncs due."""
    now = now or timezone.now()
    counts = {"marked_read": 0, "resynced_sources": 0, "leads_stored": 0, "failed": 0}
    for source in yelp_sources():
        if not str(source.config.get(BUSINESS_KEY) or ""):
            continue
        marked, ok = reads_mark(source, now=now)
        counts["marked_read"] += marked
        counts["failed"] += not ok
        stored = lead_resync(source, now=now)
        if stored is not None:
            counts["resynced_sources"] += 1
            counts["leads_stored"] += stored
    return counts


# --------------------------------------------------------------- the resync


def _cursor(source: Source, name: str) -> PollCursor:
    return PollCursor.objects.get_or_create(source=source, name=name)[0]


def _at(value: str) -> datetime | None:
    parsed = parse_datetime(value) if value else None
    return parsed if parsed is not None and timezone.is_aware(parsed) else None


def lead_resync(source: Source, *, now: datetime) -> int | None:
    """Store a `lead_sync` event for each listed lead we do not hold, or
    hold open; returns how many were new, or None when no resync was due
    (or another run holds it, or Yelp did not answer)."""
    cursor = _cursor(source, RESYNC_CURSOR)
    last = _at(cursor.value)
    if last is not None and now - last < RESYNC_EVERY:
        return None
    # The claim: a second run read the same old value and changes nothing.
    if not PollCursor.objects.filter(pk=cursor.pk, value=cursor.value).update(value=now.isoformat()):
        return None
    business_id = str(source.config[BUSINESS_KEY])
    try:
        lead_ids = _lead_ids(source, business_id)
    except YelpError:
        # Not a day lost: the next run tries again.
        PollCursor.objects.filter(pk=cursor.pk, value=now.isoformat()).update(value=cursor.value)
        return None
    touches = LeadTouch.objects.filter(business_id=source.business_id, provider=Provider.YELP, thread_id__in=lead_ids)
    settled = set(touches.filter(lead__stage__in=CLOSED_STAGES).values_list("thread_id", flat=True))
    held_open = set(touches.exclude(lead__stage__in=CLOSED_STAGES).values_list("thread_id", flat=True))
    day = now.date().isoformat()
    stored = 0
    for lead_id in lead_ids:
        if lead_id in settled and lead_id not in held_open:
            continue
        body = json.dumps({"business_id": business_id, "lead_id": lead_id, "resync": day}).encode()
        accepted = event_accept(
            provider=Provider.YELP,
            external_id=sync_event_id(lead_id, day),
            body=body,
            headers={},
            source=source,
            kind=LEAD_SYNC,
        )
        stored += not accepted.duplicate
    return stored


def _lead_ids(source: Source, business_id: str) -> list[str]:
    ids: list[str] = []
    while len(ids) < RESYNC_MAX:
        page = yelp_get(
            source, _api(f"businesses/{business_id}/lead_ids"), {"limit": LEAD_IDS_PAGE, "offset": len(ids)}
        )
        listed = page.get("lead_ids") if isinstance(page, dict) else None
        if not isinstance(listed, list):
            raise YelpError("Yelp answered lead_ids in an unexpected shape")
        ids.extend(str(i) for i in listed if isinstance(i, str | int) and str(i))
        if not listed or not page.get("has_more"):
            break
    return list(dict.fromkeys(ids))[:RESYNC_MAX]


# ------------------------------------------------------------ marking read


def reads_mark(source: Source, *, now: datetime) -> tuple[int, bool]:
    """Mark read at Yelp the source's threads a person read since the
    cursor; (how many, whether Yelp took every one)."""
    cursor = _cursor(source, READ_CURSOR)
    since = _at(cursor.value) or source.created_at
    reads = list(
        ConversationRead.objects.filter(
            lead__business_id=source.business_id,
            read_at__gt=since,
            read_at__lte=now,
            lead__touches__provider=Provider.YELP,
            lead__touches__source=source,
        )
        .exclude(lead__touches__thread_id="")
        .order_by("read_at")
        .values_list("lead_id", "read_at")
        .distinct()[:READ_BATCH]
    )
    marked, done, ok = 0, set(), True
    reached = since
    for lead_id, read_at in reads:
        written = Message.objects.filter(
            lead_id=lead_id, channel=Provider.YELP, direction="in", created_at__lte=read_at
        )
        if lead_id not in done and written.exists():
            threads = LeadTouch.objects.filter(lead_id=lead_id, provider=Provider.YELP, source=source).exclude(
                thread_id=""
            )
            outcomes = [_mark_read(source, thread) for thread in set(threads.values_list("thread_id", flat=True))]
            if any(o.status != "sent" for o in outcomes):
                ok = False
                break
            done.add(lead_id)
            marked += len(outcomes)
        reached = read_at
    if reached != since:
        PollCursor.objects.filter(pk=cursor.pk, value=cursor.value).update(value=reached.isoformat())
    return marked, ok


def _mark_read(source: Source, lead_id: str) -> ThreadOutcome:
    return thread_post(_api(f"leads/{lead_id}/mark_as_read"), token=source.page_token, payload={})


# ------------------------------------------------------------ subscribing


def yelp_subscribe(source: Source) -> ThreadOutcome:
    """Ask Yelp to send this source's business's lead webhooks (Yelp
    answers 202: it subscribes in the background). Makes no database writes."""
    business_id = str(source.config.get(BUSINESS_KEY) or "")
    if not business_id:
        return ThreadOutcome("failed", error="no_business_id", detail=f"source {source.key!r} has no business_id")
    key = source.secret or source.page_token
    if not key:
        return ThreadOutcome(
            "failed", error="no_api_key", detail=f"source {source.key!r} has no secret or access_token"
        )
    return thread_post(
        _api("businesses/subscriptions"),
        token=key,
        payload={"subscription_types": ["WEBHOOK"], "business_ids": [business_id]},
    )
