"""Owner-assignment benchmark (a benchmark, not a test: it prints figures).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leadops_bench .venv/bin/python scripts/bench_assign.py \\
        --leads 2000 --threads 8 --setters 3

Creates a throwaway business (slug `bench-assign-<random>`) with `--setters`
setters weighted 2:1:1:…, opens `--leads` leads, then routes them all from
`--threads` threads at once through `agents.routing.assign.lead_route` — the
same locked weighted round robin the orchestrator uses, receipts included.
Prints leads routed per second, latency per routing (median, p95), and the
split per setter against the weights. Needs PostgreSQL (DATABASE_URL, or the
embedded one `make run` starts); it leaves the business behind for inspection.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--leads", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--setters", type=int, default=3)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leadops.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from agents.routing.assign import lead_route
    from crm.models import Business, Lead, Role
    from tests.factories import lead_create, member_create

    business = Business.objects.create(slug=f"bench-assign-{secrets.token_hex(3)}", name="Bench", timezone="UTC")
    weights = [2] + [1] * (args.setters - 1)
    for n, weight in enumerate(weights):
        member_create(business, Role.SETTER, username=f"{business.slug}-s{n}", weight=weight)
    t0 = time.perf_counter()
    leads = [
        lead_create(business, first_name=f"B{i}", phone=f"+1212555{i % 10000:04d}", email=f"b{i}@example.com")
        if i < 10000
        else None
        for i in range(args.leads)
    ]
    leads = [lead for lead in leads if lead is not None]
    print(f"opened {len(leads)} leads in {time.perf_counter() - t0:.1f}s")

    latencies: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(args.threads)

    def worker(chunk: list[Lead]) -> None:
        try:
            barrier.wait()
            for lead in chunk:
                started = time.perf_counter()
                lead_route(lead)
                with lock:
                    latencies.append(time.perf_counter() - started)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(leads[i :: args.threads],)) for i in range(args.threads)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    split = Counter(Lead.objects.filter(business=business).values_list("owner__user__username", flat=True))
    total_weight = sum(weights)
    print(
        f"routed {len(latencies)} leads from {args.threads} threads in {elapsed:.2f}s: "
        f"{len(latencies) / elapsed:.0f} leads/s"
    )
    ordered = sorted(latencies)
    p95 = ordered[max(0, round(0.95 * len(ordered)) - 1)]
    print(f"per routing: median {statistics.median(ordered) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms")
    for n, weight in enumerate(weights):
        name = f"{business.slug}-s{n}"
        expected = len(leads) * weight / total_weight
        print(f"  {name}: weight {weight}, {split[name]} leads (expected {expected:.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
