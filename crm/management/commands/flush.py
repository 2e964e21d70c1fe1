"""Django's `flush`, allowed past the receipts' TRUNCATE guard.

Flushing empties every table of the database (every business, every chain),
which is a wipe, not an edit of one chain's history; a bare TRUNCATE of the
receipts stays refused (crm.db_triggers). Test runs flush between
transactional tests through this command too.
"""

from typing import Any

from django.core.management.commands import flush
from django.db import connections

from crm.db_triggers import TRUNCATE_ALLOWED_SETTING


class Command(flush.Command):
    def handle(self, **options: Any) -> None:
        connection = connections[options["database"]]
        with connection.cursor() as cursor:
            cursor.execute(f"SET {TRUNCATE_ALLOWED_SETTING} = 'on'")
        try:
            super().handle(**options)
        finally:
            with connection.cursor() as cursor:
                cursor.execute(f"RESET {TRUNCATE_ALLOWED_SETTING}")
