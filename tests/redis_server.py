"""A Redis server for the tests that need one.

By default a private `redis-server` on a free port, in a temporary directory,
with nothing persisted: no test run ever shares (or flushes) a Redis that
something else uses, and two runs on one machine do not collide. With
`REDIS_TEST_URL` set (CI's second pass: the machine's own Redis), that server
and database instead, flushed when the run starts. Without either, the tests
that need Redis fail and say which package to install: a missing Redis is a
broken setup, not a reason to skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import redis

MISSING = (
    "these tests need Redis: install Debian's `redis-server` package (`apt-get install redis-server`; "
    "`make test` does it when run as root), or set REDIS_TEST_URL to a Redis database they may flush"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_ping(url: str, *, deadline_s: float = 20.0) -> None:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            if client.ping():
                return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def redis_available() -> bool:
    return bool(os.environ.get("REDIS_TEST_URL") or shutil.which("redis-server"))


def worker_database(url: str) -> str:
    """Under pytest-xdist each worker flushes a database of its own: the
    given one for the first worker, the ones below it for the others
    (`/15` → gw0 on 15, gw1 on 14), so one worker never empties another's."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker:
        return url
    index = int(worker.removeprefix("gw"))
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    if base - index < 0:
        raise RuntimeError(f"REDIS_TEST_URL {url}: too low a database number for worker {worker}")
    return urlunsplit(parts._replace(path=f"/{base - index}"))


@contextmanager
def redis_server() -> Iterator[str]:
    """Yields the URL of an empty Redis database."""
    shared = os.environ.get("REDIS_TEST_URL", "")
    if shared:
        shared = worker_database(shared)
        wait_for_ping(shared, deadline_s=5)
        redis.Redis.from_url(shared).flushdb()
        yield shared
        return
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(MISSING)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="leadops-redis-") as workdir:
        # No snapshots, no append-only file: a throwaway server.
        server = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
                "--logfile",
                os.path.join(workdir, "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"redis://127.0.0.1:{port}/0"
            wait_for_ping(url)
            yield url
        finally:
            server.terminate()
            server.wait(timeout=10)
