"""Real server processes against the test database: gunicorn web processes
and `manage.py qcluster` task clusters, each in its own session so that
stopping one ends every process it forked (a cluster's workers must not
outlive the test and poll its database)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.helpers.database import test_database_url
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Process:
    popen: subprocess.Popen[bytes]
    log: Path  # stdout and stderr: a file, not a pipe nobody reads (a busy cluster logs a line per task)
    url: str = ""  # a web process's base URL

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def terminate(self) -> None:
        """Ask it and everything it forked to stop (stop() waits for it)."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)

    def stop(self) -> str:
        """Stop it and everything it forked; returns what it printed."""
        self.terminate()
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        text = self.output()
        self.log.unlink(missing_ok=True)
        return text


def process_env(**overrides: str) -> dict[str, str]:
    """This test process's environment pointed at its test database, with
    neither Redis setting unless given (a developer's own must not leak in)."""
    env = {**os.environ, "DATABASE_URL": test_database_url(), "DEBUG": "false"}
    env.pop("REDIS_URL", None)
    env.pop("Q_BROKER", None)
    env.update(overrides)
    return env


def _start(command: list[str], env: dict[str, str], url: str = "") -> Process:
    fd, name = tempfile.mkstemp(prefix="leadops-process-", suffix=".log")
    with os.fdopen(fd, "wb") as log:
        popen = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Process(popen, Path(name), url)


def gunicorn_start(env: dict[str, str], *, workers: int = 1) -> Process:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "leadops.wsgi:application",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--log-level",
        "warning",
    ]
    return _start(command, env, f"http://127.0.0.1:{port}")


def qcluster_start(env: dict[str, str]) -> Process:
    return _start([sys.executable, "manage.py", "qcluster"], env)


def wait_until_serving(web: Process, *, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while True:
        if web.popen.poll() is not None:
            raise AssertionError(f"{web.url} exited early:\n{web.stop()[-3000:]}")
        try:
            requests.get(web.url + "/healthz/", timeout=5)
            return
        except (requests.ConnectionError, requests.Timeout):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
