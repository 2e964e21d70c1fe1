from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from crm.services.receipt_checkpoints import CheckpointExportError, checkpoints_export, new_key_pair


class Command(BaseCommand):
    help = (
        "Seal pending receipts and export each business's chain head (seq and hash) outside the database, "
        "signed with RECEIPT_CHECKPOINT_KEY and chained to the previous export, so verify_receipts --checkpoint "
        "can later tell a cut or rewritten chain."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--to",
            metavar="DEST",
            help="A file path (JSON lines appended), mailto:ADDRESS or an https:// URL (a JSON POST); "
            "default: the RECEIPT_CHECKPOINT_TO setting, else standard output",
        )

        parser.add_argument(
            "--new-key",
            action="store_true",
            help="Print a new signing key pair (RECEIPT_CHECKPOINT_KEY and RECEIPT_CHECKPOINT_PUBLIC_KEY) and exit",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["new_key"]:
            private, public = new_key_pair()
            self.stdout.write(f"RECEIPT_CHECKPOINT_KEY={private}\nRECEIPT_CHECKPOINT_PUBLIC_KEY={public}")
            return
        destination = options["to"] or settings.RECEIPT_CHECKPOINT_TO
        try:
            exported = checkpoints_export(destination or None, stdout=self.stdout)
        except CheckpointExportError as exc:
            raise CommandError(str(exc)) from exc
        if destination:
            self.stdout.write(f"exported {len(exported)} checkpoints to {destination}")
