"""`python manage.py train_intents`: train the intent and revocation reader
from agents/ai/corpus/train.csv and validation.csv, and write the artefact
and its provenance to agents/reader/trained/ (agents/reader/training.py).
Deterministic: the same corpus gives the same artefact, byte for byte."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agents.consent.keywords import certain_stop
from agents.reader.metrics import scores
from agents.reader.model import ARTEFACT, PROVENANCE
from agents.reader.training import artefact_write, corpus_train


class Command(BaseCommand):
    help = "Train the intent and revocation reader from the corpus; write the artefact and its provenance."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--output",
            type=Path,
            help="write the artefact and its provenance into this folder instead (to compare before replacing)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        folder: Path | None = options["output"]
        artefact = folder / ARTEFACT.name if folder else ARTEFACT
        provenance = folder / PROVENANCE.name if folder else PROVENANCE
        started = time.monotonic()
        trained = corpus_train(certain=certain_stop)
        readings = trained.reader.read_many([(e.text, e.previous) for e in trained.validation])
        measured = scores([e.intent for e in trained.validation], [r.intent for r in readings])
        record = artefact_write(trained, measured.as_dict(), artefact=artefact, provenance=provenance)
        self.stdout.write(
            f"trained on {record['train_texts']} texts in {time.monotonic() - started:.1f} s; "
            f"revocation threshold {record['revocation_threshold']}; artefact {record['artefact_bytes']:,} bytes "
            f"{record['artefact_sha256']}"
        )
        self.stdout.write(f"validation ({measured.n} texts):")
        for line in measured.lines():
            self.stdout.write("  " + line)
