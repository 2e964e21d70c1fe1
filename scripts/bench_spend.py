"""Spend and return benchmark (a benchmark, not a test: it prints figures).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leadops_bench .venv/bin/python scripts/bench_spend.py \\
        --leads 100000

Creates a throwaway business (slug `bench-spend-<random>`) with a Google Ads
and a Meta conversion account, `--campaigns` campaigns (half on each) with
`--days` days of spend each, and `--leads` leads spread over those days: most
from a campaign's click, the rest from the website; a share of them booked
and paid (some paid weeks after the click). Rows are bulk-inserted (this
measures the report, not the services that write them). Then times
`agents.reporting.spend.campaign_returns` and the revenue page with its
"Spend and return" section over the last 30, 90 and 365 days (median of
`--repeat` runs) and prints each one's query count, and the paid totals.
Needs PostgreSQL; leaves the business behind (`--business SLUG` times it again).
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
    parser.add_argument("--campaigns", type=int, default=50)
    parser.add_argument("--days", type=int, default=365)
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
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    call_command("migrate", verbosity=0)
    settings.ALLOWED_HOSTS = ["*"]
    from agents.reporting.spend import campaign_returns
    from crm import models as m
    from tests.factories import UserFactory

    if args.business:
        business = m.Business.objects.get(slug=args.business)
        user = UserFactory.create(username=f"{business.slug}-owner", is_superuser=True)
    else:
        started = time.perf_counter()
        business, user = create(args, m, UserFactory, timezone, connection)
        print(f"seeded in {time.perf_counter() - started:.0f} s")
    print(
        f"{business.slug}: {m.Lead.objects.filter(business=business).count()} leads, "
        f"{m.Campaign.objects.filter(business=business).count()} campaigns, "
        f"{m.CampaignSpend.objects.filter(business=business).count()} spend rows"
    )
    connection.cursor().execute("ANALYZE")

    def timed(call: Any) -> tuple[float, int, Any]:
        durations, queries, result = [], 0, None
        for _ in range(args.repeat):
            with CaptureQueriesContext(connection) as ctx:
                started = time.perf_counter()
                result = call()
                durations.append(time.perf_counter() - started)
            queries = len(ctx.captured_queries)
        return statistics.median(durations), queries, result

    client = Client()
    client.force_login(user)
    today = timezone.now().date()
    for days in (30, 90, 365):
        since = today - timedelta(days=days - 1)
        seconds, queries, returns = timed(lambda since=since: campaign_returns(business, since, today))
        paid = returns.paid
        print(
            f"campaign_returns {days:3d} days {seconds * 1000:8.0f} ms  {queries:2d} queries  "
            f"{len(returns.campaigns):3d} campaigns  spend={paid.spend} leads={paid.leads} "
            f"revenue_by_click={paid.revenue} roas={paid.roas}"
        )
        url = f"/admin/revenue/?business={business.slug}&by=campaign&since={since}&until={today}"
        seconds, queries, response = timed(lambda url=url: client.get(url))
        ok = response.status_code == 200 and b'id="spend-returns"' in response.content
        print(
            f"revenue page     {days:3d} days {seconds * 1000:8.0f} ms  {queries:2d} queries  "
            f"HTTP {response.status_code}{'' if ok else '  (no spend section!)'}"
        )
    return 0


def create(args: Any, m: Any, UserFactory: Any, timezone: Any, connection: Any) -> tuple[Any, Any]:
    """The business, its accounts, campaigns, spend and leads, bulk-inserted."""
    rng = random.Random(11)
    slug = f"bench-spend-{secrets.token_hex(3)}"
    business = m.Business.objects.create(slug=slug, name="Bench spend", timezone="UTC", currency="USD")
    user = UserFactory.create(username=f"{slug}-owner", is_superuser=True)
    sources = {
        "google_ads": m.Source.objects.create(business=business, key=f"{slug}-gads", provider="google_ads"),
        "meta": m.Source.objects.create(business=business, key=f"{slug}-fb", provider="meta"),
        "website": m.Source.objects.create(business=business, key=f"{slug}-site", provider="website"),
    }
    now = timezone.now()
    today = now.date()
    campaigns = m.Campaign.objects.bulk_create(
        [
            m.Campaign(
                business=business,
                platform="google_ads" if n % 2 == 0 else "meta",
                account_id="1234567890" if n % 2 == 0 else "555000111",
                campaign_id=f"{9000000000 + n}",
                name=f"Campaign {n}",
                updated_at=now,
            )
            for n in range(args.campaigns)
        ]
    )
    spend = []
    for campaign in campaigns:
        for back in range(args.days):
            clicks = rng.randrange(0, 60)
            spend.append(
                m.CampaignSpend(
                    business=business,
                    campaign=campaign,
                    day=today - timedelta(days=back),
                    cost_amount=Decimal(rng.randrange(0, 20000)) / 100,
                    currency="USD",
                    clicks=clicks,
                    impressions=clicks * rng.randrange(10, 40),
                    fetched_at=now,
                )
            )
    m.CampaignSpend.objects.bulk_create(spend, batch_size=5000)
    batch = 5000
    for start in range(0, args.leads, batch):
        n = min(batch, args.leads - start)
        contacts = m.Contact.objects.bulk_create(
            [m.Contact(business=business, first_name=f"S{start + i}") for i in range(n)]
        )
        leads = m.Lead.objects.bulk_create([m.Lead(business=business, contact=c, stage="new") for c in contacts])
        touches, appointments, payments = [], [], []
        for lead in leads:
            at = now - timedelta(days=rng.uniform(0, args.days))
            campaign = rng.choice(campaigns) if rng.random() < 0.75 else None
            source = sources[campaign.platform] if campaign else sources["website"]
            touches.append(
                m.LeadTouch(
                    business=business,
                    lead=lead,
                    source=source,
                    channel="form",
                    provider=source.provider,
                    campaign_id=campaign.campaign_id if campaign else "",
                    received_at=at,
                )
            )
            if rng.random() < 0.35:
                appointments.append(
                    m.Appointment(
                        business=business,
                        lead=lead,
                        starts_at=at + timedelta(days=3),
                        ends_at=at + timedelta(days=3, hours=1),
                        status="scheduled",
                    )
                )
                if rng.random() < 0.5:
                    payments.append(
                        m.Payment(
                            business=business,
                            lead=lead,
                            contact=lead.contact,
                            amount=Decimal(rng.randrange(20000, 900000)) / 100,
                            match_status="matched",
                            # Some pay weeks after the click: money by click date still finds them.
                            received_at=min(at + timedelta(days=rng.choice((5, 20, 45))), now),
                        )
                    )
        m.LeadTouch.objects.bulk_create(touches)
        m.Appointment.objects.bulk_create(appointments)
        m.Payment.objects.bulk_create(payments)
        print(f"  {start + n} leads", file=sys.stderr)
    # A lead arrived with its touch, and was booked a day later (bulk_create stamps now).
    lead, touch, appointment = (
        connection.ops.quote_name(model._meta.db_table) for model in (m.Lead, m.LeadTouch, m.Appointment)
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {lead} l SET created_at = t.received_at FROM {touch} t "  # noqa: S608 - table names only
            "WHERE t.lead_id = l.id AND l.business_id = %s",
            [business.pk],
        )
        cursor.execute(
            f"UPDATE {appointment} SET created_at = starts_at - interval '2 days' "  # noqa: S608
            "WHERE business_id = %s",
            [business.pk],
        )
    return business, user


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
