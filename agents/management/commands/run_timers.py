from typing import Any

from django.core.management.base import BaseCommand

from crm.services.timers import timers_run_due


class Command(BaseCommand):
    help = "Run every due timer now (SLA checks, sequence steps, reminders)."

    def handle(self, *args: Any, **options: Any) -> None:
        result = timers_run_due()
        self.stdout.write(f"timers: {result.claimed} claimed, {result.done} done, {result.failed} failed")
