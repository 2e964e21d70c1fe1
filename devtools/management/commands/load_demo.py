from typing import Any

from django.core.management.base import BaseCommand, CommandError

from crm.models import Stage
from crm.services.business_file import BusinessFileError
from devtools.demo import ADMIN_URL, DEMO_WEBHOOK_URL, demo_load


class Command(BaseCommand):
    help = "Load the demo business (demo/acme-hvac.yaml), its demo logins and records in every stage; idempotent."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = demo_load()
        except BusinessFileError as exc:
            raise CommandError(str(exc)) from exc
        for line in result.load.report():
            self.stdout.write(line)
        if result.leads_created:
            stages = ", ".join(Stage.values)
            self.stdout.write(f"demo records: {result.leads_created} leads created, covering every stage ({stages})")
        else:
            self.stdout.write(f"demo records: already present ({result.leads_total} leads), none added")
        self.stdout.write(
            f"demo webhook: every event to {DEMO_WEBHOOK_URL} (in dry run, Admin > Webhook deliveries shows them)"
        )
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(f"Demo logins: open {ADMIN_URL}"))
        width = max([8, *(len(login.username) for login in result.logins)])
        self.stdout.write(f"  {'role':<12}{'username':<{width + 2}}password")
        for login in result.logins:
            self.stdout.write(f"  {login.role:<12}{login.username:<{width + 2}}{login.password}")
