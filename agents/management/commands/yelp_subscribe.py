from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.capture.providers.yelp_sync import yelp_subscribe
from crm.models import Provider, Source


class Command(BaseCommand):
    help = (
        "Subscribe a yelp source's business to Yelp's lead webhooks (Yelp sends them only for subscribed "
        "businesses, to the partner's one URL: <PUBLIC_BASE_URL>/hooks/yelp/). Safe to run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source_key", help="the key of an active yelp source with a business_id")

    def handle(self, *args: Any, **options: Any) -> None:
        source = Source.objects.filter(key=options["source_key"], provider=Provider.YELP, is_active=True).first()
        if source is None:
            raise CommandError(f"no active yelp source {options['source_key']!r}")
        outcome = yelp_subscribe(source)
        if outcome.status != "sent":
            raise CommandError(f"Yelp did not take the subscription: {outcome.error} {outcome.detail}".strip())
        business_id = source.config.get("business_id")
        self.stdout.write(f"subscribed Yelp business {business_id} ({source.key}): Yelp applies it in the background")
