"""Backups restore: a dump of a seeded database, restored into a fresh one,
holds the same rows and passes the receipt and lead checks."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from crm.models import Business, Role
from crm.services import lead_sync
from crm.services.backups import backup_due, backups_prune
from crm.services.next_action import next_action_set
from tests.factories import lead_create, member_create
from tests.helpers.database import admin_connection, sibling_database_url
from tests.processes import process_env

ROOT = Path(__file__).resolve().parents[2]

TABLES = ("crm_lead", "crm_contact", "crm_receipt")


def _copy_name() -> str:
    # Beside this worker's own test database: two workers, or two runs, never share one.
    return f"{connection.settings_dict['NAME']}_restored"


def _counts(conn: psycopg.Connection[tuple[object, ...]]) -> dict[str, int]:
    counts = {}
    for table in TABLES:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert row is not None
        counts[table] = int(str(row[0]))
    return counts


@pytest.fixture
def empty_copy() -> Iterator[str]:
    copy = _copy_name()
    with admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{copy}"')
    yield sibling_database_url(copy)
    with admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)')


@pytest.mark.django_db(transaction=True)
def test_backup_restores_whole(tmp_path: Path, empty_copy: str, capsys: pytest.CaptureFixture[str]) -> None:
    business = Business.objects.create(slug="bak", name="Backup Co", timezone="America/Chicago", region="US")
    setter = member_create(business, Role.SETTER)
    for n in range(3):
        lead = lead_create(business, first_name=f"Pat{n}", phone=f"+1212555014{n}")
        # A worked lead (an owner, one next action): what audit_leads expects of every active one.
        lead = lead_sync.lead_assign(lead, setter, actor="t", reason="t")
        next_action_set(lead, "Call", timezone.now() + timedelta(hours=1), actor="t", reason="t")
    with connection.cursor() as cursor:
        source = {}
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM {table}")
            source[table] = cursor.fetchone()[0]
    assert source["crm_lead"] == 3 and source["crm_receipt"] > 0

    call_command("backup", to=str(tmp_path))
    dumps = list(tmp_path.glob("leadops-*.dump"))
    assert len(dumps) == 1 and dumps[0].stat().st_size > 0
    assert not list(tmp_path.glob("*.partial"))

    capsys.readouterr()
    call_command("restore", str(dumps[0]), database_url=empty_copy)
    out = capsys.readouterr().out
    assert "verify_receipts: ok" in out and "audit_leads: ok" in out, out
    with psycopg.connect(empty_copy) as copy:
        assert _counts(copy) == source

    # The copy now has tables: a second restore into it is refused.
    with pytest.raises(CommandError, match="restore into an empty one"):
        call_command("restore", str(dumps[0]), database_url=empty_copy)


@pytest.mark.django_db(transaction=True)
def test_failed_dump_leaves_no_file(tmp_path: Path) -> None:
    params = settings.DATABASES["default"]
    port = params["PORT"]
    params["PORT"] = "1"  # nothing listens there
    connection.close()
    try:
        with pytest.raises(CommandError, match="cannot reach"):
            call_command("backup", to=str(tmp_path))
    finally:
        params["PORT"] = port
        connection.close()
    assert list(tmp_path.iterdir()) == []


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    names = [f"leadops-2026120{day}-030000.dump" for day in range(1, 6)]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("kept")
    removed = backups_prune(tmp_path, 2)
    assert sorted(p.name for p in removed) == names[:3]
    assert sorted(p.name for p in tmp_path.iterdir()) == [*names[3:], "notes.txt"]


@pytest.mark.django_db(transaction=True)
def test_the_scheduled_backup_runs_only_when_due(tmp_path: Path, settings: Any) -> None:
    settings.BACKUP_DIR = tmp_path
    settings.BACKUP_SCHEDULE_HOURS = 0
    assert backup_due(now=timezone.now()) is None and list(tmp_path.iterdir()) == []
    settings.BACKUP_SCHEDULE_HOURS = 24
    made = backup_due(now=timezone.now())
    assert made is not None and made.path.exists()
    # The newest is an hour old: not due yet.
    assert backup_due(now=timezone.now() + timedelta(hours=1)) is None
    assert backup_due(now=timezone.now() + timedelta(hours=25)) is not None
    assert len(list(tmp_path.glob("leadops-*.dump"))) == 2


def test_finding_the_dump_tool_warns_nothing_where_no_runtime_directory_is_set() -> None:
    """With DATABASE_URL (no embedded server started), a backup finds pg_dump
    without importing the embedded wheel, whose import asks platformdirs for
    a runtime directory and warns where XDG_RUNTIME_DIR is unset (containers,
    CI, a systemd service): a warning in every scheduled backup's log. In a
    process of its own, as this one may have imported the wheel already."""
    code = "import django; django.setup()\nfrom crm.services.backups import pg_tool\nprint(pg_tool('pg_dump', 15)[0])\n"
    env = {k: v for k, v in process_env().items() if k != "XDG_RUNTIME_DIR"}
    env["DJANGO_SETTINGS_MODULE"] = "leadops.settings_test"
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert Path(result.stdout.strip()).name == "pg_dump"
