"""Polling one google_lsa source: its new leads, then their new messages.

Each stream (`leads`, `conversations`) keeps its own cursor
(crm.models.PollCursor): the newest creation (or event) time read, as Google
writes it. A page is read from Google with no transaction open; then, in one
transaction that holds the cursor row locked, every row read is stored as
its own InboundEvent — the intake loop processes it like any webhook's — and
the cursor moves. So the cursor never runs ahead of what is stored (a crash,
a refused call or a restart resumes at the last committed page), and two
pollers of one source (an overlapping run, a second cluster) queue on the
lock: the second finds the first's rows stored and stores none again (the
events' unique provider id decides), and the cursor never moves back.

Each read starts OVERLAP before the cursor: Google's reporting tables are
eventually consistent, so a lead may appear a little after a newer one did;
what is read twice is a duplicate and costs nothing. The first read of a
source starts OVERLAP before now: turning a source on does not capture (and
acknowledge) people who asked days ago.

A refused call stores nothing and leaves the cursors where they are; a
refusal a person must fix (the credentials, the account's access, a missing
customer id) is counted as a rejected delivery for the source, visible beside
refused webhooks, and logged.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.capture.intake import event_accept, rejection_count
from agents.capture.providers.google_lsa import api, rows
from agents.capture.webhooks import body_digest
from crm.models import InboundEvent, PollCursor, Provider, Source
from crm.services.inbound_handlers import MalformedPayload

log = logging.getLogger(__name__)

OVERLAP = timedelta(minutes=5)
# Rows per read. A full page is followed by another at once, up to
# MAX_PAGES a run (the next run goes on). More than PAGE rows inside one
# OVERLAP would be read again and again: far beyond one account's leads.
PAGE = 500
MAX_PAGES = 4
LEAD = "lead"
CONVERSATION = "conversation"


@dataclass(frozen=True)
class Stream:
    cursor: str  # the PollCursor's name
    kind: str  # the stored events' kind
    resource: str
    time_field: str
    fields: tuple[str, ...]

    def query(self, since: str) -> str:
        columns = ", ".join(f"{self.resource}.{f}" for f in self.fields)
        at = f"{self.resource}.{self.time_field}"
        where = f"{at} >= '{since}'"  # GAQL, not SQL: `since` is the cursor's time, checked to be one
        return f"SELECT {columns} FROM {self.resource} WHERE {where} ORDER BY {at} LIMIT {PAGE}"  # noqa: S608


LEADS = Stream(
    "leads",
    LEAD,
    "local_services_lead",
    "creation_date_time",
    (
        "resource_name",
        "id",
        "category_id",
        "service_id",
        "contact_details",
        "lead_type",
        "lead_status",
        "creation_date_time",
        "locale",
        "lead_charged",
        "campaign",
    ),
)
CONVERSATIONS = Stream(
    "conversations",
    CONVERSATION,
    "local_services_lead_conversation",
    "event_date_time",
    (
        "resource_name",
        "id",
        "conversation_channel",
        "participant_type",
        "lead",
        "event_date_time",
        "message_details",
    ),
)
STREAMS = (LEADS, CONVERSATIONS)


@dataclass
class PollRun:
    """What one poll of a source did."""

    read: int = 0
    stored: int = 0
    failed: int = 0  # stored already failed: rows we could not read
    duplicates: int = 0
    error: str = ""


def _start(stream: Stream, source: Source, now: datetime) -> PollCursor:
    zone = rows.account_zone(source)
    first = (now.astimezone(zone) - OVERLAP).strftime(rows.TIME_FORMAT)
    cursor, _ = PollCursor.objects.get_or_create(source=source, name=stream.cursor, defaults={"value": first})
    return cursor


def _since(value: str, now: datetime, source: Source) -> str:
    if not rows.time_valid(value):
        # A hand-edited cursor: start again as a new source does.
        return (now.astimezone(rows.account_zone(source)) - OVERLAP).strftime(rows.TIME_FORMAT)
    # Wall-clock arithmetic in the account's zone, as Google compares the strings.
    return (datetime.strptime(value, rows.TIME_FORMAT).replace(tzinfo=UTC) - OVERLAP).strftime(rows.TIME_FORMAT)


@dataclass(frozen=True)
class Read:
    external_id: str
    body: bytes
    at: str  # the row's time, "" when unreadable
    malformed: str


def _read(stream: Stream, row: dict[str, Any], source: Source) -> Read:
    # The row as Google sent it (its JSON form), in a stable order.
    body = json.dumps(row, sort_keys=True, ensure_ascii=False).encode()
    resource = row.get(stream.resource)
    name = resource.get("resource_name") if isinstance(resource, dict) else None
    external_id = name if isinstance(name, str) and name else body_digest(body)
    at = resource.get(stream.time_field) if isinstance(resource, dict) else None
    malformed = ""
    try:
        if stream is LEADS:
            rows.lead_read(row, rows.account_zone(source))
        else:
            rows.conversation_read(row, rows.account_zone(source))
    except MalformedPayload as exc:
        malformed = str(exc)
    return Read(external_id, body, at if isinstance(at, str) and rows.time_valid(at) else "", malformed)


def _page(source: Source, stream: Stream, run: PollRun, now: datetime) -> bool:
    """Read one page and store it; whether the page was full."""
    cursor = _start(stream, source, now)
    found = api.search(source, stream.query(_since(cursor.value, now, source)))
    run.read += len(found)
    reads = [_read(stream, row, source) for row in found]
    with transaction.atomic():
        locked = PollCursor.objects.select_for_update().get(pk=cursor.pk)
        stored = set(
            InboundEvent.objects.filter(
                provider=Provider.GOOGLE_LSA, accepted_by=source, external_id__in=[r.external_id[:200] for r in reads]
            ).values_list("external_id", flat=True)
        )
        newest = locked.value if rows.time_valid(locked.value) else ""
        for read in reads:
            newest = max(newest, read.at)
            if read.external_id[:200] in stored:
                run.duplicates += 1
                continue
            accepted = event_accept(
                provider=Provider.GOOGLE_LSA,
                external_id=read.external_id,
                body=read.body,
                headers={"Poller": f"google_lsa:{stream.cursor}"},
                source=source,
                kind=stream.kind,
                status=InboundEvent.Status.FAILED if read.malformed else InboundEvent.Status.RECEIVED,
                error=f"malformed payload: {read.malformed}" if read.malformed else "",
            )
            stored.add(read.external_id[:200])
            if accepted.duplicate:
                run.duplicates += 1
            elif read.malformed:
                run.failed += 1
            else:
                run.stored += 1
        # Saved even when unmoved: `updated_at` says when it was last read.
        locked.value = newest or locked.value
        locked.save(update_fields=["value", "updated_at"])
    return len(found) >= PAGE


def source_poll(source: Source, *, now: datetime | None = None) -> PollRun:
    """Read the source's new leads, then their new messages, and store each
    as an InboundEvent; Google's refusal ends the poll (what was stored stays).
    Runs outside any transaction: each page's store is its own."""
    now = now or timezone.now()
    run = PollRun()
    try:
        for stream in STREAMS:
            for _ in range(MAX_PAGES):
                if not _page(source, stream, run, now):
                    break
    except (api.AccountNotReady, api.Refused) as exc:
        run.error = str(exc)
        fix = isinstance(exc, api.AccountNotReady) or exc.access
        if fix:
            rejection_count(
                provider=Provider.GOOGLE_LSA, source=source, reason=f"poll refused: {exc}"[:200], remote_addr=None
            )
        log.warning("google_lsa source %s: the poll stopped: %s", source.key, exc)
    return run
