"""The booking offer with connected calendars (a benchmark, not a test: it prints figures).

    DATABASE_URL=postgres://… .venv/bin/python scripts/bench_availability.py --technicians 20 --runs 50

Creates a scratch database (`bench_availability`, or BENCH_DATABASE_NAME; dropped afterwards unless
--keep) with one business, `--technicians` technicians and `--rules`
availability rules that each take all of them (four two-hour windows every
day), so slots are offered over the next 14 days. Then
`agents.booking.slots.slots_offer` — what the booking page, the setter's
workspace and the receptionist's offer all compute — is timed for one lead:

- baseline: no calendar connected;
- calendars: each technician with a connected Google calendar
  (a SyncConnection with their member, provider google_calendar) holding
  `--blocks` busy blocks a day over the 14 days, stored as the busy check
  stores them (crm.services.sync.calendar_busy_store).

For each, the first call (cold: the lead read afresh, a new database
connection) and `--runs` repeated calls (warm: p50, p95, max), with the SQL
queries of one call, side by side. Needs PostgreSQL (DATABASE_URL).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import bench_servers  # the scratch database and Django, shared

WINDOWS = ["08:00-10:00", "10:00-12:00", "13:00-15:00", "15:00-17:00"]
DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
TARGET_MS = 300.0  # the warm offer with calendars, p95


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--technicians", type=int, default=20, help="technicians (default %(default)s)")
    parser.add_argument("--rules", type=int, default=4, help="availability rules, each with all (default %(default)s)")
    parser.add_argument("--blocks", type=int, default=4, help="busy blocks a day per calendar (default %(default)s)")
    parser.add_argument("--days", type=int, default=14, help="days of busy blocks (default %(default)s)")
    parser.add_argument("--runs", type=int, default=50, help="warm runs (default %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    return parser.parse_args(argv)


def world_fill(technicians: int, rules: int) -> Any:
    """The business, its technicians and rules; the lead the offer is for."""
    from crm.models import Availability, Business, Role
    from tests.factories import lead_create, member_create

    business = Business.objects.create(slug="bench-availability", name="Bench Availability", timezone="America/Chicago")
    team = [
        member_create(business, Role.TECHNICIAN, username=f"bench-tech-{n}", email=f"tech{n}@example.com")
        for n in range(technicians)
    ]
    for _ in range(rules):
        rule = Availability.objects.create(business=business, days=DAYS, slots=WINDOWS, capacity=2)
        rule.members.add(*team)
    lead = lead_create(business, first_name="Rosa", phone="+12125550147", email="rosa@example.com")
    return business, team, lead


def calendars_connect(business: Any, team: list[Any], blocks_a_day: int, days: int, seed: int = 7) -> int:
    """Each technician's Google calendar, connected, with its busy blocks
    stored as the busy check stores them. The number of blocks."""
    from django.utils import timezone

    from crm.models import SyncConnection
    from crm.services.sync import calendar_busy_store

    now = timezone.now()
    start = now.replace(minute=0, second=0, microsecond=0)
    pick = random.Random(seed)
    total = 0
    for member in team:
        connection = SyncConnection.objects.create(
            business=business,
            provider="google_calendar",
            member=member,
            account_id=f"bench-{member.pk}@example.com",
            account_name=member.user.email,
        )
        blocks = []
        for day in range(days):
            for _ in range(blocks_a_day):
                starts = start + timedelta(days=day, hours=pick.randrange(7, 19), minutes=pick.choice((0, 30)))
                blocks.append(
                    (starts.astimezone(UTC), (starts + timedelta(minutes=pick.choice((30, 60, 90)))).astimezone(UTC))
                )
        calendar_busy_store(connection, blocks, now=now, actor="bench")
        total += len(blocks)
    return total


def measure(label: str, lead_pk: int, runs: int) -> dict[str, Any]:
    """The first call (cold) and `runs` more (warm) of the offer for the lead."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.booking.slots import slots_offer
    from crm.models import Lead

    connection.close()  # cold: a new connection, nothing read yet
    started = time.perf_counter()
    lead = Lead.objects.select_related("business").get(pk=lead_pk)
    offered = slots_offer(lead)
    cold = time.perf_counter() - started
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        slots_offer(lead)
        times.append(time.perf_counter() - started)
    with CaptureQueriesContext(connection) as queries:
        slots_offer(lead)
    times.sort()
    return {
        "label": label,
        "slots": len(offered),
        "cold": cold * 1000,
        "p50": statistics.median(times) * 1000,
        "p95": times[min(len(times) - 1, round(0.95 * (len(times) - 1)))] * 1000,
        "max": times[-1] * 1000,
        "queries": len(queries),
    }


def report(rows: list[dict[str, Any]]) -> None:
    print(f"{'':<34}{'slots':>7}{'cold ms':>10}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'queries':>9}")
    for row in rows:
        print(
            f"{row['label']:<34}{row['slots']:>7}{row['cold']:>10.1f}{row['p50']:>9.1f}{row['p95']:>9.1f}"
            f"{row['max']:>9.1f}{row['queries']:>9}"
        )


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    bench_servers.django_setup(os.environ.get("BENCH_DATABASE_NAME", "bench_availability"))
    name = bench_servers.scratch_database_create()
    try:
        business, team, lead = world_fill(args.technicians, args.rules)
        rows = [measure("baseline: no calendars", lead.pk, args.runs)]
        blocks = calendars_connect(business, team, args.blocks, args.days)
        label = f"{args.technicians} calendars, {blocks} blocks"
        rows.append(measure(label, lead.pk, args.runs))
        print(
            f"database {name}: {args.technicians} technicians, {args.rules} rules of {len(WINDOWS)} windows a day, "
            f"{args.runs} warm runs"
        )
        report(rows)
        worst = rows[-1]["p95"]
        print(f"warm p95 with calendars {worst:.1f} ms: {'within' if worst < TARGET_MS else 'OVER'} the target")
    finally:
        if args.keep:
            print(f"kept database {name}")
        else:
            bench_servers.scratch_database_drop(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
