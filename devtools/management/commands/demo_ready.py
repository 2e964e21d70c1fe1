"""`manage.py demo_ready [--url URL] [--wait SECONDS]`: wait until the web
server `make run` started answers, then print where to go and the demo
logins — the last lines `make run` prints, so they do not scroll away
behind the servers' start-up logs."""

from __future__ import annotations

from typing import Any

import requests
from django.core.management.base import BaseCommand, CommandError, CommandParser

from crm.models import Role, TeamMember
from devtools.demo import DEMO_SLUG, DEMO_USERS, demo_password
from devtools.polling import poll_until


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


class Command(BaseCommand):
    help = "Wait for the demo's web server, then print the workspace's address and the demo logins."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="the server's base URL")
        parser.add_argument("--wait", type=float, default=60.0, help="seconds to wait for it (default 60)")

    def handle(self, *args: Any, **options: Any) -> None:
        base = options["url"].rstrip("/")
        if not poll_until(lambda: _answers(f"{base}/healthz/"), timeout=options["wait"]):
            raise CommandError(f"nothing answered at {base}/healthz/ within {options['wait']:.0f} s")
        members = {
            m.user.get_username(): m for m in TeamMember.objects.filter(business__slug=DEMO_SLUG).select_related("user")
        }
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(f"LeadOps is up: the workspace at {base}/app/"))
        self.stdout.write(f"  the back office at {base}/admin/ · Ctrl-C stops everything")
        self.stdout.write("  Demo logins (role, username, password):")
        for username in DEMO_USERS:
            member = members.get(username)
            if member is not None:
                role = Role(member.role).label.lower()
                self.stdout.write(f"    {role:<11} {username:<7} {demo_password(username)}")
