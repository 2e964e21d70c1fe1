from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from crm.fields import field_keys_rotate


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored secret (source secrets, page tokens) with the first key of "
        "FIELD_ENCRYPTION_KEYS; afterwards the older keys can be dropped from the list."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        for table, count in field_keys_rotate().items():
            self.stdout.write(f"{table}: {count} row(s) re-encrypted with the first key")
