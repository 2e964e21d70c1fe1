"""The demo shop's connected systems: its Jobber account and Tom's Google
calendar, each a local stand-in in the provider's shape, so the demo shows
the sync at work without an outside account.

`demo_sync_ensure` (run by load_demo, once) connects the demo business to
Jobber and reads what the shop's Jobber holds for Rosa Delgado — the client, the
approved quote, the completed job, the paid invoice and the payment — through
the real adapter and sync engine, against a stand-in started for the load.
It connects Tom (the technician) to his Google calendar too, where a dentist
appointment and a parts pickup on the next two weekdays are busy: the engine
reads the busy times and opens the push channel, and the booking page no
longer offers Tom those two slots. `make run` serves the same stand-ins on
fixed ports (`manage.py standins`; JOBBER_API_URL and the GOOGLE_* bases in
the Makefile's demo settings), so the engine's periodic work keeps talking to
them while the demo runs: the sync page shows connections that work.

The seeded records carry `updatedAt` a month back: a reconcile reads what
changed since the day before the connection was made, so the live loop finds
them applied already and changes nothing.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.test import override_settings
from django.utils import timezone

from agents.sync.base import CLIENT, ESTIMATE, INVOICE, JOB, PAYMENT
from agents.sync.engine import calendar_busy_refresh, calendar_watch, reconcile, sync_pump
from crm.models import Business, SyncConnection, TeamMember
from crm.services.sync import connection_connect, sync_pull_enqueue
from devtools.simulator import google_calendar_api as google
from devtools.simulator.jobber_api import ACCOUNT_ID, CLIENT_ID, CLIENT_SECRET, JobberServer, iso

ACTOR = "load_demo"
JOBBER_PORT = 8769
GOOGLE_PORT = 8770
ACCOUNT_NAME = "Acme Heating & Air (Jobber)"
# The demo connection's tokens, which the stand-in takes as live: an access
# token shaped as Jobber's (a JWT whose `exp` is far off) and a refresh token.
_EXP = int(datetime(2100, 1, 1, tzinfo=UTC).timestamp())


def _part(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


DEMO_JOBBER_ACCESS = ".".join(
    [_part({"alg": "HS256", "typ": "JWT"}), _part({"exp": _EXP, "sub": ACCOUNT_ID}), "ZGVtbw"]
)
DEMO_JOBBER_REFRESH = "demo-jobber-refresh-token-0123456789"
DEMO_GOOGLE_ACCESS = "demo-google-calendar-access-token-0123456789"
DEMO_GOOGLE_REFRESH = "demo-google-calendar-refresh-token-0123456789"
TECHNICIAN = "tom"

# Rosa Delgado of devtools/demo.py: her phone is how Jobber's client finds our contact.
ROSA_PHONE = "+13125550140"
ROSA_TOTAL = Decimal("1450.00")


@dataclass(frozen=True)
class JobberSeed:
    """The Jobber ids of the seeded records, parents first (our kinds)."""

    ids: tuple[tuple[str, str], ...]


def jobber_seed(server: JobberServer, *, now: datetime) -> JobberSeed:
    """What the demo shop's Jobber holds for Rosa Delgado: seen yesterday on
    a visit booked through LeadOps; quoted, worked and paid in Jobber since."""
    server.clock = now - timedelta(days=30)
    total = float(ROSA_TOTAL)
    client = server.add(
        "client", firstName="Rosa", lastName="Delgado", emails=[], phones=[{"number": "(312) 555-0140"}]
    )
    quote = server.add(
        "quote",
        quoteNumber=1042,
        title="Replace sump pump and check valve",
        quoteStatus="approved",
        sentAt=iso(now - timedelta(hours=20)),
        amounts={"total": total},
        client={"id": client},
        request=None,
    )
    job = server.add(
        "job",
        jobNumber=318,
        title="Sump pump replacement",
        jobStatus="requires_invoicing",
        startAt=iso(now - timedelta(hours=7)),
        completedAt=iso(now - timedelta(hours=4)),
        total=total,
        client={"id": client},
        request=None,
        quote={"id": quote},
    )
    invoice = server.add(
        "invoice",
        invoiceNumber="2207",
        subject="Sump pump replacement",
        invoiceStatus="paid",
        issuedDate=iso(now - timedelta(hours=3, minutes=30)),
        dueDate=iso(now + timedelta(days=14)),
        amounts={"total": total},
        client={"id": client},
        jobs={"nodes": [{"id": job}]},
    )
    payment = server.add(
        "paymentRecord",
        amount=total,
        entryDate=iso(now - timedelta(hours=2)),
        invoice={"id": invoice},
        client={"id": client},
    )
    return JobberSeed(((CLIENT, client), (ESTIMATE, quote), (JOB, job), (INVOICE, invoice), (PAYMENT, payment)))


def jobber_stand_in(port: int = 0, *, now: datetime | None = None) -> tuple[JobberServer, JobberSeed]:
    """The demo shop's Jobber, seeded, taking the demo connection's tokens (not started)."""
    server = JobberServer(port)
    server.accept(DEMO_JOBBER_ACCESS, DEMO_JOBBER_REFRESH)
    return server, jobber_seed(server, now=now or timezone.now())


def _next_weekday(after: datetime, zone: ZoneInfo, n: int) -> datetime:
    """Midnight of the `n`th weekday after `after`'s day, in `zone`."""
    day = after.astimezone(zone).date()
    while n:
        day += timedelta(days=1)
        n -= day.weekday() < 5
    return datetime(day.year, day.month, day.day, tzinfo=zone)


