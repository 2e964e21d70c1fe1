"""The claims guard measured on its corpus: recall on risky sentences and
false holds on safe ones, per language, with every miss and false hold
listed. `python scripts/claims_corpus.py` (no database).

The corpus is tests/agents/samples/claims_risky.txt and claims_safe.txt;
tests/agents/test_claims_corpus.py holds the guard to recall >= 0.99 and
false holds <= 5%.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "agents" / "samples"
sys.path.insert(0, str(ROOT))


def corpus(name: str) -> list[tuple[str, str]]:
    """(language, sentence) of one corpus file."""
    rows = []
    for line in (SAMPLES / name).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            lang, _, text = line.partition(" | ")
            rows.append((lang.strip(), text.strip()))
    return rows


@dataclass(frozen=True)
class Figures:
    risky: list[tuple[str, str]]
    safe: list[tuple[str, str]]
    missed: list[tuple[str, str]]
    held: list[tuple[str, str, list[Any]]]

    @property
    def recall(self) -> float:
        return 1 - len(self.missed) / len(self.risky)

    @property
    def false_holds(self) -> float:
        return len(self.held) / len(self.safe)


def measure() -> Figures:
    from agents.playbook.claims_guard import claims_scan

    risky, safe = corpus("claims_risky.txt"), corpus("claims_safe.txt")
    missed = [(lang, text) for lang, text in risky if not claims_scan(text)]
    held: list[tuple[str, str, list[Any]]] = []
    for lang, text in safe:
        if found := claims_scan(text):
            held.append((lang, text, found))
    return Figures(risky, safe, missed, held)


def main() -> None:
    figures = measure()
    risky_langs = dict(Counter(lang for lang, _ in figures.risky))
    safe_langs = dict(Counter(lang for lang, _ in figures.safe))
    print(f"risky sentences: {len(figures.risky)} ({risky_langs}), safe: {len(figures.safe)} ({safe_langs})")
    print(f"recall on risky: {figures.recall:.3f}   false holds on safe: {figures.false_holds:.3%}")
    for lang, text in figures.missed:
        print(f"  missed [{lang}] {text}")
    for lang, text, found in figures.held:
        print(f"  held   [{lang}] {text}  <- {', '.join(f'{f.kind}: {f.excerpt}' for f in found)}")


if __name__ == "__main__":
    main()
