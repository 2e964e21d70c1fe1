"""Webhook intake benchmark (a benchmark, not a test: it prints figures).

Needs the web server and the task cluster running, on this machine:

    make run                                                              # terminal 1
    .venv/bin/python scripts/bench_webhooks.py --posts 1000 --concurrency 8   # terminal 2

It posts `--posts` signed website-form webhooks (optionally mixed with other
providers: `--providers website,google_ads,typeform,instagram,twilio`; Meta needs
a Graph stand-in and the hosted form is rate limited, so neither is offered)
from `--concurrency` sender threads, each with its own keep-alive session, and
prints the acceptance latency (median, p95) and throughput. Then it waits, at
most `--wait` seconds, until the cluster has processed every event it stored
(polling InboundEvent statuses through the ORM, with the same settings as the
server) and prints the processing time per lead: the whole processing window
divided by the leads, and received_at → processed_at (median, p95).

Every post is new (fresh ids and idempotency keys per run), so reruns measure
the same work; people reuse fictional numbers, so a rerun adds touches to the
leads a previous run opened. Only loopback URLs are accepted. Instagram and
Twilio need META_APP_SECRET / TWILIO_AUTH_TOKEN (and PUBLIC_BASE_URL for Twilio)
in this process's environment, the same as the server's.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH_PROVIDERS = ("website", "google_ads", "typeform", "instagram", "twilio")
POLL_SECONDS = 0.5


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, round(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running server (default %(default)s)")
    parser.add_argument("--business", default="acme-hvac", help="business slug (default %(default)s)")
    parser.add_argument("--posts", type=int, default=1000, help="webhooks to post (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=8, help="sender threads (default %(default)s)")
    parser.add_argument(
        "--providers", default="website", help=f"comma-separated, from {','.join(BENCH_PROVIDERS)} (default website)"
    )
    parser.add_argument("--wait", type=float, default=600.0, help="max seconds to wait for processing")
    parser.add_argument("--seed", type=int, help="random seed (default: random)")
    args = parser.parse_args(argv)
    args.providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    unknown = set(args.providers) - set(BENCH_PROVIDERS)
    if unknown or not args.providers:
        parser.error(f"--providers: choose from {', '.join(BENCH_PROVIDERS)}")
    if args.posts < 1 or args.concurrency < 1:
        parser.error("--posts and --concurrency must be at least 1")
    return args


def build_posts(args: argparse.Namespace, seed: int) -> list[Any]:
    """One lead post per webhook, providers taken in turn."""
    from django.utils import timezone

    from devtools.simulator.core import BUILDERS, Plan, SimulationError, context_load, people_make

    ctx = context_load(args.business)
    rng = random.Random(seed)
    plan = Plan(seed=seed, people=[], jobs=[], builders=[], skipped={})
    builders = {cls.name: cls(ctx, rng, plan) for cls in BUILDERS if cls.name in args.providers}
    for name, builder in builders.items():
        reason = builder.unavailable()
        if reason:
            raise SimulationError(f"{name}: {reason}")
    people = people_make(rng, min(args.posts, 2500), ctx.reserved_phones)
    run = secrets.token_hex(6)
    now = timezone.now()
    posts = []
    for i in range(args.posts):
        name = args.providers[i % len(args.providers)]
        person = people[i % len(people)]
        if name == "instagram":
            person = replace(person, phone="", email="", igsid=str(10**15 + rng.randrange(9 * 10**15)))
        # The first post of the first job: the form, the lead, the DM, the
        # text or the incoming call (its statuses would be other work).
        post = builders[name].lead(person, now, 0, 0)[0].posts[0]
        if name == "website":
            # Never a repeat of an earlier run's identical bytes.
            post = replace(post, headers={**post.headers, "Idempotency-Key": f"bench-{run}-{i}"})
        posts.append(post)
    return posts


def send_all(url: str, posts: list[Any], concurrency: int) -> tuple[list[tuple[int, float]], float]:
    """(status, latency ms) per post, and the wall time in seconds."""
    import requests

    local = threading.local()

    def send(post: Any) -> tuple[int, float]:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        started = time.perf_counter()
        try:
            response = session.post(url + post.path, data=post.body, headers=post.headers, timeout=(5, 30))
            status = response.status_code
        except requests.RequestException:
            status = 0
        return status, (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="bench") as pool:
        results = list(pool.map(send, posts))
    return results, time.perf_counter() - started


def wait_processed(business_slug: str, since: datetime, expected: int, wait: float) -> dict[str, int]:
    """Poll (bounded) until the events stored since `since` are all processed."""
    from crm.models import InboundEvent

    pending = (InboundEvent.Status.RECEIVED, InboundEvent.Status.PROCESSING)
    deadline = time.monotonic() + wait
    next_report = time.monotonic() + 5
    while True:
        counts = dict(
            Counter(
                InboundEvent.objects.filter(business__slug=business_slug, received_at__gte=since).values_list(
                    "status", flat=True
                )
            )
        )
        left = sum(counts.get(s, 0) for s in pending)
        if (left == 0 and sum(counts.values()) >= expected) or time.monotonic() >= deadline:
            return counts
        if time.monotonic() >= next_report:
            print(f"  … {left} of {sum(counts.values())} events still waiting for the cluster", flush=True)
            next_report += 5
        time.sleep(POLL_SECONDS)


def processing_figures(business_slug: str, since: datetime) -> dict[str, float]:
    from crm.models import InboundEvent

    done = [
        (received, processed)
        for received, processed in InboundEvent.objects.filter(
            business__slug=business_slug, received_at__gte=since, processed_at__isnull=False
        ).values_list("received_at", "processed_at")
        if processed is not None
    ]
    if not done:
        return {}
    window = (max(p for _, p in done) - min(r for r, _ in done)).total_seconds()
    each = [(p - r).total_seconds() * 1000 for r, p in done]
    return {
        "events": len(done),
        "window_s": window,
        "per_lead_ms": window * 1000 / len(done),
        "median_ms": statistics.median(each),
        "p95_ms": percentile(each, 95),
    }


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leadops.settings")
    import django

    django.setup()
    from django.utils import timezone

    from devtools.simulator.core import SimulationError, loopback_url

    url = args.url.rstrip("/")
    if not loopback_url(url):
        print(f"refusing {url}: the benchmark posts to this machine only (127.0.0.1, localhost)", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    try:
        posts = build_posts(args, seed)
    except SimulationError as exc:
        print(f"cannot benchmark: {exc}", file=sys.stderr)
        return 2

    print(f"Posting {len(posts)} webhooks ({', '.join(args.providers)}) to {url} from {args.concurrency} threads")
    since = timezone.now()
    results, wall = send_all(url, posts, args.concurrency)
    latencies = [ms for status, ms in results if status == 200]
    statuses = Counter(status for status, _ in results)
    answers = " ".join(f"{s or 'no answer'}×{n}" for s, n in sorted(statuses.items()))
    print(f"  answers: {answers}")
    print(
        f"  acceptance latency: median {statistics.median(latencies) if latencies else 0:.1f} ms, "
        f"p95 {percentile(latencies, 95):.1f} ms"
    )
    print(f"  throughput: {len(results) / wall:.0f} posts/s ({len(results)} in {wall:.1f} s)")
    if not latencies:
        print("nothing was accepted: is the server running at that URL?", file=sys.stderr)
        return 1

    print(f"Waiting (at most {args.wait:.0f} s) for the task cluster to process them…", flush=True)
    counts = wait_processed(args.business, since, len(latencies), args.wait)
    print(f"  event statuses: {' '.join(f'{s}×{n}' for s, n in sorted(counts.items()))}")
    figures = processing_figures(args.business, since)
    if figures:
        print(
            f"  processing: {figures['events']:.0f} events in a {figures['window_s']:.1f} s window = "
            f"{figures['per_lead_ms']:.1f} ms per lead; received→processed median {figures['median_ms']:.0f} ms, "
            f"p95 {figures['p95_ms']:.0f} ms"
        )
    left = counts.get("received", 0) + counts.get("processing", 0)
    if left:
        print(f"{left} events were still unprocessed after {args.wait:.0f} s: is `manage.py qcluster` running?")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
