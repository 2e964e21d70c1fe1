"""The business file's `ai` and `playbook` sections: a business's use of the
server's language model, and the approved facts a drafted reply may state."""

from __future__ import annotations

import pytest

from crm.models import Business
from crm.services.business_file import BusinessFileError, business_file_parse, business_spec_apply

pytestmark = pytest.mark.django_db

HEAD = "business: {slug: acme, name: Acme Heating & Air, timezone: America/Chicago}\n"


def load(text: str) -> Business:
    return business_spec_apply(business_file_parse(HEAD + text, path="acme.yaml")).business


def test_a_business_uses_the_model_by_default_with_no_cap_and_no_auto_reply() -> None:
    business = load("")
    assert (business.ai_enabled, business.ai_monthly_calls, business.ai_auto_reply) == (True, None, [])
    assert business.playbook == {}
    assert not business.ai_receptionist


def test_the_receptionist_is_turned_on_in_the_ai_section() -> None:
    assert load("ai: {receptionist: true}\n").ai_receptionist
    with pytest.raises(BusinessFileError) as refused:
        load("ai: {receptionist: nights}\n")
    assert "'receptionist' in ai must be true or false" in refused.value.reason


def test_the_ai_section_opts_out_caps_and_names_the_auto_reply_intents() -> None:
    business = load("ai: {enabled: false, monthly_calls: 500, auto_reply: [booking_request, question, question]}\n")
    assert (business.ai_enabled, business.ai_monthly_calls, business.ai_auto_reply) == (
        False,
        500,
        ["booking_request", "question"],
    )


@pytest.mark.parametrize(
    ("section", "line", "says"),
    [
        ("ai: {auto_reply: [revocation]}", 2, "never answered by a model"),
        ("ai: {auto_reply: [complaint]}", 2, "bad intent 'complaint' in ai auto_reply"),
        ("ai: {monthly_calls: -1}", 2, "'monthly_calls' in ai must be at least 0"),
        ("ai: {enabled: sometimes}", 2, "'enabled' in ai must be true or false"),
        ("ai: {model: gpt}", 2, "unknown key 'model' in ai"),
        ("playbook: {booking_url: acme.example}", 2, "booking_url in playbook must be an http(s) URL"),
        ("playbook:\n  prices:\n    - {item: Tune-up, amount: 12.345}", 4, "at most 2 decimals"),
        ("playbook:\n  prices:\n    - {item: Tune-up}", 4, "missing key 'amount' in playbook price"),
        ("playbook: {warranty: forever}", 2, "unknown key 'warranty' in playbook"),
    ],
)
def test_a_bad_ai_or_playbook_section_is_refused_naming_its_line(section: str, line: int, says: str) -> None:
    with pytest.raises(BusinessFileError) as refused:
        load(section + "\n")
    assert refused.value.line == line and says in refused.value.reason


def test_the_playbook_section_keeps_prices_in_the_businesss_currency_and_the_facts() -> None:
    business = load(
        "playbook:\n"
        '  booking_url: "https://acme.example/book"\n'
        "  prices:\n"
        '    - {item: "Diagnostic visit", amount: 89, note: "credited toward the repair"}\n'
        '    - {item: "AC tune-up", amount: "129.5"}\n'
        "  facts:\n"
        '    - "1-year labor warranty on repairs we make."\n'
    )
    assert business.playbook == {
        "booking_url": "https://acme.example/book",
        "prices": [
            {"item": "Diagnostic visit", "amount": "89.00", "currency": "USD", "note": "credited toward the repair"},
            {"item": "AC tune-up", "amount": "129.50", "currency": "USD"},
        ],
        "facts": ["1-year labor warranty on repairs we make."],
    }


def test_a_file_without_the_sections_leaves_them_as_they_are() -> None:
    load("ai: {monthly_calls: 10, auto_reply: [question]}\nplaybook: {facts: [Licensed.]}\n")
    business = load("")
    assert (business.ai_monthly_calls, business.ai_auto_reply, business.playbook) == (
        10,
        ["question"],
        {"facts": ["Licensed."]},
    )
