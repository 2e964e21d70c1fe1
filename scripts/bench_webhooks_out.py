"""Outbound webhooks: delivery throughput to a fast and a slow receiver side by
side, and new-lead processing latency with and without a slow receiver
attached (a benchmark, not a test: it prints figures), in one run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leadops .venv/bin/python scripts/bench_webhooks_out.py \\
        [--leads 60 --rate 4] [--events 400] [--slow-seconds 2] [--keep]

Creates a scratch database beside DATABASE_URL's (`bench_webhooks_out`, or
BENCH_DATABASE_NAME; dropped afterwards unless --keep), loads the demo
business file, and starts gunicorn (2 sync workers), the default `qcluster`
(dry run: acknowledgements are recorded, not texted) and the webhooks
cluster (`Q_CLUSTER_NAME=leadops-webhooks`, live, with the settings'
defaults) against two local HTTPS receivers that verify every signature
with the `standardwebhooks` package: a fast one (answers at once) and a
slow one (`--slow-seconds` per post). Then:

1. baseline: `--leads` new website leads posted at `--rate` per second, no
   subscription: the acknowledgement latency after receipt (p50, p95, max);
2. the same with the slow receiver subscribed to every event: the same
   latency (lead processing and deliveries run on different clusters);
3. `--events` events written at once (lead.stage_changed of the leads above)
   with both receivers subscribed: the fast receiver's deliveries per second
   and its delivery latency after the event, and the slow one's deliveries
   per second over `--slow-window` seconds, while it is capped at
   MAX_IN_FLIGHT posts at a time.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import bench_servers
from scripts.bench_burst import decided, post_all, website_posts
from scripts.bench_webhooks import percentile


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leads", type=int, default=60, help="new leads per latency phase (default %(default)s)")
    parser.add_argument("--rate", type=float, default=4.0, help="leads posted per second (default %(default)s)")
    parser.add_argument("--events", type=int, default=400, help="events for the throughput phase (default %(default)s)")
    parser.add_argument("--slow-seconds", type=float, default=2.0, help="the slow receiver's answer time")
    parser.add_argument(
        "--slow-window", type=float, default=30.0, help="seconds the slow receiver is measured (default %(default)s)"
    )
    parser.add_argument("--wait", type=float, default=180.0, help="max seconds to wait in each phase")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    return parser.parse_args(argv)


def seconds(values: list[float]) -> str:
    if not values:
        return "none"
    return f"p50 {statistics.median(values):.2f} s, p95 {percentile(values, 95):.2f} s, max {max(values):.2f} s"


def latency_phase(port: int, posts: list[Any], rate: float, wait: float) -> list[float]:
    """Post the leads paced, wait for every acknowledgement; their latencies."""
    from django.utils import timezone

    since = timezone.now()
    wall, statuses = post_all(port, posts, 4, rate=rate)
    accepted = statuses.get(200, 0)
    deadline = time.monotonic() + wait
    done = decided(since)
    while len(done) < accepted and time.monotonic() < deadline:
        time.sleep(0.5)
        done = decided(since)
    print(f"  {len(posts)} posted in {wall:.1f} s (answers {statuses}); {len(done)} processed")
    return [(at - received).total_seconds() for received, at in done]


def delivered_to(subscription_id: int, since_id: int) -> list[tuple[datetime, datetime]]:
    from crm.models import WebhookDelivery

    rows = WebhookDelivery.objects.filter(subscription_id=subscription_id, event_id__gt=since_id, status="delivered")
    return [(created, at) for created, at in rows.values_list("event__created_at", "delivered_at") if at]


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # The receivers are on this machine (loopback): this process saves their subscriptions.
    os.environ["WEBHOOK_ALLOW_PRIVATE"] = "true"
    bench_servers.django_setup(os.environ.get("BENCH_DATABASE_NAME", "bench_webhooks_out"))
    from django.db import connection, transaction

    from agents.webhooks.delivery import MAX_IN_FLIGHT
    from crm.models import Business, EventType, Lead, OutboxEvent
    from crm.services.business_file import business_file_load
    from crm.services.outbox import event_emit
    from crm.services.webhooks import webhook_secret_new, webhook_subscription_pause, webhook_subscription_save
    from scripts.webhook_receiver import Receiver, tls_files

    name = bench_servers.scratch_database_create()
    processes = []
    fast_secret, slow_secret = webhook_secret_new(), webhook_secret_new()
    try:
        with Receiver(fast_secret) as fast, Receiver(slow_secret, delay=args.slow_seconds) as slow:
            business_file_load(bench_servers.ROOT / "demo" / "acme-hvac.yaml")
            business = Business.objects.get(slug="acme-hvac")
            rng = random.Random(args.seed)
            posts = website_posts(2 * args.leads, rng.randrange(1, 1_000_000))
            connection.close()
            port = bench_servers.free_port()
            tree = bench_servers.ROOT
            processes.append(bench_servers.gunicorn_start(tree, port))
            processes.append(bench_servers.qcluster_start(tree))
            processes.append(
                bench_servers.qcluster_start(
                    tree,
                    env={
                        "Q_CLUSTER_NAME": "leadops-webhooks",
                        "SEND_MODE": "live",
                        "WEBHOOK_ALLOW_PRIVATE": "true",
                        "WEBHOOK_CA_BUNDLE": tls_files().ca,
                    },
                )
            )
            print(f"gunicorn (2 workers), qcluster, qcluster leadops-webhooks; {bench_servers.load_average()}")
            time.sleep(3)  # the clusters' workers start

            print(f"1. baseline: {args.leads} new leads at {args.rate}/s, no webhook subscription")
            baseline = latency_phase(port, posts[: args.leads], args.rate, args.wait)

            slow_subscription, _ = webhook_subscription_save(
                business=business, url=slow.url, events=["*"], secret=slow_secret, actor="bench"
            )
            print(f"2. the same with a slow receiver ({args.slow_seconds:.1f} s a post) subscribed to every event")
            attached = latency_phase(port, posts[args.leads :], args.rate, args.wait)
            print(f"  slow receiver meanwhile: {len(slow.accepted())} deliveries accepted")

            # Phase 2's backlog is not this phase's: that subscription waits, paused,
            # and the slow receiver starts afresh under another URL.
            webhook_subscription_pause(slow_subscription, actor="bench", reason="between phases")
            slow_subscription, _ = webhook_subscription_save(
                business=business,
                url=slow.url.replace("/hook", "/side-by-side"),
                events=["*"],
                secret=slow_secret,
                actor="bench",
            )
            fast_subscription, _ = webhook_subscription_save(
                business=business, url=fast.url, events=["*"], secret=fast_secret, actor="bench"
            )
            last_event = OutboxEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
            leads = list(Lead.objects.filter(business=business))
            print(f"3. {args.events} events at once, both receivers subscribed (side by side)")
            started = time.monotonic()
            with transaction.atomic():
                for index in range(args.events):
                    lead = leads[index % len(leads)]
                    event_emit(
                        business=business,
                        lead=lead,
                        type=EventType.LEAD_STAGE_CHANGED,
                        subject=lead.public_id,
                        data={"lead": lead.public_id, "from": lead.stage, "to": lead.stage, "actor": "bench"},
                    )
            deadline = started + args.wait
            while time.monotonic() < deadline:
                if len(delivered_to(fast_subscription.pk, last_event)) >= args.events:
                    break
                time.sleep(0.25)
            fast_done = max(time.monotonic() - started, 1e-9)
            fast_rows = delivered_to(fast_subscription.pk, last_event)
            # The slow one is measured over a window long enough for its rate to show.
            time.sleep(max(0.0, started + args.slow_window - time.monotonic()))
            slow_window = time.monotonic() - started
            slow_rows = delivered_to(slow_subscription.pk, last_event)
            lag = [(at - created).total_seconds() for created, at in fast_rows]
            print(
                f"  fast receiver: {len(fast_rows)} of {args.events} delivered in {fast_done:.1f} s = "
                f"{len(fast_rows) / fast_done:.1f}/s; after the event {seconds(lag)}"
            )
            print(
                f"  slow receiver, meanwhile and after: {len(slow_rows)} delivered in {slow_window:.1f} s = "
                f"{len(slow_rows) / slow_window:.2f}/s (at most {MAX_IN_FLIGHT} posts in flight per subscription)"
            )
            verified = all(r.verified for r in [*fast.received, *slow.received])
            print(f"  every post verified by the receivers (standardwebhooks): {verified}")

            print("new-lead processing, acknowledgement decided after receipt:")
            print(f"  baseline (no webhooks)           {seconds(baseline)}")
            print(f"  slow receiver attached           {seconds(attached)}")
            print(bench_servers.load_average())
            # A receiver must outlive its cluster's last post.
            for process in processes:
                bench_servers.process_stop(process)
    finally:
        for process in processes:
            bench_servers.process_stop(process)
        if args.keep:
            print(f"kept database {name}")
        else:
            bench_servers.scratch_database_drop(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
