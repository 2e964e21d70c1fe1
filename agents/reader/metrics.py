"""How well a reading path did on labelled texts: the figures eval_intents
prints and training records.

Revocation is held apart: its recall (of the texts labelled revocation, the
share read as one) and its false revocation rate (of the texts labelled
anything else, the share read as a revocation).
"""

from __future__ import annotations

from dataclasses import dataclass

from crm.models import INTENTS

REVOCATION = "revocation"


@dataclass(frozen=True)
class Scores:
    n: int
    accuracy: float
    macro_f1: float
    precision: dict[str, float]
    recall: dict[str, float]
    support: dict[str, int]
    confusion: list[list[int]]  # rows: labelled, columns: read, in INTENTS order
    revocation_recall: float
    false_revocations: float

    def as_dict(self) -> dict[str, object]:
        return {
            "n": self.n,
            "accuracy": round(self.accuracy, 4),
            "macro_f1": round(self.macro_f1, 4),
            "revocation_recall": round(self.revocation_recall, 4),
            "false_revocations": round(self.false_revocations, 4),
        }

    def lines(self) -> list[str]:
        out = [f"{'intent':<16} {'n':>4} {'precision':>9} {'recall':>7}"]
        for intent in INTENTS:
            out.append(
                f"{intent:<16} {self.support[intent]:>4} {self.precision[intent]:>9.3f} {self.recall[intent]:>7.3f}"
            )
        short = [intent[:5] for intent in INTENTS]
        out.append("confusion (rows: labelled, columns: read): " + " ".join(f"{s:>5}" for s in short))
        for intent, row in zip(INTENTS, self.confusion, strict=True):
            out.append(f"  {intent:<16}" + " " * 26 + " ".join(f"{n:>5}" for n in row))
        out.append(
            f"accuracy {self.accuracy:.3f}, macro-F1 {self.macro_f1:.3f}, revocation recall "
            f"{self.revocation_recall:.3f}, false revocations {self.false_revocations:.3f}"
        )
        return out


def scores(labelled: list[str], read: list[str]) -> Scores:
    index = {intent: n for n, intent in enumerate(INTENTS)}
    confusion = [[0] * len(INTENTS) for _ in INTENTS]
    for truth, guess in zip(labelled, read, strict=True):
        confusion[index[truth]][index[guess]] += 1
    precision, recall, support, f1 = {}, {}, {}, []
    for intent, n in index.items():
        true_positive = confusion[n][n]
        read_as = sum(row[n] for row in confusion)
        labelled_as = sum(confusion[n])
        precision[intent] = true_positive / read_as if read_as else 0.0
        recall[intent] = true_positive / labelled_as if labelled_as else 0.0
        support[intent] = labelled_as
        if labelled_as:
            p, r = precision[intent], recall[intent]
            f1.append(2 * p * r / (p + r) if p + r else 0.0)
    total = len(labelled)
    others = [guess for truth, guess in zip(labelled, read, strict=True) if truth != REVOCATION]
    return Scores(
        n=total,
        accuracy=sum(confusion[n][n] for n in range(len(INTENTS))) / total if total else 0.0,
        macro_f1=sum(f1) / len(f1) if f1 else 0.0,
        precision=precision,
        recall=recall,
        support=support,
        confusion=confusion,
        revocation_recall=recall[REVOCATION],
        false_revocations=others.count(REVOCATION) / len(others) if others else 0.0,
    )
