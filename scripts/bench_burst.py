"""A burst of new leads through the web server and the task cluster, and a
sustained rate (a benchmark, not a test: it prints figures).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leadops .venv/bin/python scripts/bench_burst.py \\
        --burst 1000 [--sustained-rate 5 --sustained-seconds 120] [--tree /path/to/other/checkout]

Creates a scratch database beside DATABASE_URL's (`bench_burst`, or
BENCH_DATABASE_NAME; dropped afterwards unless --keep), loads the demo
business file, and starts gunicorn (2 sync workers) and one `qcluster` with
the settings' defaults (the default two-worker cluster), both serving this
checkout or `--tree`'s. Then:

* burst: posts `--burst` new website leads (signed, with consent, each a
  different person) from `--connections` threads as fast as the server takes
  them, and waits until every lead's acknowledgement is decided (the new-lead
  step wrote its acknowledgement message: sent, deferred to business hours,
  or blocked), printing the posting rate, the time until all were processed,
  the drain rate and the acknowledgement latency after receipt (p50, p95),
  then waits until the queue is empty (the burst's sends and notices);
* sustained (`--sustained-rate` > 0): posts that many leads per second for
  `--sustained-seconds`, paced, and prints the same latencies.

Run it on a machine that is otherwise quiet, or compare checkouts in
back-to-back runs (the load average is printed before and after).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import bench_servers
from scripts.bench_webhooks import percentile


def website_posts(count: int, seed: int) -> list[Any]:
    """Signed website-form posts of `count` different people, with consent."""
    args = argparse.Namespace(business="acme-hvac", posts=count, providers=["website"])
    from scripts.bench_webhooks import build_posts

    return list(build_posts(args, seed))


def post_all(port: int, posts: list[Any], connections: int, rate: float = 0.0) -> tuple[float, dict[int, int]]:
    """Post everything (paced at `rate` per second when given); the wall time
    and the answers' statuses."""
    import http.client

    statuses: dict[int, int] = {}
    lock = threading.Lock()
    started = time.monotonic()

    def send(indexed: tuple[int, Any]) -> None:
        index, post = indexed
        if rate:
            delay = started + index / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("POST", post.path, body=post.body, headers=post.headers)
            response = conn.getresponse()
            response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            status = 0
        finally:
            conn.close()
        with lock:
            statuses[status] = statuses.get(status, 0) + 1

    with ThreadPoolExecutor(max_workers=connections) as pool:
        list(pool.map(send, enumerate(posts)))
    return time.monotonic() - started, statuses


def decided(since: datetime) -> list[tuple[datetime, datetime]]:
    """(received_at, acknowledgement decided at) for each lead whose event
    was received since `since` and whose acknowledgement is decided."""
    from crm.models import Message

    rows = (
        Message.objects.filter(idempotency_key__startswith="ack:", lead__touches__inbound_event__received_at__gte=since)
        .values_list("lead__touches__inbound_event__received_at", "created_at")
        .distinct()
    )
    return list(rows)


def wait_decided(since: datetime, expected: int, wait: float) -> tuple[float, list[tuple[datetime, datetime]]]:
    start = time.monotonic()
    deadline = start + wait
    next_report = start + 10
    while True:
        done = decided(since)
        if len(done) >= expected or time.monotonic() >= deadline:
            return time.monotonic() - start, done
        if time.monotonic() >= next_report:
            print(f"  … {len(done)} of {expected} acknowledgements decided", flush=True)
            next_report += 10
        time.sleep(0.5)


def wait_queue_empty(wait: float) -> float:
    """Seconds until the broker holds no task (the sends, notices and timers
    a burst leaves behind once every acknowledgement is decided)."""
    from django_q.models import OrmQ

    from devtools.polling import poll_until

    start = time.monotonic()
    poll_until(lambda: not OrmQ.objects.exists(), timeout=wait)
    return time.monotonic() - start


def latencies(done: list[tuple[datetime, datetime]]) -> str:
    seconds = [(at - received).total_seconds() for received, at in done]
    if not seconds:
        return "no acknowledgement decided"
    return (
        f"acknowledgement after receipt p50 {statistics.median(seconds):.1f} s, p95 {percentile(seconds, 95):.1f} s, "
        f"max {max(seconds):.1f} s"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burst", type=int, default=1000, help="leads in the burst (0: none; default %(default)s)")
    parser.add_argument("--sustained-rate", type=float, default=0.0, help="leads per second after the burst")
    parser.add_argument("--sustained-seconds", type=float, default=120.0, help="(default %(default)s)")
    parser.add_argument("--connections", type=int, default=8, help="posting threads (default %(default)s)")
    parser.add_argument("--wait", type=float, default=300.0, help="max seconds to wait for processing")
    parser.add_argument("--tree", type=Path, default=bench_servers.ROOT, help="the checkout to serve (default this)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    bench_servers.django_setup(os.environ.get("BENCH_DATABASE_NAME", "bench_burst"))
    from django.db import connection
    from django.utils import timezone

    name = bench_servers.scratch_database_create()
    processes = []
    try:
        from crm.services.business_file import business_file_load

        business_file_load(bench_servers.ROOT / "demo" / "acme-hvac.yaml")
        rng = random.Random(args.seed)
        total = args.burst + int(args.sustained_rate * args.sustained_seconds)
        posts = website_posts(total, rng.randrange(1, 1_000_000)) if total else []
        burst, sustained = posts[: args.burst], posts[args.burst :]
        connection.close()
        port = bench_servers.free_port()
        processes.append(bench_servers.gunicorn_start(args.tree.resolve(), port))
        processes.append(bench_servers.qcluster_start(args.tree.resolve()))
        print(
            f"serving {args.tree.resolve()}: gunicorn (2 workers) and qcluster (defaults); "
            f"{bench_servers.load_average()}"
        )
        time.sleep(3)  # the cluster's workers start
        if burst:
            since = timezone.now()
            wall, statuses = post_all(port, burst, args.connections)
            accepted = statuses.get(200, 0)
            print(f"burst: {len(burst)} posted in {wall:.1f} s = {len(burst) / wall:.0f} posts/s; answers {statuses}")
            took, done = wait_decided(since, accepted, args.wait)
            after_first_post = took + wall
            print(
                f"  all {len(done)} of {accepted} processed {after_first_post:.1f} s after the first post "
                f"(drain {len(done) / after_first_post:.1f} leads/s); {latencies(done)}"
            )
            # The sustained rate is measured on a settled cluster, not behind
            # the burst's own sends still in the queue.
            settled = after_first_post + wait_queue_empty(args.wait)
            print(f"  queue empty {settled:.1f} s after the first post (the burst's sends and notices done)")
        if sustained:
            since = timezone.now()
            wall, statuses = post_all(port, sustained, args.connections, rate=args.sustained_rate)
            print(
                f"sustained: {len(sustained)} posted in {wall:.1f} s at {len(sustained) / wall:.1f}/s; answers "
                f"{statuses}"
            )
            _, done = wait_decided(since, statuses.get(200, 0), args.wait)
            print(f"  {len(done)} processed; {latencies(done)}")
        print(bench_servers.load_average())
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
