from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from crm.services.business_file import BusinessFileError, business_file_load


class Command(BaseCommand):
    help = "Create or update one business from its YAML file (idempotent; demo/acme-hvac.yaml shows every key)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help="The business file, e.g. demo/acme-hvac.yaml")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = business_file_load(options["file"])
        except BusinessFileError as exc:
            raise CommandError(str(exc)) from exc
        for line in result.report():
            self.stdout.write(line)
