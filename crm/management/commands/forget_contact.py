from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from crm.models import Contact
from crm.services.forget import contact_forget


class Command(BaseCommand):
    help = (
        "Erase one contact's personal data everywhere (contact points, messages, calls, raw events, "
        "consent evidence, receipts' personal data), keeping the records and money; the receipt chain still verifies."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("contact", metavar="ID", help="The contact's public id (cont_…)")
        parser.add_argument("--reason", default="", help="Why (kept in the receipt, with the person's data redacted)")

    def handle(self, *args: Any, **options: Any) -> None:
        contact = Contact.objects.filter(public_id=options["contact"]).select_related("business").first()
        if contact is None:
            raise CommandError(f"no contact with id {options['contact']!r}")
        result = contact_forget(contact, actor="manage.py forget_contact", reason=options["reason"])
        if not result.counts:
            self.stdout.write(f"{contact.public_id}: nothing left to erase (already forgotten)")
            return
        erased = ", ".join(f"{table} {n}" for table, n in sorted(result.counts.items()))
        receipt = result.receipt.public_id if result.receipt else ""
        self.stdout.write(f"{contact.public_id} forgotten ({erased}); receipt {receipt}")
