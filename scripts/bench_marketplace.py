"""Speed to a marketplace lead: from a Thumbtack lead reaching our server to
our first reply reaching Thumbtack, at a sustained rate (a benchmark, not a
test: it prints figures).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leadops .venv/bin/python scripts/bench_marketplace.py \\
        [--rate 5 --seconds 60]

Creates a scratch database beside DATABASE_URL's (`bench_marketplace`, or
BENCH_DATABASE_NAME; dropped afterwards unless --keep), loads the demo
business file (its `thumbtack` source), serves Thumbtack's API from the
simulator's stand-in in this process, and starts gunicorn (2 sync workers)
and one `qcluster` with the settings' defaults and SEND_MODE=live, the API
pointed at the stand-in. Then it posts `--rate` new negotiations a second
for `--seconds` (each a different customer, without consent to text, as
Thumbtack sends them), paced, and measures for each the time from the start
of its POST to the stand-in taking our acknowledgement in that thread:
p50, p95, max, and how many got none within --wait.

Beside it, in the same run and at the same rate, the baseline: website
leads with consent to text, the time until their acknowledgement text was
decided (the path every lead took before marketplaces; texts go nowhere in
this run, so its figure stops at the decision, not at a provider).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import bench_servers
from scripts.bench_webhooks import percentile

SOURCE_KEY, SECRET, BUSINESS_ID = "thumbtack", "demo-thumbtack-webhook-password", "286845156044809661"


def negotiation(n: int) -> tuple[str, bytes]:
    """One new Thumbtack lead of its own customer: (negotiation id, body)."""
    negotiation_id = f"5{n:017d}"
    body = {
        "webhookID": f"9{n:017d}",
        "eventType": "NegotiationCreatedV4",
        "data": {
            "negotiationID": negotiation_id,
            "createTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "business": {"businessID": BUSINESS_ID},
            "customer": {"customerID": f"3{n:017d}", "displayName": f"Customer {n} B."},
            "request": {
                "requestID": f"4{n:017d}",
                "category": {"categoryID": "219267776679133447", "name": "Furnace Repair"},
                "description": "The furnace blows cold air since this morning.",
                "location": {"city": "Chicago", "state": "IL", "zipCode": "60614"},
                "details": [{"question": "When do you need this done?", "answer": "As soon as possible"}],
            },
        },
    }
    return negotiation_id, json.dumps(body, separators=(",", ":")).encode()


def stand_in() -> Any:
    """The simulator's Thumbtack stand-in, noting when each thread's first
    message from us arrives (monotonic clock, this process)."""
    from devtools.simulator.marketplace_api import MarketplaceServer

    class Timed(MarketplaceServer):
        def __init__(self) -> None:
            super().__init__()
            self.first_reply: dict[str, float] = {}

        def _thumbtack(self, method: str, parts: list[str], body: Any) -> tuple[int, Any]:
            arrived = time.monotonic()
            answer = super()._thumbtack(method, parts, body)
            if method == "POST" and answer[0] == 201:
                with self.lock:
                    self.first_reply.setdefault(parts[3], arrived)
            return answer

    return Timed().start()


def post_paced(port: int, posts: list[tuple[str, str, bytes, dict[str, str]]], rate: float) -> dict[str, float]:
    """POST each (id, path, body, headers) at `rate` per second; each id's
    start time (monotonic), for the 200s only."""
    import http.client

    started: dict[str, float] = {}
    lock = threading.Lock()
    begin = time.monotonic()

    def send(indexed: tuple[int, tuple[str, str, bytes, dict[str, str]]]) -> None:
        index, (ident, path, body, headers) = indexed
        delay = begin + index / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        at = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            ok = response.status == 200
        except (OSError, http.client.HTTPException):
            ok = False
        finally:
            conn.close()
        if ok:
            with lock:
                started[ident] = at

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(send, enumerate(posts)))
    return started


def figures(seconds: list[float], expected: int) -> str:
    if not seconds:
        return f"none of {expected}"
    return (
        f"p50 {statistics.median(seconds):.2f} s, p95 {percentile(seconds, 95):.2f} s, max {max(seconds):.2f} s "
        f"({len(seconds)} of {expected})"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=5.0, help="leads per second (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=60.0, help="(default %(default)s)")
    parser.add_argument("--wait", type=float, default=120.0, help="max seconds to wait for the replies")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args(argv)
    bench_servers.django_setup(os.environ.get("BENCH_DATABASE_NAME", "bench_marketplace"))
    from django.db import connection
    from django.utils import timezone

    from agents.capture.providers.thumbtack import basic_authorization
    from devtools.polling import poll_until
    from scripts.bench_burst import decided, website_posts

    name = bench_servers.scratch_database_create()
    server = stand_in()
    processes = []
    try:
        from crm.services.business_file import business_file_load

        business_file_load(bench_servers.ROOT / "demo" / "acme-hvac.yaml")
        count = int(args.rate * args.seconds)
        headers = {
            "Content-Type": "application/json",
            "Authorization": basic_authorization(SOURCE_KEY, SECRET),
        }
        leads = [
            (ident, f"/hooks/thumbtack/{SOURCE_KEY}/", body, headers) for ident, body in map(negotiation, range(count))
        ]
        baseline = [(str(i), p.path, p.body, p.headers) for i, p in enumerate(website_posts(count, 7))]
        connection.close()
        env = {"SEND_MODE": "live", "THUMBTACK_API_URL": server.url}
        port = bench_servers.free_port()
        processes.append(bench_servers.gunicorn_start(bench_servers.ROOT, port, env=env))
        processes.append(bench_servers.qcluster_start(bench_servers.ROOT, env=env))
        print(f"gunicorn (2 workers) and qcluster (defaults), SEND_MODE=live; {bench_servers.load_average()}")
        time.sleep(3)  # the cluster's workers start

        started = post_paced(port, leads, args.rate)
        poll_until(lambda: len(server.first_reply) >= len(started), timeout=args.wait)
        with server.lock:
            replies = dict(server.first_reply)
        latency = [replies[i] - at for i, at in started.items() if i in replies]
        print(
            f"thumbtack: {count} leads posted at {args.rate:g}/s; first reply in the thread after receipt: "
            f"{figures(latency, len(started))}"
        )

        since = timezone.now()
        accepted = post_paced(port, baseline, args.rate)
        done = decided(since)

        def all_decided() -> bool:
            done[:] = decided(since)  # the last look is what is reported
            return len(done) >= len(accepted)

        poll_until(all_decided, timeout=args.wait)
        waits = [(at - received).total_seconds() for received, at in done]
        print(
            f"baseline, website leads at {args.rate:g}/s: acknowledgement text decided after receipt: "
            f"{figures(waits, len(accepted))}"
        )
        print(bench_servers.load_average())
    finally:
        for process in processes:
            bench_servers.process_stop(process)
        server.close()
        if args.keep:
            print(f"kept database {name}")
        else:
            bench_servers.scratch_database_drop(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
