from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.conversions.spend import MAX_DAYS, spend_pull_all
from crm.models import Business


class Command(BaseCommand):
    help = (
        "Pull each campaign's daily cost, clicks and impressions from the businesses' Google Ads and Meta "
        "conversion accounts (the last 3 days, 30 for an account never pulled; --days to choose). "
        "Re-pulling a day replaces it. Exits non-zero when an account was refused or failed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--business", help="a business slug (default: every business)")
        parser.add_argument("--days", type=int, help=f"days to pull, ending today (1 to {MAX_DAYS})")
        parser.add_argument("--dry-run", action="store_true", help="read the platforms, write nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        slug = options.get("business")
        if slug and not Business.objects.filter(slug=slug).exists():
            raise CommandError(f"no business {slug!r}")
        days = options.get("days")
        if days is not None and not 1 <= days <= MAX_DAYS:
            raise CommandError(f"--days is 1 to {MAX_DAYS}")
        results = spend_pull_all(business_slug=slug, days=days, dry_run=options["dry_run"])
        if not results:
            self.stdout.write("no active Google Ads or Meta conversion account")
        for r in results:
            period = f"{r.since} to {r.until}" if r.since else "-"
            line = f"{r.business} {r.platform} {r.account}: {r.status} {period}"
            if r.status in ("pulled", "dry_run"):
                line += f": {r.campaigns} campaigns, {r.rows} campaign days, cost {r.cost}"
                line += f", {r.removed} days removed" if r.removed else ""
            if r.detail:
                line += f" ({r.detail})"
            self.stdout.write(line)
        bad = [r for r in results if r.status in ("refused", "failed")]
        if bad:
            raise CommandError(f"{len(bad)} of {len(results)} accounts not pulled")
