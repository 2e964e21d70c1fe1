"""Revenue report benchmark (a benchmark, not a test: it prints figures).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leadops_bench .venv/bin/python scripts/bench_revenue.py \\
        --leads 100000

Creates a throwaway business (slug `bench-revenue-<random>`) with three
sources and `--leads` leads, each with one or two touches over ten campaigns;
a share of them booked, held, estimated, won, with completed jobs, invoices,
payments and refunds. Rows are bulk-inserted (this measures the report, not
the services that write them). Then times the report for every grouping and
touch, the API endpoint and the revenue page (median of `--repeat` runs), and
prints the query count of each, the rows and the totals (checked to reconcile
with the payments and refunds). Needs PostgreSQL; leaves the business behind.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leads", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--business", help="time an existing bench business (its slug) instead of creating one")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leadops.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.db.models import Sum
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    call_command("migrate", verbosity=0)
    settings.ALLOWED_HOSTS = ["*"]
    from crm import models as m
    from crm.attribution import revenue_report
    from tests.factories import UserFactory

    if args.business:
        business = m.Business.objects.get(slug=args.business)
        user = UserFactory.create(username=f"{business.slug}-owner", is_superuser=True)
        print(f"timing {business.slug}: {m.Lead.objects.filter(business=business).count()} leads")
    else:
        business, user = create(args.leads, m, UserFactory, timezone)
    connection.cursor().execute("ANALYZE")

    def timed(call: object) -> tuple[float, int, object]:
        durations, queries, result = [], 0, None
        for _ in range(args.repeat):
            with CaptureQueriesContext(connection) as ctx:
                started = time.perf_counter()
                result = call()  # type: ignore[operator]
                durations.append(time.perf_counter() - started)
            queries = len(ctx.captured_queries)
        return statistics.median(durations), queries, result

    for by in ("source", "campaign", "ad", "owner"):
        for touch in ("first", "latest"):
            seconds, queries, report = timed(
                lambda by=by, touch=touch: revenue_report([business.pk], currency="USD", by=by, touch=touch)
            )
            totals = report.totals  # type: ignore[attr-defined]
            print(
                f"report by={by:<8} touch={touch:<6} {seconds * 1000:8.0f} ms  {queries:2d} queries  "
                f"{len(report.rows):3d} rows  leads={totals.leads} net={totals.net}"  # type: ignore[attr-defined]
            )
    paid = m.Payment.objects.filter(business=business).aggregate(t=Sum("amount"))["t"] or Decimal(0)
    refunded = m.Refund.objects.filter(business=business).aggregate(t=Sum("amount"))["t"] or Decimal(0)
    report = revenue_report([business.pk], currency="USD")
    ok = report.totals.collected == paid and report.totals.refunded == refunded
    print(
        f"reconciles: collected {report.totals.collected} = payments {paid}; refunded {report.totals.refunded} = "
        f"refunds {refunded}: {'yes' if ok else 'NO'}"
    )

    client = Client()
    client.force_login(user)
    for label, url in (
        ("API /api/v1/reports/revenue/", f"/api/v1/reports/revenue/?business={business.slug}&by=source"),
        ("page /admin/revenue/ (30 days)", f"/admin/revenue/?business={business.slug}&by=campaign"),
        # Both dates emptied: all time, every record of every lead.
        ("page /admin/revenue/ (all time)", f"/admin/revenue/?business={business.slug}&by=campaign&since=&until="),
        ("CSV /admin/revenue/?format=csv", f"/admin/revenue/?business={business.slug}&by=source&format=csv"),
    ):
        seconds, queries, response = timed(lambda url=url: client.get(url))
        status = response.status_code  # type: ignore[attr-defined]
        print(f"{label:<32} {seconds * 1000:8.0f} ms  {queries:2d} queries  HTTP {status}")
    return 0 if ok else 1


def create(count: int, m: Any, UserFactory: Any, timezone: Any) -> tuple[Any, Any]:
    """A business with `count` leads and their records, bulk-inserted."""
    rng = random.Random(7)
    business = m.Business.objects.create(slug=f"bench-revenue-{secrets.token_hex(3)}", name="Bench", timezone="UTC")
    sources = [
        m.Source.objects.create(business=business, key=f"{business.slug}-{k}", provider=p)
        for k, p in (("gads", "google_ads"), ("fb", "meta"), ("site", "website"))
    ]
    user = UserFactory.create(username=f"{business.slug}-owner", is_superuser=True)
    now = timezone.now()
    t0 = time.perf_counter()
    batch = 5000
    for start in range(0, count, batch):
        n = min(batch, count - start)
        contacts = m.Contact.objects.bulk_create(
            [m.Contact(business=business, first_name=f"B{start + i}") for i in range(n)]
        )
        created = [now - timedelta(days=rng.uniform(0, 365)) for _ in range(n)]
        leads = m.Lead.objects.bulk_create([m.Lead(business=business, contact=c, stage="new") for c in contacts])
        touches, appointments, estimates, jobs, invoices, payments = [], [], [], [], [], []
        for lead, at in zip(leads, created, strict=True):
            touches.append(
                m.LeadTouch(
                    business=business,
                    lead=lead,
                    source=rng.choice(sources),
                    channel="form",
                    provider="website",
                    campaign_id=f"c{rng.randrange(10)}",
                    received_at=at,
                )
            )
            if rng.random() < 0.3:
                touches.append(
                    m.LeadTouch(
                        business=business,
                        lead=lead,
                        source=rng.choice(sources),
                        channel="form",
                        provider="website",
                        received_at=at + timedelta(days=2),
                    )
                )
            if rng.random() < 0.4:
                appointments.append(
                    m.Appointment(
                        business=business,
                        lead=lead,
                        starts_at=at + timedelta(days=3),
                        ends_at=at + timedelta(days=3, hours=1),
                        status="held" if rng.random() < 0.7 else "scheduled",
                    )
                )
            if rng.random() < 0.3:
                amount = Decimal(rng.randrange(10000, 500000)) / 100
                estimates.append(
                    m.Estimate(
                        business=business, lead=lead, amount=amount, status="sent", sent_at=at + timedelta(days=4)
                    )
                )
                if rng.random() < 0.6:
                    jobs.append(
                        m.Job(business=business, lead=lead, status="completed", completed_at=at + timedelta(days=10))
                    )
                    invoices.append(
                        m.Invoice(
                            business=business,
                            lead=lead,
                            amount=amount,
                            status="paid",
                            issued_at=at + timedelta(days=10),
                        )
                    )
                    payments.append(
                        m.Payment(
                            business=business,
                            lead=lead,
                            contact=lead.contact,
                            amount=amount,
                            match_status="matched",
                            received_at=at + timedelta(days=12),
                        )
                    )
        m.LeadTouch.objects.bulk_create(touches)
        m.Appointment.objects.bulk_create(appointments)
        m.Estimate.objects.bulk_create(estimates)
        m.Job.objects.bulk_create(jobs)
        m.Invoice.objects.bulk_create(invoices)
        saved = m.Payment.objects.bulk_create(payments)
        m.Refund.objects.bulk_create(
            [
                m.Refund(
                    business=business,
                    payment=p,
                    amount=(p.amount / 4).quantize(Decimal("0.01")),
                    refunded_at=p.received_at + timedelta(days=5),
                )
                for p in saved
                if rng.random() < 0.1
            ]
        )
        won = [lead.pk for lead in leads if rng.random() < 0.15]
        m.Lead.objects.filter(pk__in=won).update(stage="won", closed_at=now - timedelta(days=1))
    print(f"created {count} leads with their records in {time.perf_counter() - t0:.1f}s")
    return business, user


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
