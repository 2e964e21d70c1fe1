"""The claims guard on a model's draft: a claim passes only when a playbook
fact the draft cites states it — looked up in the records, never taken from
the model — and a diagnosis never does."""

from __future__ import annotations

import pytest

from agents.playbook.assistant import Proposal, draft_proposal, model_text_verdict
from agents.playbook.claims_guard import Finding, claim_backed, claims_unbacked
from agents.playbook.facts import playbook_facts
from crm.models import Business
from tests.factories import lead_create

FACTS = {
    "price:1": "Diagnostic visit: $89.00 (credited toward the repair).",
    "fact:1": "1-year labor warranty on repairs we make.",
    "hours": "Office hours (America/Chicago): Mon 8:00 AM–6:00 PM.",
}


@pytest.mark.parametrize(
    ("finding", "facts", "backed"),
    [
        (Finding("price", "$89"), [FACTS["price:1"]], True),
        (Finding("price", "$89.00"), [FACTS["price:1"]], True),
        (Finding("price", "89 dollars"), [FACTS["price:1"]], True),
        (Finding("price", "$1"), [FACTS["fact:1"]], False),  # "1-year" is no price
        (Finding("price", "$4,500"), [FACTS["price:1"]], False),
        (Finding("warranty", "warranty"), [FACTS["fact:1"]], True),
        (Finding("warranty", "lifetime"), [FACTS["fact:1"]], False),
        (Finding("arrival_time", "8:00 am"), [FACTS["hours"]], True),
        (Finding("arrival_time", "tomorrow"), list(FACTS.values()), False),
        (Finding("licensed_diagnosis", "your capacitor is bad"), ["your capacitor is bad"], False),
    ],
)
def test_a_claim_is_backed_only_by_a_fact_that_states_it(finding: Finding, facts: list[str], backed: bool) -> None:
    assert claim_backed(finding, facts) is backed


def test_the_unbacked_claims_of_the_done_when_draft_are_named() -> None:
    text = "A new AC runs about $4,500 installed and we can be there tomorrow at 9am."
    assert [(f.kind, f.excerpt) for f in claims_unbacked(text, list(FACTS.values()))] == [
        ("price", "$4,500"),
        ("arrival_time", "we can be there"),
        ("arrival_time", "tomorrow"),
        ("arrival_time", "9am"),
    ]


def test_a_fact_id_the_playbook_lacks_is_not_trusted() -> None:
    verdict = model_text_verdict("Our visit is $89.", ("price:9",), FACTS, author="m")
    assert not verdict.auto_ok and verdict.unknown == ("price:9",) and "$89" in verdict.reason


def test_the_assistant_looks_the_cited_facts_up_itself(acme: Business) -> None:
    lead = lead_create(acme)
    facts = {f.id: f.text for f in playbook_facts(acme)}
    assert facts["price:1"] == "Diagnostic visit: $89.00 (credited toward the repair)."
    assert facts["booking_url"].endswith("https://acme.example/book")
    assert facts["hours"] == "Office hours (America/Chicago): Mon 8:00 AM–6:00 PM, Tue 8:00 AM–6:00 PM."

    backed = draft_proposal(
        lead, Proposal("Diagnostic visits are $89.00.", None, "price_question", "m", author="m", facts=("price:1",))
    )
    assert backed.needs_person and backed.auto_ok and backed.facts == ("price:1",)
    assert backed.template_key is None and not backed.unmodified_approved
    # A model that names an approved template for its text still gets no pass as that template.
    dressed = draft_proposal(
        lead, Proposal("Diagnostic visits are $75.", "ack_sms", "price_question", "m", author="m", facts=("price:1",))
    )
    assert dressed.needs_person and not dressed.auto_ok and not dressed.unmodified_approved
