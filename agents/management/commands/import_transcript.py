"""`python manage.py import_transcript CALL FILE`: attach a transcript typed or
exported elsewhere to a call (by its public id or Twilio CallSid) and score it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.reporting.call_scoring import call_find, call_transcript_set


class Command(BaseCommand):
    help = "Attach a transcript to a call (public id or CallSid) and score it; FILE '-' reads stdin."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("call", help="call_… public id or the provider's CallSid")
        parser.add_argument("file", help="a UTF-8 text file, or - for standard input")
        parser.add_argument("--actor", default="import", help="who is importing (for the receipt)")

    def handle(self, *args: Any, **options: Any) -> None:
        call = call_find(options["call"])
        if call is None:
            raise CommandError(f"no call {options['call']!r}")
        path = options["file"]
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from exc
        try:
            scored = call_transcript_set(call, text, actor=options["actor"], source="import")
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        flags = ", ".join(f["code"] for f in scored.flags) or "none"
        self.stdout.write(
            f"{scored.public_id}: {scored.score.get('points')} points; flags: {flags}; "
            f"review: {scored.review_status or '-'}"
        )
