"""How the reader's corpus was split, once (agents/ai/corpus/README.md).

    .venv/bin/python scripts/corpus_split.py BATCH.csv [BATCH.csv ...]

Pools agents/ai/corpus/intents.csv (the rules' adversarial corpus) and the
written batches given, drops repeated (text, previous) pairs, and writes
agents/ai/corpus/train.csv and validation.csv, leaving out any (text,
previous) pair the frozen test file holds too (short replies such as "👍" or
"no me interesa" were written by more than one writer: what the test file
measures must be unseen). A text goes to validation when
the first byte of its SHA-256 is below 15 % of 256, so the split depends on
the text alone, never on the order or on a seed. The frozen test file is
written apart and never passes through here.
"""

from __future__ import annotations

import csv
import hashlib
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "agents" / "ai" / "corpus"
COLUMNS = ["text", "intent", "previous", "language"]
VALIDATION_SHARE = 0.15


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return [
            {c: row["text"] if c == "text" else (row.get(c) or "").strip() for c in COLUMNS}
            for row in csv.DictReader(handle)
        ]


def main(batches: list[str]) -> int:
    frozen = {(row["text"].strip().lower(), row["previous"].lower()) for row in rows(CORPUS / "test.csv")}
    pooled, seen = [], set(frozen)
    for path in [CORPUS / "intents.csv", *map(Path, batches)]:
        for row in rows(path):
            key = (row["text"].strip().lower(), row["previous"].lower())
            if key in seen:
                continue
            seen.add(key)
            pooled.append(row)
    train: list[dict[str, str]] = []
    validation: list[dict[str, str]] = []
    for row in pooled:
        first = hashlib.sha256((row["text"] + "\0" + row["previous"]).encode()).digest()[0]
        (validation if first < VALIDATION_SHARE * 256 else train).append(row)
    for name, part in (("train.csv", train), ("validation.csv", validation)):
        with (CORPUS / name).open("w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(part)
    print(f"pooled {len(pooled)}: train {len(train)}, validation {len(validation)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
