from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from crm.services.backups import BackupError, backup_create


class Command(BaseCommand):
    help = (
        "Back up the database (pg_dump, custom format) into BACKUP_DIR, then keep the newest BACKUP_KEEP. "
        "Back up FIELD_ENCRYPTION_KEYS apart from it: a copy is unreadable without them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--to", metavar="DIR", help="where the backup goes (default: BACKUP_DIR)")
        parser.add_argument("--keep", type=int, metavar="N", help="backups kept there (default: BACKUP_KEEP)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            backup = backup_create(Path(options["to"]) if options["to"] else None, keep=options["keep"])
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"backup {backup.path} ({backup.size / 1e6:.1f} MB in {backup.seconds:.1f} s, with {backup.client})"
        )
        for old in backup.pruned:
            self.stdout.write(f"  removed {old.name} (older than the newest kept)")
