"""The reader's costs beside the rules', in one run (a benchmark, not a test).

    .venv/bin/python scripts/bench_reader.py

Prints the training time (`train_intents`'s work, into a scratch folder),
the artefact's size, the load time, and the time to read one message —
median and 95th percentile over every text of the frozen test file, one at
a time as messages arrive — for the trained reader and for the rules alone.
No database is used.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leadops.settings_test")


def timed(call: Callable[..., object], *args: object) -> float:
    started = time.perf_counter()
    call(*args)
    return (time.perf_counter() - started) * 1000


def main() -> int:
    import django

    django.setup()
    from agents.ai.intents import intent_by_rules
    from agents.consent.keywords import read_text_rules
    from agents.reader.corpus import TEST, examples_read
    from agents.reader.model import reader_load
    from agents.reader.training import artefact_write, corpus_train

    started = time.perf_counter()
    trained = corpus_train()
    train_seconds = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        artefact, provenance = Path(folder) / "reader.joblib", Path(folder) / "provenance.json"
        artefact_write(trained, {}, artefact=artefact, provenance=provenance)
        size = artefact.stat().st_size
        started = time.perf_counter()
        loaded = reader_load(artefact, provenance)
        load_seconds = time.perf_counter() - started
    texts = [(e.text, e.previous) for e in examples_read(TEST)]
    loaded.read(*texts[0])  # the first call pays for lazy imports
    reader_ms = [timed(loaded.read, text, previous) for text, previous in texts]
    rules_ms = [timed(lambda t: (read_text_rules(t), intent_by_rules(t)), text) for text, _ in texts]
    print(
        f"training: {train_seconds:.1f} s on {len(trained.train)} texts; artefact {size / 1e6:.2f} MB; "
        f"load {load_seconds:.2f} s"
    )
    for name, times in (("reader", reader_ms), ("rules", rules_ms)):
        p95 = statistics.quantiles(times, n=20)[-1]
        print(
            f"{name:<7} per message over {len(times)} texts: median {statistics.median(times):.2f} ms, "
            f"p95 {p95:.2f} ms, max {max(times):.2f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
