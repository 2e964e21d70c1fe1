import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from crm.services.backups import BackupError, backup_restore

# What a restored copy must pass before anyone trusts it: its schema is the
# code's, every receipt chain verifies, and the leads keep their promises.
CHECKS = (
    ["migrate", "--check"],
    ["verify_receipts"],
    ["audit_leads"],
)


class Command(BaseCommand):
    help = (
        "Restore a backup into an empty database, then check the copy: migrations, receipt chains "
        "(verify_receipts) and the leads' promises (audit_leads). Exits non-zero when any fails."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("backup", help="a backup file (manage.py backup makes them)")
        parser.add_argument(
            "--database-url", required=True, help="the EMPTY database to restore into (createdb it first)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["database_url"]
        try:
            seconds = backup_restore(Path(options["backup"]), url)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"restored {options['backup']} in {seconds:.1f} s; checking the copy")
        failed = []
        for check in CHECKS:
            # Each in a process of its own on the copy: settings read DATABASE_URL at startup.
            done = subprocess.run(  # noqa: S603 - our own manage.py and arguments
                [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), *check],
                env={**os.environ, "DATABASE_URL": url},
                capture_output=True,
                text=True,
                timeout=3600,
            )
            verdict = "ok" if done.returncode == 0 else "FAILED"
            self.stdout.write(f"  {' '.join(check)}: {verdict}")
            for line in (done.stdout + done.stderr).strip().splitlines()[-12:]:
                self.stdout.write(f"    {line}")
            if done.returncode != 0:
                failed.append(check[0])
        if failed:
            raise CommandError(f"the restored copy fails: {', '.join(failed)}")
        self.stdout.write("the copy is whole: same schema, receipt chains intact, leads audited")
