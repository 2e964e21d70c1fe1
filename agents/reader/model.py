"""Reading one message with the trained artefact.

Two models, trained together (agents/reader/training.py) over one set of
features, computed once per message — word and character n-grams of the
message, word n-grams of our last text before it:

- the intent model: one of the nine intents, with its probability as the
  confidence stored on the message;
- the revocation model, apart and recall-first: whether the person asks us
  to stop. Its probability is the geometric mean of its own and the intent
  model's for `revocation` (two readers must both lean that way for it to
  be high, and either leaning is enough for it to pass a low threshold);
  the threshold was chosen from texts the models did not train on to miss
  (almost) none, so a message it is unsure about counts as a revocation: a
  wrong "stop" costs one confirmation text the person can answer START to;
  a missed one costs every text after it.

The artefact is a pickle (joblib), so it is checked against the hash its
provenance file records before it is loaded: a file swapped beside the code
is refused, not run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

TRAINED_DIR = Path(__file__).resolve().parent / "trained"
ARTEFACT = TRAINED_DIR / "reader.joblib"
PROVENANCE = TRAINED_DIR / "provenance.json"
REVOCATION = "revocation"
RECENT = 256  # readings kept per process (a message is read two or three times as it is recorded)


class ArtefactError(RuntimeError):
    """The trained artefact is missing or is not the one its provenance names."""


@dataclass(frozen=True)
class Reading:
    intent: str
    confidence: float  # the intent model's probability for `intent`
    revocation: float  # the revocation model's probability
    revokes: bool  # revocation >= the threshold: counted as a request to stop


def revocation_probability(binary: Any, by_intent: Any) -> Any:
    """The revocation model's probability beside the intent model's, as one."""
    import numpy as np

    return np.sqrt(np.asarray(binary) * np.asarray(by_intent))


def file_digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


class Reader:
    def __init__(
        self, features: Any, intents: Any, revocations: Any, threshold: float, provenance: dict[str, Any]
    ) -> None:
        self.features, self.intents, self.revocations = features, intents, revocations
        self.threshold = threshold
        self.provenance = provenance
        # One inbound message is read by the capture's intent and again by
        # the consent check: the same pair gives the same reading, so the
        # last few are kept rather than inferred again.
        self._recent: dict[tuple[str, str], Reading] = {}

    def read(self, text: str, previous: str = "") -> Reading:
        key = (text or "", previous or "")
        reading = self._recent.get(key)
        if reading is None:
            reading = self.read_many([key])[0]
            if len(self._recent) >= RECENT:
                self._recent.pop(next(iter(self._recent)), None)
            self._recent[key] = reading
        return reading

    def read_many(self, pairs: list[tuple[str, str]]) -> list[Reading]:
        import numpy as np

        rows = np.array([[text or "", previous or ""] for text, previous in pairs], dtype=object)
        matrix = self.features.transform(rows)
        intent_probabilities = self.intents.predict_proba(matrix)
        labels = [str(label) for label in self.intents.classes_]
        revocation_probabilities = revocation_probability(
            self.revocations.predict_proba(matrix)[:, 1], intent_probabilities[:, labels.index(REVOCATION)]
        )
        readings = []
        for probabilities, revocation in zip(intent_probabilities, revocation_probabilities, strict=True):
            best = int(probabilities.argmax())
            revokes = bool(revocation >= self.threshold)
            if revokes:
                # The revocation model decides first: the intent follows it.
                intent, confidence = REVOCATION, float(max(revocation, probabilities[labels.index(REVOCATION)]))
            else:
                intent, confidence = labels[best], float(probabilities[best])
                if intent == REVOCATION:
                    # The intent model alone is not the judge of a stop: the
                    # recall-first model said no, so the next intent is read.
                    second = int(np.argsort(probabilities)[-2])
                    intent, confidence = labels[second], float(probabilities[second])
            readings.append(Reading(intent, round(confidence, 3), float(revocation), revokes))
        return readings


def reader_load(artefact: Path = ARTEFACT, provenance: Path = PROVENANCE) -> Reader:
    """The trained reader, after its bytes are checked against its provenance."""
    import joblib

    try:
        record = json.loads(provenance.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtefactError(f"no readable provenance at {provenance}: {exc}") from exc
    if not artefact.exists():
        raise ArtefactError(f"no trained artefact at {artefact}: run `python manage.py train_intents`")
    if file_digest(artefact) != record.get("artefact_sha256"):
        raise ArtefactError(f"{artefact} is not the artefact {provenance.name} records: retrain or restore it")
    models = joblib.load(artefact)
    return Reader(
        models["features"], models["intents"], models["revocations"], float(record["revocation_threshold"]), record
    )


@cache
def reader() -> Reader:
    """The shipped reader, loaded once per process."""
    return reader_load()
