"""The trained reader: its corpus, its artefact (reproducible, checked before
it loads), its figures on the frozen test file, and the evaluation that
prints them on any database."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from agents.ai.evaluation import corpus_read, evaluate
from agents.reader.corpus import TEST, TRAIN, VALIDATION, corpus_digest, examples_read
from agents.reader.model import ARTEFACT, PROVENANCE, ArtefactError, file_digest, reader, reader_load
from crm.models import INTENTS, Business, Source
from tests.factories import BusinessFactory

ROOT = Path(__file__).resolve().parents[3]
SPANISH = re.compile(r"[¿¡ñáéíóú]|\b(?:que|por|los|una|mi|el|la|no|me|de)\b", re.IGNORECASE)
MACHINE_LINE = re.compile(
    r"^provider=(\w+) accuracy=(\d\.\d{3}) macro_f1=(\d\.\d{3}) revocation_recall=(\d\.\d{3}) "
    r"false_revocations=(\d\.\d{3}) promise_leak_rate=(\d\.\d{3}) n=(\d+)$"
)


def test_the_corpus_is_large_bilingual_paired_and_split_once() -> None:
    train, validation, test = examples_read(TRAIN), examples_read(VALIDATION), examples_read(TEST)
    every = train + validation + test
    assert len(every) >= 3000
    assert {e.intent for e in train} == {e.intent for e in test} == set(INTENTS)
    spanish = [e for e in every if e.language == "es" or (not e.language and SPANISH.search(e.text))]
    assert len(spanish) / len(every) >= 0.20
    # Replies that only make sense after our last text are read with it.
    assert sum(bool(e.previous) for e in every) >= 300
    # Nothing of the frozen test file is in what training sees.
    seen = {(e.text.strip().lower(), e.previous.lower()) for e in train + validation}
    assert not [e for e in test if (e.text.strip().lower(), e.previous.lower()) in seen]


def test_the_artefact_reproduces_from_the_corpus(tmp_path: Path) -> None:
    shipped = json.loads(PROVENANCE.read_text(encoding="utf-8"))
    assert shipped["corpus_sha256"] == corpus_digest(TRAIN, VALIDATION), "the corpus changed: run train_intents"

    # In a process of its own, as anyone retraining would: this one has
    # loaded libraries that may change how floating point rounds.
    result = subprocess.run(
        [sys.executable, "manage.py", "train_intents", "--output", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads((tmp_path / PROVENANCE.name).read_text(encoding="utf-8"))
    assert record["artefact_sha256"] == file_digest(tmp_path / ARTEFACT.name)  # its provenance names it
    assert record["revocation_threshold"] == shipped["revocation_threshold"]
    assert record["validation"] == shipped["validation"]
    assert shipped["artefact_bytes"] < 20 * 1024 * 1024

    # The same reader, read for read: what it says of every text it was
    # trained, tuned and measured on. Not the same pickle bytes: a CPU with
    # other vector instructions rounds the last bit of a sum differently
    # (the shipped artefact and one retrained on another machine differ by
    # a few hundred bytes and agree on every reading).
    retrained = reader_load(tmp_path / ARTEFACT.name, tmp_path / PROVENANCE.name)
    pairs = [(e.text, e.previous) for path in (TRAIN, VALIDATION, TEST) for e in examples_read(path)]
    ours, theirs = reader_load().read_many(pairs), retrained.read_many(pairs)
    assert [(r.intent, r.confidence, r.revokes) for r in ours] == [(r.intent, r.confidence, r.revokes) for r in theirs]
    assert max(abs(a.revocation - b.revocation) for a, b in zip(ours, theirs, strict=True)) < 1e-9


def test_an_artefact_that_is_not_the_one_its_provenance_names_is_refused(tmp_path: Path) -> None:
    swapped = tmp_path / "reader.joblib"
    swapped.write_bytes(b"not the trained model")
    with pytest.raises(ArtefactError, match="is not the artefact"):
        reader_load(artefact=swapped)
    assert file_digest(swapped) != json.loads(PROVENANCE.read_text())["artefact_sha256"]


@pytest.mark.django_db
def test_the_frozen_test_file_meets_the_targets_on_the_readers_path() -> None:
    report = evaluate(corpus_read(TEST), provider="reader", path=str(TEST))
    measured = report.scores
    assert measured.accuracy >= 0.92, report.lines()
    assert measured.macro_f1 >= 0.90, report.lines()
    assert measured.revocation_recall >= 0.99, report.lines(misses=True)
    assert measured.false_revocations <= 0.03, report.lines(misses=True)


def test_a_short_reply_is_read_with_the_text_it_answers() -> None:
    offer = "We have Thursday at 2pm or Friday at 9am open. Which works for you?"
    assert reader().read("the second one", offer).intent == "booking_request"


@pytest.mark.django_db
def test_eval_intents_prints_every_path_on_a_database_whose_business_holds_the_demo_keys(tmp_path: Path) -> None:
    # Another business already owns the demo file's source key `site`: the
    # evaluation must neither refuse nor touch it.
    other = BusinessFactory.create(slug="somebody-else")
    Source.objects.create(business=other, key="site", provider="website", secret="theirs-123")
    corpus = tmp_path / "mine.csv"
    with corpus.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerows(
            [
                ["text", "intent", "previous"],
                ["can someone look at my furnace tomorrow", "booking_request", ""],
                ["please take me off your list", "revocation", ""],
                ["yes", "booking_request", "Can we come Thursday at 2pm?"],
            ]
        )
    out = StringIO()

    call_command("eval_intents", str(corpus), stdout=out)

    lines = [m for line in out.getvalue().splitlines() if (m := MACHINE_LINE.match(line))]
    assert [m.group(1) for m in lines] == ["rules", "reader"]
    assert all(m.group(7) == "3" for m in lines)
    assert "confusion (rows: labelled, columns: read)" in out.getvalue()
    assert Business.objects.count() == 1 and Source.objects.get().business == other
