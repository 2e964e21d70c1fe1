"""`python manage.py audit_leads [--business SLUG]`: check the record keeps its
promises (owner, one next action, stop rules, money, trace, receipts); exits
non-zero when it does not."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.audit import lead_audit
from crm.models import Business


class Command(BaseCommand):
    help = "Audit leads: owners, next actions, stop rules, money, traces, receipts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--business", help="business slug (default: every business)")

    def handle(self, *args: Any, **options: Any) -> None:
        businesses = Business.objects.order_by("slug")
        if options["business"]:
            businesses = businesses.filter(slug=options["business"])
            if not businesses.exists():
                raise CommandError(f"no business {options['business']!r}")
        failed = 0
        for business in businesses:
            audit = lead_audit(business)
            self.stdout.write(
                f"{business.slug}: {audit.leads} leads, {audit.active} active, {audit.manager_queue} in the manager "
                "queue"
            )
            for currency, (net, expected) in audit.money.items():
                self.stdout.write(f"  money {currency}: report net {net}, payments minus refunds {expected}")
            breaks = ", ".join(f"{key} {n}" for key, n in audit.first_breaks.most_common())
            self.stdout.write(f"  first breaks: {breaks or 'no leads'}")
            for v in audit.violations:
                self.stdout.write(f"  VIOLATION {v.check}: {v.subject}: {v.detail}")
            failed += len(audit.violations)
        if failed:
            raise CommandError(f"{failed} violation(s)")
        self.stdout.write("audit passed")
