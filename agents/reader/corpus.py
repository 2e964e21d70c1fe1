"""The labelled texts the reader learns from and is measured on.

A corpus file is a CSV with the columns `text` and `intent`, and optionally
`previous` (our last text to the person, when the reply needs it: "the
second one") and `language` (en, es). The repository's are in
agents/ai/corpus/: `train.csv` and `validation.csv` (what training may look
at), and `test.csv`, frozen: no rule, parameter or threshold is ever chosen
by looking at it.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

from crm.models import INTENTS

CORPUS_DIR = Path(__file__).resolve().parents[1] / "ai" / "corpus"
TRAIN = CORPUS_DIR / "train.csv"
VALIDATION = CORPUS_DIR / "validation.csv"
TEST = CORPUS_DIR / "test.csv"


@dataclass(frozen=True)
class Example:
    text: str
    intent: str
    previous: str = ""
    language: str = ""
    line: int = 0


def examples_read(path: str | Path) -> list[Example]:
    """The labelled texts of one CSV; ValueError naming the line of a bad row."""
    with Path(path).open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or not {"text", "intent"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: the first line must name the columns text,intent (and optionally previous)")
        examples = []
        for row in reader:
            intent = (row.get("intent") or "").strip()
            if intent not in INTENTS:
                raise ValueError(
                    f"{path}: line {reader.line_num}: unknown intent {intent!r} (one of {', '.join(INTENTS)})"
                )
            examples.append(
                Example(
                    text=row.get("text") or "",
                    intent=intent,
                    previous=(row.get("previous") or "").strip(),
                    language=(row.get("language") or "").strip(),
                    line=reader.line_num,
                )
            )
    if not examples:
        raise ValueError(f"{path}: no labelled texts")
    return examples


def corpus_digest(*paths: Path) -> str:
    """One hash over the files' bytes, in order: what a trained artefact was made from."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return "sha256:" + digest.hexdigest()
