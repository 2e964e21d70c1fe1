"""Training the reader (`python manage.py train_intents`): deterministic, offline.

The same corpus and seed give the same artefact on one machine, byte for
byte, and the same reader on any machine: every reading of every corpus
text the same (a test retrains and compares them). scikit-learn's solvers
used here are deterministic, the vocabulary is sorted, training runs on one
BLAS thread, and the pickle holds nothing that varies from process to
process; only a CPU with other vector instructions rounds the last bit of a
sum differently, which changes bytes of the pickle and no reading.

The revocation threshold is chosen without the frozen test file: from the
revocation probabilities of every labelled revocation the models did not
train on — the validation file's, and the training file's own out of fold
(5 folds) — the highest threshold that misses at most half a percent of
them (those the consent check's patterns catch anyway not counted as
missed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.reader.corpus import TEST, TRAIN, VALIDATION, Example, corpus_digest, examples_read
from agents.reader.model import ARTEFACT, PROVENANCE, REVOCATION, Reader, file_digest, revocation_probability

SEED = 20261204
VERSION = 1
# The share of unseen revocations the threshold may miss, and its ceiling.
THRESHOLD_MISSES = 0.005
THRESHOLD_CEILING = 0.5
FOLDS = 5
C = 20.0  # the logistic regressions' inverse regularization


def _features() -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.feature_extraction.text import TfidfVectorizer

    words = {"lowercase": True, "strip_accents": "unicode", "sublinear_tf": True, "token_pattern": r"(?u)\b\w+\b"}
    return ColumnTransformer(
        [
            ("text_words", TfidfVectorizer(ngram_range=(1, 2), min_df=1, **words), 0),
            (
                "text_chars",
                TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=2, lowercase=True, sublinear_tf=True),
                0,
            ),
            ("previous_words", TfidfVectorizer(ngram_range=(1, 2), min_df=1, **words), 1),
        ]
    )


def _pipeline() -> Any:
    from sklearn.pipeline import Pipeline

    return Pipeline([("features", _features()), ("classifier", _classifier())])


def _rows(examples: list[Example]) -> Any:
    import numpy as np

    return np.array([[e.text, e.previous] for e in examples], dtype=object)


@dataclass
class Trained:
    reader: Reader
    train: list[Example]
    validation: list[Example]


def _classifier() -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=C, max_iter=5000, class_weight="balanced", random_state=SEED)


def train(
    train_examples: list[Example],
    validation_examples: list[Example],
    certain: Callable[[str], bool] = lambda text: False,
) -> Trained:
    """Fit both models on `train_examples` and choose the revocation
    threshold (see the module). `certain`: the texts the consent check's
    own patterns read as a stop whatever the model says — the threshold
    need not reach those."""
    from threadpoolctl import threadpool_limits

    # One BLAS thread: a multithreaded sum may round differently from one
    # process to the next, and the artefact must come out the same.
    with threadpool_limits(limits=1):
        return _train(train_examples, validation_examples, certain)


def _train(
    train_examples: list[Example], validation_examples: list[Example], certain: Callable[[str], bool]
) -> Trained:
    # One set of features, two models over it: a message is turned into
    # features once per reading.
    features = _features()
    matrix = features.fit_transform(_rows(train_examples))
    intents = _classifier().fit(matrix, [e.intent for e in train_examples])
    stops = [e.intent == REVOCATION for e in train_examples]
    revocations = _classifier().fit(matrix, stops)
    fitted = Reader(features, intents, revocations, THRESHOLD_CEILING, {})
    threshold = _threshold(fitted, train_examples, stops, validation_examples, certain)
    return Trained(Reader(features, intents, revocations, threshold, {}), train_examples, validation_examples)


def _threshold(
    fitted: Reader,
    train_examples: list[Example],
    stops: list[bool],
    validation: list[Example],
    certain: Callable[[str], bool],
) -> float:
    """The highest threshold that misses at most THRESHOLD_MISSES of the
    revocations the models did not train on (out of fold, and the
    validation file's), counting those the patterns catch anyway."""
    import numpy as np
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    folds = StratifiedKFold(n_splits=FOLDS, shuffle=True, random_state=SEED)
    rows = _rows(train_examples)
    binary = cross_val_predict(_pipeline(), rows, stops, cv=folds, method="predict_proba")[:, 1]
    labels = [e.intent for e in train_examples]
    by_intent = cross_val_predict(_pipeline(), rows, labels, cv=folds, method="predict_proba")
    column = sorted(set(labels)).index(REVOCATION)
    unseen = list(revocation_probability(binary, by_intent[:, column])[np.array(stops)])
    caught = [certain(e.text) for e in train_examples if e.intent == REVOCATION]
    held = [e for e in validation if e.intent == REVOCATION]
    unseen += [r.revocation for r in fitted.read_many([(e.text, e.previous) for e in held])]
    caught += [certain(e.text) for e in held]
    missable = sorted(p for p, sure in zip(unseen, caught, strict=True) if not sure)
    allowed = int(len(unseen) * THRESHOLD_MISSES)
    if len(missable) <= allowed:
        return THRESHOLD_CEILING
    return round(min(float(missable[allowed]), THRESHOLD_CEILING), 4)


def _portable(features: Any) -> None:
    """Drop what differs from process to process and would make two
    pickles of one model differ: the terms min_df left out (a set, ordered
    by string hashing; scikit-learn documents it as safe to drop) and a
    cached id() of the stop-word list (a memory address, set again by
    every transform; recomputed when missing)."""
    for _, vectorizer, _ in features.transformers_:
        for attribute in ("stop_words_", "_stop_words_id"):
            if hasattr(vectorizer, attribute):
                delattr(vectorizer, attribute)


def artefact_write(
    trained: Trained, metrics: dict[str, Any], *, artefact: Path = ARTEFACT, provenance: Path = PROVENANCE
) -> dict[str, Any]:
    """Write the artefact and its provenance beside it; returns the provenance."""
    import joblib
    import sklearn

    artefact.parent.mkdir(parents=True, exist_ok=True)
    models = trained.reader
    _portable(models.features)
    joblib.dump(
        {"features": models.features, "intents": models.intents, "revocations": models.revocations},
        artefact,
        compress=3,
    )
    record = {
        "version": VERSION,
        "seed": SEED,
        "scikit_learn": sklearn.__version__,
        "corpus_sha256": corpus_digest(TRAIN, VALIDATION),
        "train_texts": len(trained.train),
        "validation_texts": len(trained.validation),
        "revocation_threshold": trained.reader.threshold,
        "artefact_sha256": file_digest(artefact),
        "artefact_bytes": artefact.stat().st_size,
        "validation": metrics,
    }
    provenance.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return record


def corpus_train(certain: Callable[[str], bool] = lambda text: False) -> Trained:
    return train(examples_read(TRAIN), examples_read(VALIDATION), certain)


__all__ = ["SEED", "TEST", "Trained", "artefact_write", "corpus_train", "train"]
