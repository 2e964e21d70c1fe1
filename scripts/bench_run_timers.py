"""`run_timers` benchmark (a benchmark, not a test: it prints figures).

    DATABASE_URL=postgres://… .venv/bin/python scripts/bench_run_timers.py --rows 10000

Creates a scratch PostgreSQL database (`bench_run_timers`, dropped afterwards
unless --keep), fills it with `--rows` leads, each on a follow-up path whose
first step (an approved text, or a task with --channel task) is due now, and
times `timers_run_due` claiming and running every due step timer: per step,
the enrollment lock and exit checks, the message through the send gate
(dry run: consent, quiet hours, daily cap, one path per person), the next
step's timer, and the receipts. `--workers N` runs N overlapping runs at once
(each with its own connection; SKIP LOCKED gives them disjoint batches) and
`--businesses N` spreads the leads over N businesses (each business's receipt
chain is written one at a time, so one business is the worst case).

Prints the setup time, then rows, seconds and rows per second for the run,
the statements sent per step (each a round trip to the database: queries and
savepoints; each step's transaction adds its BEGIN and COMMIT), and checks
that every step ran exactly once and that every business's receipt chain
verifies.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Noon in New York, a Tuesday: inside quiet hours' open window for 212 numbers.
DUE = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000, help="due step timers (default %(default)s)")
    parser.add_argument("--workers", type=int, default=1, help="overlapping runs (default %(default)s)")
    parser.add_argument("--businesses", type=int, default=1, help="businesses to spread over (default %(default)s)")
    parser.add_argument("--channel", choices=("sms", "task"), default="sms", help="the first step's channel")
    parser.add_argument("--batch", type=int, default=500, help="timers claimed per batch (default %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    return parser.parse_args(argv)


def setup_django() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leadops.settings")
    os.environ.setdefault("TEST_DATABASE_NAME", "bench_run_timers")
    import django

    django.setup()
    from django.db import connection

    if connection.vendor != "postgresql":
        sys.exit("bench_run_timers needs PostgreSQL: set DATABASE_URL=postgres://…")


def fill(rows: int, businesses: int, channel: str) -> list[int]:
    """Leads with consent, each enrolled on a path whose first step is due at DUE.

    Rows are bulk-inserted (the benchmark measures the run, not the setup);
    the enrollments and their timers are the engine's own shapes.
    """
    from django.contrib.auth import get_user_model

    from agents.followup.sequences.engine import STEP_TIMER
    from crm.models import (
        Business,
        ConsentEvent,
        ConsentState,
        Contact,
        ContactPoint,
        Enrollment,
        Lead,
        MessageTemplate,
        Role,
        Sequence,
        Source,
        TeamMember,
        Timer,
    )

    step = (
        {"after": "15m", "channel": "sms", "template": "nudge_sms"}
        if channel == "sms"
        else {"after": "15m", "channel": "task", "title": "Call the lead"}
    )
    user = get_user_model().objects.create(username="bench-sam")
    enrollment_ids: list[int] = []
    per_business = -(-rows // businesses)
    for b in range(businesses):
        count = min(per_business, rows - b * per_business)
        business = Business.objects.create(slug=f"bench-{b}", name=f"Bench {b}", timezone="America/New_York")
        owner = TeamMember.objects.create(business=business, user=user, role=Role.SETTER, display_name="Sam Bench")
        Source.objects.create(
            business=business, key=f"bench-line-{b}", provider="twilio", config={"phone_number": "+13125550100"}
        )
        MessageTemplate.objects.create(
            business=business,
            key="nudge_sms",
            channel="sms",
            approved=True,
            body="Hi {first_name}, {owner_first_name} from {business} here. Still need help? Reply STOP to opt out.",
        )
        sequence = Sequence.objects.create(business=business, key="no_reply", trigger="no_reply", steps=[step])
        contacts = Contact.objects.bulk_create(
            [Contact(business=business, first_name=f"Pat{n}") for n in range(count)], batch_size=2000
        )
        points = ContactPoint.objects.bulk_create(
            [
                ContactPoint(business=business, contact=c, kind="phone", value=f"+1212{b:02d}{n:05d}")
                for n, c in enumerate(contacts)
            ],
            batch_size=2000,
        )
        events = ConsentEvent.objects.bulk_create(
            [
                ConsentEvent(
                    business=business,
                    contact_point=p,
                    channel="sms",
                    action="grant",
                    basis="form_disclosure",
                    actor="bench",
                    at=DUE - timedelta(days=1),
                )
                for p in points
            ],
            batch_size=2000,
        )
        ConsentState.objects.bulk_create(
            [
                ConsentState(
                    contact_point=e.contact_point, channel="sms", status="granted", last_event=e, updated_at=e.at
                )
                for e in events
            ],
            batch_size=2000,
        )
        leads = Lead.objects.bulk_create(
            [Lead(business=business, contact=c, owner=owner, stage="assigned") for c in contacts], batch_size=2000
        )
        enrollments = Enrollment.objects.bulk_create(
            [
                Enrollment(
                    business=business,
                    lead=lead,
                    contact=lead.contact,
                    sequence=sequence,
                    status="active",
                    next_step_index=0,
                    next_step_due_at=DUE,
                )
                for lead in leads
            ],
            batch_size=2000,
        )
        Timer.objects.bulk_create(
            [
                Timer(
                    business=business,
                    lead=e.lead,
                    kind=STEP_TIMER,
                    due_at=DUE,
                    payload={"enrollment": e.pk, "step": 0},
                    dedupe_key=f"seq:{e.public_id}:0",
                )
                for e in enrollments
            ],
            batch_size=2000,
        )
        enrollment_ids += [e.pk for e in enrollments]
    return enrollment_ids


def run(workers: int, batch: int) -> tuple[float, int, int, int]:
    from django.db import connection

    from agents.followup.sequences.engine import STEP_TIMER
    from crm.services.timers import timers_run_due

    totals: Counter[str] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(workers)

    def one() -> None:
        statements = 0

        def count(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
            nonlocal statements
            statements += 1
            return execute(sql, params, many, context)

        try:
            barrier.wait()
            with connection.execute_wrapper(count):
                # Unbounded here: the figure is the throughput of one run over every row (the
                # periodic job stops at RUN_LIMIT timers and lets the next run go on).
                result = timers_run_due(
                    now=DUE + timedelta(minutes=1),
                    batch=batch,
                    kinds=[STEP_TIMER],
                    limit=10**9,
                    budget=timedelta(hours=1),
                )
            with lock:
                totals.update({"claimed": result.claimed, "done": result.done, "failed": result.failed})
                totals["statements"] += statements
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(workers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, totals["done"], totals["failed"], totals["statements"]


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    setup_django()
    from django.db import connection

    import agents.followup  # noqa: F401 - the app registry already registered the step handler
    from crm.models import Enrollment, Message, Task, Timer

    creation = connection.creation
    name = creation.create_test_db(verbosity=0, autoclobber=True, serialize=False, keepdb=False)
    try:
        started = time.perf_counter()
        ids = fill(args.rows, args.businesses, args.channel)
        print(f"setup: {len(ids)} leads on a path, one due step timer each, in {time.perf_counter() - started:.1f} s")
        connection.close()

        seconds, done, failed, statements = run(args.workers, args.batch)
        print(
            f"run_timers: {done} step timers run ({failed} failed) in {seconds:.2f} s "
            f"with {args.workers} worker(s), {args.businesses} business(es), channel {args.channel}: "
            f"{done / seconds:.0f} rows/s, {statements / max(done, 1):.1f} statements per step"
        )
        ran = Enrollment.objects.filter(pk__in=ids, next_step_index=1).count()
        made = (
            Message.objects.filter(direction="out").count()
            if args.channel == "sms"
            else Task.objects.filter(kind="follow_up").count()
        )
        statuses = Counter(Message.objects.values_list("status", flat=True))
        print(
            f"check: {ran} enrollments advanced once, {made} {args.channel} steps made, messages {dict(statuses)}, "
            f"pending step timers left {Timer.objects.filter(status='pending', due_at__lte=DUE).count()}"
        )
        from crm.services.receipts import receipts_verify

        broken = receipts_verify()
        print(f"receipts: {'every chain verifies' if broken is None else f'BROKEN: {broken}'}")
        return 0 if ran == made == len(ids) and not failed and broken is None else 1
    finally:
        connection.close()
        if not args.keep:
            creation.destroy_test_db(name, verbosity=0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
