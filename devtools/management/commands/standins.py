"""Serve the demo shop's connected systems (devtools/demo_sync.py) on their
fixed local ports until stopped: `make run` starts it beside the web server,
so the sync engine's periodic work talks to them as it would to the real
providers, and no outside account is needed."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand

from crm.models import Business
from devtools.demo import DEMO_SLUG
from devtools.demo_reviews import GOOGLE_BUSINESS_PORT, google_business_stand_in
from devtools.demo_sync import GOOGLE_PORT, JOBBER_PORT, google_stand_in, jobber_stand_in


class Command(BaseCommand):
    help = (
        "Serve the demo's local stand-ins for Jobber, Tom's Google calendar and the shop's Google reviews until Ctrl-C."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        jobber, _ = jobber_stand_in(JOBBER_PORT)
        servers: list[tuple[str, Any]] = [("Jobber", jobber)]
        business = Business.objects.filter(slug=DEMO_SLUG).first()
        if business is not None:
            servers.append(("Google Calendar", google_stand_in(business, GOOGLE_PORT)))
            servers.append(("Google Business Profile", google_business_stand_in(business, GOOGLE_BUSINESS_PORT)))
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        for name, server in servers:
            server.start()
            self.stdout.write(f"demo stand-in for {name} on {server.url}")
        stop.wait()
        for _, server in servers:
            server.stop()
