from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agents.capture.processing import event_replay
from crm.models import InboundEvent


class Command(BaseCommand):
    help = (
        "Replay failed inbound events (dead letters: attempts spent) once their cause is fixed, oldest first; "
        "each gets a fresh allowance of attempts. The admin's replay action does the same for a selection."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("events", nargs="*", help="public ids (evt_…); default: every dead letter")
        parser.add_argument("--provider", help="only this provider's events (twilio, meta, website, …)")
        parser.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")

    def handle(self, *args: Any, **options: Any) -> None:
        failed = InboundEvent.objects.filter(status=InboundEvent.Status.FAILED)
        # Named events replay whatever their retry; otherwise only those the sweep will not try again.
        failed = failed.filter(public_id__in=options["events"]) if options["events"] else failed.filter(retry_at=None)
        if options["provider"]:
            failed = failed.filter(provider=options["provider"])
        outcomes: dict[str, int] = {}
        for event in failed.order_by("received_at", "pk")[: options["limit"]]:
            outcome = event_replay(event)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        summary = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "nothing to replay"
        self.stdout.write(f"replayed: {summary}")
