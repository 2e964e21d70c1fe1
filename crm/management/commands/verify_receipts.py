from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from crm.models import Business, Receipt
from crm.services.receipt_checkpoints import checkpoints_read, verifying_key
from crm.services.receipts import checkpoint_verify, receipt_checkpoints, receipts_seal, receipts_verify


class Command(BaseCommand):
    help = (
        "Seal pending receipts, walk every business's receipt chain (or one, with --business) and name the "
        "first broken link; with --checkpoint, also check the chains against checkpoints exported earlier."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--business", metavar="SLUG", help="Verify only this business's chain")
        parser.add_argument(
            "--checkpoint",
            metavar="FILE",
            help="A file of exported checkpoints (JSON lines, as export_receipt_checkpoint writes): every line "
            "must be signed by the checkpoint key and follow its business's previous line, and the newest one of "
            "each business must still be in its chain, with the same hash",
        )
        parser.add_argument(
            "--public-key",
            metavar="BASE64",
            default="",
            help="The key the checkpoints are signed by (default RECEIPT_CHECKPOINT_PUBLIC_KEY, else the half of "
            "RECEIPT_CHECKPOINT_KEY)",
        )
        parser.add_argument(
            "--no-seal", action="store_true", help="Only read: leave receipts that wait for the sealer unsealed"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        business = None
        if options["business"]:
            business = Business.objects.filter(slug=options["business"]).first()
            if business is None:
                raise CommandError(f"no business with slug {options['business']!r}")
        checkpoints = []
        if options["checkpoint"]:
            try:
                checkpoints = checkpoints_read(options["checkpoint"], verifying_key(options["public_key"]))
            except (OSError, ValueError) as exc:
                raise CommandError(f"cannot read the checkpoints: {exc}") from exc
            if business is not None:
                checkpoints = [c for c in checkpoints if c.business == business.slug]
        if not options["no_seal"]:
            receipts_seal(business.pk if business else None)
        broken = receipts_verify(business)
        if broken is not None:
            raise CommandError(f"receipt chain is broken: {broken}")
        for checkpoint in checkpoints:
            if problem := checkpoint_verify(checkpoint):
                raise CommandError(f"receipt chain does not match the checkpoint: {problem}")
        receipts = Receipt.objects.filter(business=business) if business else Receipt.objects.all()
        businesses = 1 if business else Business.objects.count()
        self.stdout.write(f"receipt chain is whole: {receipts.count()} receipts in {businesses} businesses")
        if checkpoints:
            self.stdout.write(f"  and holds the {len(checkpoints)} checkpoints of {options['checkpoint']}")
        if unsealed := receipts.filter(seq__isnull=True).count():
            self.stdout.write(f"  {unsealed} receipts wait for the sealer (their content verified)")
        # On its own the chain cannot show that its newest receipts were cut
        # off (the trigger refuses it, but a superuser could disable the
        # trigger): compare each head with one exported earlier.
        for head in receipt_checkpoints():
            if business is None or head.business == business.slug:
                self.stdout.write(f"  {head.business}: head seq {head.seq} hash {head.hash}")
