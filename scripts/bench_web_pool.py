"""Database connections held by `make run`'s web server under traffic (a
benchmark, not a test: it prints figures), side by side:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leadops .venv/bin/python scripts/bench_web_pool.py

- before: `manage.py runserver --noreload`, what `make run` served with
  (a thread per request, each keeping its connection for CONN_MAX_AGE);
- after: gunicorn with `leadops.gunicorn_conf` (a pool of threads).

Creates a scratch database (`bench_web_pool`, dropped afterwards), starts
each server on it, sends requests each on a new connection from 16 client
threads, and prints per server: requests, answers by class (2xx/3xx, 4xx,
5xx), requests per second and the most connections it held at once. The
runserver run is capped (`--before-requests`, default 80): every request
there keeps a connection, and going past the server's `max_connections`
would fail every other client of the same PostgreSQL meanwhile.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts import bench_servers

PATHS = ("/healthz/", "/app/", "/admin/login/", "/api/v1/leads/", "/app/inbox/")
NAME = "bench_web_pool"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000, help="requests to the pooled server (%(default)s)")
    parser.add_argument("--before-requests", type=int, default=80, help="requests to runserver (%(default)s)")
    return parser.parse_args(argv)


def connections_now() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            [NAME],
        )
        return int(cursor.fetchone()[0])


def wait_serving(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/healthz/", timeout=2).read()  # noqa: S310 (our own server)
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within 60 s")


def hammer(url: str, count: int) -> tuple[Counter[str], float, int]:
    """`count` requests from 16 client threads while this thread watches the
    server's connections (its own, the only one this process holds, is not
    counted)."""
    answers: Counter[str] = Counter()

    def get(i: int) -> str:
        request = urllib.request.Request(url + PATHS[i % len(PATHS)], headers={"Connection": "close"})  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                return f"{response.status // 100}xx"
        except urllib.error.HTTPError as exc:
            return f"{exc.code // 100}xx"
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return "refused"

    def load() -> None:
        with ThreadPoolExecutor(max_workers=16) as pool:
            answers.update(pool.map(get, range(count)))

    loader = threading.Thread(target=load)
    start = time.monotonic()
    loader.start()
    most = 0
    while loader.is_alive():
        most = max(most, connections_now())
        loader.join(0.05)
    took = time.monotonic() - start
    time.sleep(0.3)  # what the server still holds once the traffic stops
    return answers, count / took, max(most, connections_now())


def run(label: str, command: list[str], port: int, count: int) -> str:
    process = subprocess.Popen(  # noqa: S603 (our own server, our arguments)
        command,
        cwd=bench_servers.ROOT,
        env=bench_servers.server_env({"WEB_BIND": f"127.0.0.1:{port}"}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_serving(url)
        answers, rate, most = hammer(url, count)
    finally:
        bench_servers.process_stop(process)
    by_class = ", ".join(f"{k} {v}" for k, v in sorted(answers.items()))
    return f"{label:<38} {count:>6} requests  {rate:>6.0f}/s  {by_class:<28} most connections held: {most}"


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    bench_servers.django_setup(NAME)
    name = bench_servers.scratch_database_create()
    try:
        python = sys.executable
        before_port, after_port = bench_servers.free_port(), bench_servers.free_port()
        before = [python, "manage.py", "runserver", "--noreload", f"127.0.0.1:{before_port}"]
        after = [python, "-m", "gunicorn", "leadops.wsgi:application", "-c", "python:leadops.gunicorn_conf"]
        print(bench_servers.load_average())
        print(run("before: runserver (thread per request)", before, before_port, args.before_requests))
        print(run("after: gunicorn, 2 workers × 4 threads", after, after_port, args.requests))
    finally:
        bench_servers.scratch_database_drop(name)


if __name__ == "__main__":
    main(sys.argv[1:])