def google_stand_in(business: Business, port: int = 0, *, now: datetime | None = None) -> google.GoogleCalendarServer:
    """Tom's Google calendar, seeded, taking the demo connection's tokens (not
    started): busy over his 13:00 slot on the next weekday and his 09:00 slot
    on the one after (the demo's availability: 09:00-11:00 and 13:00-15:00)."""
    server = google.GoogleCalendarServer(port)
    server.accept(DEMO_GOOGLE_ACCESS, DEMO_GOOGLE_REFRESH)
    zone, at = ZoneInfo(business.timezone), now or timezone.now()
    first, second = _next_weekday(at, zone, 1), _next_weekday(at, zone, 2)
    server.add(first + timedelta(hours=13, minutes=30), first + timedelta(hours=14, minutes=30), "Dentist")
    server.add(second + timedelta(hours=9), second + timedelta(hours=10), "Parts pickup at the supplier")
    return server


def google_settings(url: str) -> dict[str, str]:
    return {
        "GOOGLE_CALENDAR_API_URL": f"{url}{google.API}",
        "GOOGLE_OAUTH_URL": f"{url}/o/oauth2/v2/auth",
        "GOOGLE_TOKEN_URL": f"{url}/token",
        "GOOGLE_CALENDAR_CLIENT_ID": google.CLIENT_ID,
        "GOOGLE_CALENDAR_CLIENT_SECRET": google.CLIENT_SECRET,
    }


def demo_sync_ensure(business: Business) -> SyncConnection | None:
    """The demo business connected to its Jobber and what Jobber holds read
    in, and Tom's calendar connected, once; None when it is connected already."""
    calendar_ensure(business)
    if SyncConnection.objects.filter(business=business, provider="jobber").exists():
        return None
    server, seed = jobber_stand_in()
    server.start()
    try:
        with override_settings(
            JOBBER_API_URL=server.url,
            JOBBER_AUTH_URL=server.url,
            JOBBER_CLIENT_ID=CLIENT_ID,
            JOBBER_CLIENT_SECRET=CLIENT_SECRET,
        ):
            connection = connection_connect(
                business,
                provider="jobber",
                account_id=ACCOUNT_ID,
                account_name=ACCOUNT_NAME,
                access_token=DEMO_JOBBER_ACCESS,
                refresh_token=DEMO_JOBBER_REFRESH,
                expires_at=datetime.fromtimestamp(_EXP, tz=UTC),
                actor=ACTOR,
            )
            for kind, external_id in seed.ids:
                sync_pull_enqueue(connection, kind=kind, external_id=external_id)
            # The engine's own run, on this process: each pull reads its
            # record from the stand-in and applies it, parents first.
            sync_pump(seconds=30)
    finally:
        server.stop()
    return connection


def calendar_ensure(business: Business) -> SyncConnection | None:
    """Tom's Google calendar connected, its busy times read and its push
    channel opened, once; None when it is connected already."""
    tom = TeamMember.objects.filter(business=business, user__username=TECHNICIAN).first()
    if tom is None or SyncConnection.objects.filter(member=tom, provider="google_calendar").exists():
        return None
    server = google_stand_in(business)
    server.start()
    now = timezone.now()
    try:
        with override_settings(**google_settings(server.url)):
            connection = connection_connect(
                business,
                provider="google_calendar",
                account_id=f"{TECHNICIAN}@acme-hvac.example",
                account_name=f"{TECHNICIAN}@acme-hvac.example",
                access_token=DEMO_GOOGLE_ACCESS,
                refresh_token=DEMO_GOOGLE_REFRESH,
                expires_at=datetime.fromtimestamp(_EXP, tz=UTC),
                actor=ACTOR,
                member=tom,
            )
            # What the sweep does for a calendar, on this process: its
            # events' stream from now on, its busy times, its push channel.
            reconcile(connection, now=now, every=timedelta(0))
            calendar_busy_refresh(connection, now=now, force=True)
            calendar_watch(connection, now=now)
    finally:
        server.stop()
    return connection
