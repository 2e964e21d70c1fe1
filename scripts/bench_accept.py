"""Webhook acceptance against a floor, side by side (a benchmark, not a test).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leadops .venv/bin/python scripts/bench_accept.py \\
        --seconds 10 --rounds 2 [--baseline-tree /path/to/other/checkout]

Creates a scratch database beside DATABASE_URL's (`bench_accept`, or
BENCH_DATABASE_NAME; dropped afterwards unless --keep), loads the demo
business file, and starts gunicorn (2 sync workers, as production runs it,
with the settings' defaults: CONN_MAX_AGE is taken out of the environment)
serving this checkout plus a floor endpoint (scripts/bench_floor: a bare DRF
endpoint that parses the body and inserts one row). It then hammers, from
`--connections` client threads for `--seconds` each, the floor and the real
Google Ads webhook (signed with the source's key, a new lead id every post),
in turns, `--rounds` times, and prints each one's accepted requests per
second and the ratio to the floor measured in the same round (ratios survive
a loaded machine; absolute rates do not).

The client is `wrk` when it is on the PATH (Debian's package `wrk`; a Lua
script gives every request its own lead id), else Python threads (`--client
threads`): wrk costs the two cores far less, so its figures are the ones to
compare with a web server's; the threads' client takes a share of the same
cores and flattens the difference.

With `--baseline-tree` the same is done, in the same rounds, against another
checkout (e.g. the main branch's worktree) served by its own gunicorn over the
same database, so before and after come from one run. No task cluster runs:
the accepted events stay queued and go with the scratch database.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import bench_servers

GOOGLE_ADS_PATH = "/hooks/google-ads/gads-main/"
GOOGLE_ADS_KEY = "demo-google-ads-key-acme"  # the demo file's, public
FLOOR = "/bench/floor/"


def google_ads_body(lead_id: str) -> bytes:
    return json.dumps(
        {
            "lead_id": lead_id,
            "google_key": GOOGLE_ADS_KEY,
            "api_version": "1.0",
            "form_id": 40000000001,
            "campaign_id": 20000000001,
            "gcl_id": "EAIaIQbench",
            "adgroup_id": 30000000001,
            "creative_id": 50000000001,
            "is_test": False,
            "user_column_data": [
                {"column_id": "FULL_NAME", "column_name": "Full Name", "string_value": "Pat Bench"},
                {"column_id": "PHONE_NUMBER", "column_name": "User Phone", "string_value": "+13125550177"},
                {"column_id": "POSTAL_CODE", "column_name": "Postal Code", "string_value": "60601"},
            ],
        }
    ).encode()


def hammer(port: int, path: str, seconds: float, connections: int) -> tuple[float, dict[int, int]]:
    """Requests answered 200 per second, and every status seen (0: no answer)."""
    run = secrets.token_hex(4)
    counter = itertools.count()
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    start = threading.Barrier(connections + 1)

    def client() -> None:
        seen: dict[int, int] = {}
        start.wait()
        while time.monotonic() < deadline:
            body = google_ads_body(f"bench-{run}-{next(counter)}")
            # gunicorn's sync workers close every connection after one
            # answer, so each request opens its own, as a provider's would.
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                status = 0
            finally:
                conn.close()
            seen[status] = seen.get(status, 0) + 1
        with lock:
            for status, n in seen.items():
                statuses[status] = statuses.get(status, 0) + n

    threads = [threading.Thread(target=client) for _ in range(connections)]
    for thread in threads:
        thread.start()
    began = time.monotonic()
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - began
    return statuses.get(200, 0) / elapsed, statuses


# Each wrk thread has its own Lua state: `setup` numbers them so that lead ids
# never repeat across threads (a repeat is answered as a duplicate, a cheaper
# path than a new lead's). `done` prints the counts the script reads back.
WRK_SCRIPT = """
local threads, n = 0, 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
request = function()
  n = n + 1
  local body = string.gsub(template, "LEAD_ID", prefix .. "-" .. tid .. "-" .. n)
  return wrk.format("POST", path, {["Content-Type"] = "application/json"}, body)
end
function done(summary, latency, requests)
  io.write(string.format("WRK %d %d %d %d\\n", summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.duration))
