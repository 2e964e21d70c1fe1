"""`manage.py evidence_pack SLUG [--out DIR]`: the 10DLC evidence pack of one
business (agents/reporting/evidence_pack.py) written as JSON, and its
pre-flight printed: what is missing (exit status 1) or likely refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from agents.reporting.evidence_pack import MISSING, evidence_pack
from crm.models import Business


class Command(BaseCommand):
    help = "Write a business's 10DLC evidence pack as JSON and print its pre-flight (exit 1 when something is missing)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("business", help="the business's slug")
        parser.add_argument("--out", default=".", help="the folder the JSON file goes to (default: here)")

    def handle(self, *args: Any, **options: Any) -> None:
        business = Business.objects.filter(slug=options["business"]).first()
        if business is None:
            raise CommandError(f"no business {options['business']!r}")
        folder = Path(options["out"])
        if not folder.is_dir():
            raise CommandError(f"{folder} is not a folder")
        pack = evidence_pack(business, now=timezone.now(), base_url=settings.PUBLIC_BASE_URL)
        target = folder / f"{business.slug}-10dlc-evidence.json"
        target.write_text(json.dumps(pack.as_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        self.stdout.write(f"evidence pack: {target}")
        self.stdout.write(
            f"  {len(pack.forms)} form sources, {len(pack.samples)} sample messages, "
            f"{sum(n for _, n in pack.volume)} texts in 30 days, {len(pack.consent)} consent records"
        )
        if not pack.findings:
            self.stdout.write(self.style.SUCCESS("pre-flight: nothing missing or likely to be refused"))
            return
        self.stdout.write("pre-flight:")
        for finding in pack.findings:
            self.stdout.write(f"  {finding.level:<8}{finding.what}: {finding.why}")
        if any(f.level == MISSING for f in pack.findings):
            raise CommandError("the registration would be refused: fix what is missing first", returncode=1)
