"""crm's squashed migration builds the schema the originals build.

A new install runs `crm.0001_squashed_0054_plural_names`; an install that
has any of the 55 migrations it replaces runs the originals. Both must end
in the same database, or an upgrade and a new install would differ. This
test builds two new databases beside its own, one by `manage.py migrate`
(which picks the squash) and one by the originals, each in its own process,
and compares their catalogues: every column, constraint, index, trigger, guard
function, extension and recorded migration."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests.helpers.catalogue import schema_catalogue
from tests.helpers.database import admin_connection, sibling_database_url
from tests.processes import process_env

ROOT = Path(__file__).resolve().parents[2]

# 0041 renamed JobRun to PeriodicRun: RenameModel renames the table, not the
# primary key and check constraints PostgreSQL named after the old one. The
# squash creates them under the new name; nothing refers to either name.
RENAMED = ("crm_jobrun_", "crm_periodicrun_")


def _normalised(catalogue: dict[str, set[tuple[object, ...]]]) -> dict[str, set[tuple[object, ...]]]:
    old, new = RENAMED
    return {kind: {tuple(str(v).replace(old, new) for v in row) for row in rows} for kind, rows in catalogue.items()}


def _built(suffix: str, *args: str) -> str:
    """A new database beside this run's, migrated by `python *args` in its own process."""
    name = f"{connection.settings_dict['NAME']}_{suffix}"
    with admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    env = process_env(DATABASE_URL=sibling_database_url(name))
    subprocess.run([sys.executable, *args], cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    return name


@pytest.fixture
def two_databases(django_db_setup: None) -> Iterator[tuple[str, str]]:
    names = []
    try:
        names.append(_built("squashed", "manage.py", "migrate"))
        names.append(_built("originals", "-m", "tests.helpers.migration_paths"))
        yield names[0], names[1]
    finally:
        with admin_connection() as admin:
            for name in names:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _catalogue(name: str) -> dict[str, set[tuple[object, ...]]]:
    with psycopg.connect(sibling_database_url(name)) as conn, conn.cursor() as cursor:
        return schema_catalogue(cursor)


def test_a_new_database_is_built_by_the_squash_and_matches_the_originals(two_databases: tuple[str, str]) -> None:
    squashed, originals = (_catalogue(name) for name in two_databases)
    # The primary key named after the model's current name shows which path built each.
    assert ("crm_periodicrun", "crm_periodicrun_pkey", "p", "PRIMARY KEY (id)") in squashed["constraints"]
    assert ("crm_periodicrun", "crm_jobrun_pkey", "p", "PRIMARY KEY (id)") in originals["constraints"]
    assert originals["migrations"] == squashed["migrations"]
    assert len(squashed["triggers"]) > 50 and len(squashed["functions"]) > 10
    for kind in squashed:
        only_squash = _normalised(squashed)[kind] - _normalised(originals)[kind]
        only_originals = _normalised(originals)[kind] - _normalised(squashed)[kind]
        assert (kind, only_squash, only_originals) == (kind, set(), set())