end
"""


def hammer_wrk(port: int, path: str, seconds: float, connections: int) -> tuple[float, dict[int, int]]:
    """The same with wrk (2 threads, `connections` connections): requests
    answered 2xx per second; the counts of non-2xx (`-1`) and of socket
    errors (0)."""
    template = google_ads_body("LEAD_ID").decode()
    lua = (
        f"template = {json.dumps(template)}\nprefix = {json.dumps(secrets.token_hex(4))}\n"
        f"path = {json.dumps(path)}\n" + WRK_SCRIPT
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(lua)
        script.flush()
        out = subprocess.run(  # noqa: S603 - wrk from the PATH, our own arguments
            [  # noqa: S607
                "wrk",
                "-t2",
                f"-c{connections}",
                f"-d{max(int(seconds), 1)}s",
                "-s",
                script.name,
                f"http://127.0.0.1:{port}{path}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    line = next(row for row in out.splitlines() if row.startswith("WRK "))
    requests, non_2xx, socket_errors, micros = (int(x) for x in line.split()[1:])
    ok = requests - non_2xx
    return ok / (micros / 1e6), {200: ok, -1: non_2xx, 0: socket_errors}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="per endpoint and round (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="turns of floor then webhook (default %(default)s)")
    parser.add_argument("--connections", type=int, default=8, help="client threads (default %(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default %(default)s)")
    parser.add_argument("--baseline-tree", type=Path, help="another checkout to measure in the same rounds")
    parser.add_argument("--conn-max-age", help="set CONN_MAX_AGE for the servers (default: the settings' default)")
    parser.add_argument("--client", choices=["wrk", "threads"], help="the load generator (default: wrk when installed)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    bench_servers.django_setup(os.environ.get("BENCH_DATABASE_NAME", "bench_accept"))
    from crm.services.business_file import business_file_load

    name = bench_servers.scratch_database_create()
    env = {} if args.conn_max_age is None else {"CONN_MAX_AGE": args.conn_max_age}
    trees = {"this": bench_servers.ROOT}
    if args.baseline_tree:
        trees["baseline"] = args.baseline_tree.resolve()
    servers = {}
    try:
        business_file_load(bench_servers.ROOT / "demo" / "acme-hvac.yaml")
        from django.db import connection

        connection.close()  # the servers' connections are the ones measured
        for label, tree in trees.items():
            port = bench_servers.free_port()
            servers[label] = (port, bench_servers.gunicorn_start(tree, port, workers=args.workers, env=env))
        print(
            f"gunicorn ({args.workers} sync workers) per checkout, {args.connections} connections, "
            f"{args.seconds:.0f} s per endpoint, {args.rounds} rounds; CONN_MAX_AGE "
            f"{args.conn_max_age if args.conn_max_age is not None else 'default'}; {bench_servers.load_average()}"
        )
        client = args.client or ("wrk" if shutil.which("wrk") else "threads")
        load = hammer_wrk if client == "wrk" else hammer
        print(f"client: {client}")
        ratios: dict[str, list[float]] = {label: [] for label in trees}
        for round_no in range(1, args.rounds + 1):
            for label, (port, _) in servers.items():
                floor, floor_statuses = load(port, FLOOR, args.seconds, args.connections)
                hook, hook_statuses = load(port, GOOGLE_ADS_PATH, args.seconds, args.connections)
                ratio = hook / floor if floor else 0.0
                ratios[label].append(ratio)
                print(
                    f"round {round_no} {label:<8} floor {floor:7.1f}/s  google-ads {hook:7.1f}/s  "
                    f"ratio {ratio:.2f}x   (answers: floor {floor_statuses}, hook {hook_statuses})",
                    flush=True,
                )
        for label, values in ratios.items():
            print(
                f"{label:<8} {trees[label]}: webhook/floor ratio median {statistics.median(values):.2f}x over "
                f"{len(values)} rounds"
            )
        print(bench_servers.load_average())
    finally:
        for _, process in servers.values():
            bench_servers.process_stop(process)
        if args.keep:
            print(f"kept database {name}")
        else:
            bench_servers.scratch_database_drop(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
