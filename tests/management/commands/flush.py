"""The test runs' flush (between transactional tests: `transactional_db`,
`live_server`): crm's flush, with DELETE in place of TRUNCATE.

Django empties the database after each transactional test with one TRUNCATE
of every table (about 56 here), which gives each table and index new files:
half a second a flush, where the tables a test filled hold a few rows and
DELETE takes milliseconds. Under `session_replication_role = replica` no
trigger of ours and no foreign-key check fires, as none does for TRUNCATE
(whose guard on the receipts crm's flush lifts), so the order of the tables
does not matter; what is left is what TRUNCATE leaves (empty tables, the
sequences where they were), and post_migrate runs as after any flush.

Only that call (no sequence reset, not interactive, a superuser, which the
test databases' owner is) takes this path; anything else is crm's flush as
it is, which tests/crm/test_flush.py runs itself.
"""

from __future__ import annotations

from contextlib import suppress
from importlib import import_module
from typing import Any

from django.apps import apps
from django.core.management.sql import emit_post_migrate_signal
from django.db import connections, transaction

from crm.management.commands import flush as crm_flush


class Command(crm_flush.Command):
    def handle(self, **options: Any) -> None:
        connection = connections[options["database"]]
        if options.get("reset_sequences", True) or options["interactive"] or not _superuser(connection):
            super().handle(**options)
            return
        # As Django's flush: every app's management module, for the post_migrate handlers it connects.
        for app_config in apps.get_app_configs():
            with suppress(ImportError):
                import_module(".management", app_config.name)
        tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")
            for table in tables:
                cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")
        if tables and not options.get("inhibit_post_migrate", False):
            emit_post_migrate_signal(options["verbosity"], False, options["database"])


def _superuser(connection: Any) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SHOW is_superuser")
        return bool(cursor.fetchone()[0] == "on")
