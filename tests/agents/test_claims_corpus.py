"""The claims guard on its corpus (tests/agents/samples): what it must hold
and what it must let through, in English and Spanish, with numbers in words.
scripts/claims_corpus.py prints the same figures with every miss."""

from __future__ import annotations

from scripts.claims_corpus import corpus, measure


def test_the_corpus_is_large_enough_to_measure_and_holds_both_languages():
    risky, safe = corpus("claims_risky.txt"), corpus("claims_safe.txt")
    assert len(risky) >= 200 and len(safe) >= 200
    assert {lang for lang, _ in risky} == {lang for lang, _ in safe} == {"en", "es"}


def test_the_guard_holds_at_least_99_percent_of_risky_sentences_and_at_most_5_percent_of_safe_ones():
    figures = measure()
    assert figures.recall >= 0.99, figures.missed
    assert figures.false_holds <= 0.05, figures.held


def test_the_findings_named_by_the_third_review_are_held():
    from agents.playbook.claims_guard import claims_scan

    for text in (
        "That's one hundred fifty dollars for the visit.",
        "Son ciento cincuenta por la visita.",
        "This one's on the house.",
        "We'll waive the fee.",
        "You're covered for ten years.",
        "Pay just 150 and we'll come out.",
    ):
        assert claims_scan(text), text
