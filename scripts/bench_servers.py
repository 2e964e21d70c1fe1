"""What the server benchmarks share: a scratch database, and gunicorn and
`qcluster` processes started from a checkout (this one, or another such as
the main branch's, to measure before and after side by side).

A process is started in its own session, so stopping it ends its workers too.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
FLOOR_PATH = Path(__file__).resolve().parent / "bench_floor"
VENV_BIN = Path(sys.executable).parent
# A scratch database's servers: a public throwaway key (unless one is set).
BENCH_SECRET_KEY = "bench-only-insecure-key-never-use-it-to-serve-anything-0123456789"  # noqa: S105


def django_setup(database_name: str) -> None:
    """Django in this process, its test machinery pointed at `database_name`."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leadops.settings")
    os.environ.setdefault("SECRET_KEY", BENCH_SECRET_KEY)
    os.environ["TEST_DATABASE_NAME"] = database_name
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()  # ALLOWED_HOSTS accepts the in-process client's host (`testserver`)
    if connection.vendor != "postgresql":
        sys.exit("the benchmark needs PostgreSQL: set DATABASE_URL=postgres://…")


def scratch_database_create() -> str:
    """Create (clobbering) and migrate the scratch database; this process's
    connection points at it afterwards."""
    from django.db import connection

    return str(connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False, keepdb=False))


def scratch_database_drop(name: str) -> None:
    from django.db import connection

    from agents.capture.source_cache import SOURCES

    SOURCES.stop()  # its listener's own connection, if a webhook started it here
    connection.close()
    connection.creation.destroy_test_db(name, verbosity=0)


def database_url() -> str:
    """The URL of the database this process is connected to, for the servers."""
    from django.db import connection

    s = connection.settings_dict
    host = s.get("HOST") or ""
    if host.startswith("/"):
        return f"postgres://{s['USER']}@/{s['NAME']}?host={quote(host, safe='/')}"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    password = f":{quote(s['PASSWORD'])}" if s.get("PASSWORD") else ""
    return f"postgres://{s['USER']}{password}@{host}{port}/{s['NAME']}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a started server: this one's, minus what would
    change the defaults being measured, plus the database URL."""
    env = {k: v for k, v in os.environ.items() if k not in ("CONN_MAX_AGE", "TEST_DATABASE_NAME", "PYTHONPATH")}
    env.update({"DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "leadops.settings", "DEBUG": "false"})
    env.setdefault("SECRET_KEY", BENCH_SECRET_KEY)
    env.update(extra or {})
    return env


def gunicorn_start(
    tree: Path, port: int, *, workers: int = 2, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """gunicorn as production runs it (sync workers), serving `tree`'s code
    and the floor endpoint; returns once it answers."""
    full_env = server_env(
        {"DJANGO_SETTINGS_MODULE": "leadops_bench_settings", "PYTHONPATH": str(FLOOR_PATH), **(env or {})}
    )
    # Its log goes to a file, never to a pipe nobody reads while it runs:
    # once a pipe's buffer fills (a line per enqueue does it after a few
    # thousand webhooks) every write blocks, and the workers hang with it.
    log = tempfile.NamedTemporaryFile(prefix="bench-gunicorn-", suffix=".log", delete=False)  # noqa: SIM115
    command = [str(VENV_BIN / "gunicorn"), "--chdir", str(tree), "--workers", str(workers)]
    command += ["--bind", f"127.0.0.1:{port}", "--log-level", "warning", "leadops.wsgi:application"]
    process = subprocess.Popen(  # noqa: S603 (our own gunicorn, our arguments)
        command, env=full_env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True
    )
    log.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited: {Path(log.name).read_text(errors='replace')[-2000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz/", timeout=2).read()
            return process
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    process_stop(process)
    raise RuntimeError("gunicorn did not answer within 60 s")


def qcluster_start(tree: Path, *, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 (our own manage.py)
        [sys.executable, "manage.py", "qcluster"],
        cwd=tree,
        env=server_env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def process_stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"
