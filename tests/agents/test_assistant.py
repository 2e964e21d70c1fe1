"""The AI SMS Assistant: drafts from the approved playbook, and sends to a
person whatever the playbook does not cover."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from agents.playbook.assistant import (
    DEFAULT_DRAFTER,
    Draft,
    Drafter,
    Proposal,
    RulesDrafter,
    draft_acknowledgement,
    draft_check,
    draft_reply,
    reply_intent,
)
from agents.playbook.claims_guard import Finding
from agents.playbook.templates import template_approve, template_revise
from crm.models import Business, Lead, Message, MessageTemplate, Receipt, ServiceLine, TeamMember
from crm.services.business_file import business_file_parse, business_spec_apply
from crm.services.lead_sync import lead_assign
from tests.factories import lead_create

ACK = (
    "Hi {first_name}, this is {business}. We got your request and {owner_first_name} will reach out shortly. Reply "
    "STOP to opt out."
)
PRICE_REPLY = (
    "Hi {first_name}, prices depend on the job. {owner_first_name} will call you with a written quote. Reply STOP to "
    "opt out."
)
SCHEDULING = (
    "Hi {first_name}, {owner_first_name} from {business} will text you to pick a time that works. Reply STOP to opt "
    "out."
)
GENERIC = "Thanks {first_name}! {owner_first_name} will get back to you shortly. Reply STOP to opt out."

ACK_FOR_PAT = (
    "Hi Pat, this is Acme Heating & Air. We got your request and Sam will reach out shortly. Reply STOP to opt out."
)


def _playbook(slug: str, templates: str) -> Business:
    text = f"""
business: {{slug: {slug}, name: Acme Heating & Air, timezone: America/Chicago, region: US}}
service_lines:
  - {{slug: hvac, name: HVAC}}
team:
  - {{username: sam-{slug}, name: Sam Setter, role: setter, service_lines: [hvac]}}
  - {{username: mia-{slug}, name: Mia Manager, role: manager}}
templates:
{templates}
"""
    business_spec_apply(business_file_parse(text), actor="test")
    return Business.objects.get(slug=slug)


@pytest.fixture
def acme(db: None) -> Business:
    return _playbook(
        "acme-sms",
        f"""
  - {{key: ack_sms, channel: sms, approved: true, body: "{ACK}"}}
  - {{key: price_question_sms, channel: sms, approved: true, body: "{PRICE_REPLY}"}}
  - {{key: scheduling_sms, channel: sms, approved: true, body: "{SCHEDULING}"}}
  - {{key: reply_generic_sms, channel: sms, approved: true, body: "{GENERIC}"}}
""",
    )


@pytest.fixture
def ack_only(db: None) -> Business:
    return _playbook("ack-only", f'  - {{key: ack_sms, channel: sms, approved: true, body: "{ACK}"}}')


def _lead(business: Business, *, first_name: str = "Pat", owned: bool = True) -> Lead:
    lead = lead_create(business, first_name=first_name, service_line=ServiceLine.objects.get(business=business))
    if owned:
        setter = TeamMember.objects.get(business=business, role="setter")
        lead = lead_assign(lead, setter, actor="test", reason="test owner")
    return lead


def _user(username: str) -> Any:
    return get_user_model().objects.get(username=username)


class _ScriptedDrafter:
    """A stand-in for a language-model drafter: proposes exactly what it is given."""

    def __init__(self, proposal: Proposal) -> None:
        self.proposal = proposal

    def draft_acknowledgement(self, lead: Lead) -> Proposal:
        return self.proposal

    def draft_reply(self, lead: Lead, inbound_text: str) -> Proposal:
        return self.proposal


# --- the acknowledgement ---------------------------------------------------------------


def test_the_acknowledgement_is_the_approved_ack_template_rendered_for_the_lead(acme: Business) -> None:
    draft = draft_acknowledgement(_lead(acme))

    assert draft == Draft(
        body=ACK_FOR_PAT,
        template_key="ack_sms",
        template_version=None,
        unmodified_approved=True,
        findings=[],
        needs_person=False,
        reason="approved template ack_sms, unmodified",
        intent="acknowledgement",
    )


def test_a_pending_revision_is_not_used_until_a_person_approves_it(acme: Business) -> None:
    template = MessageTemplate.objects.get(business=acme, key="ack_sms")
    version = template_revise(
        template, "Hi {first_name}, {owner_first_name} here from {business}.", "agent:sms_assistant"
    )
    lead = _lead(acme)

    assert draft_acknowledgement(lead).body == ACK_FOR_PAT

    template_approve(version, _user("mia-acme-sms"))
    draft = draft_acknowledgement(lead)

    assert (draft.body, draft.template_version, draft.unmodified_approved) == (
        "Hi Pat, Sam here from Acme Heating & Air.",
        2,
        True,
    )


def test_an_unapproved_acknowledgement_means_a_person_acknowledges(db: None) -> None:
    business = _playbook("unapproved", f'  - {{key: ack_sms, channel: sms, approved: false, body: "{ACK}"}}')

    draft = draft_acknowledgement(_lead(business))

    assert (draft.body, draft.needs_person, draft.unmodified_approved) == ("", True, False)
    assert draft.reason == "no approved sms template for acknowledgement (ack_sms not approved): a person answers"


def test_a_lead_without_an_owner_is_acknowledged_on_behalf_of_the_team(acme: Business) -> None:
    draft = draft_acknowledgement(_lead(acme, owned=False))

    assert (draft.needs_person, draft.template_key, draft.unmodified_approved) == (False, "ack_sms", True)
    assert "our team will reach out shortly" in draft.body


def test_a_lead_known_only_by_number_is_greeted_without_a_name(acme: Business) -> None:
    draft = draft_acknowledgement(_lead(acme, first_name=""))

    assert draft.body.startswith("Hi there, this is") and not draft.needs_person


# --- replies by intent --------------------------------------------------------------------


def test_a_price_question_gets_the_approved_price_reply(acme: Business) -> None:
    draft = draft_reply(_lead(acme), "How much do you charge for a new furnace?")

    assert (draft.template_key, draft.intent, draft.unmodified_approved, draft.needs_person) == (
        "price_question_sms",
        "price",
        True,
        False,
    )
    assert draft.body == (
        "Hi Pat, prices depend on the job. Sam will call you with a written quote. Reply STOP to opt out."
    )


def test_a_price_question_without_a_price_template_goes_to_a_person_not_to_the_generic_reply(
    ack_only: Business,
) -> None:
    draft = draft_reply(_lead(ack_only), "what's the price for a tune up?")

    assert (draft.body, draft.template_key, draft.needs_person, draft.intent) == ("", None, True, "price")


def test_scheduling_words_pick_the_scheduling_template(acme: Business) -> None:
    draft = draft_reply(_lead(acme), "Can someone come out tomorrow morning?")

    assert (draft.template_key, draft.intent, draft.needs_person) == ("scheduling_sms", "schedule", False)
    assert draft.body.startswith("Hi Pat, Sam from Acme Heating & Air will text you to pick a time")


def test_scheduling_without_a_scheduling_template_falls_back_to_the_acknowledgement(ack_only: Business) -> None:
    draft = draft_reply(_lead(ack_only), "When are you available?")

    assert (draft.template_key, draft.body, draft.needs_person) == ("ack_sms", ACK_FOR_PAT, False)


def test_a_message_without_a_particular_intent_gets_the_generic_reply(acme: Business) -> None:
    draft = draft_reply(_lead(acme), "ok thanks, it's the unit in the attic")

    assert (draft.template_key, draft.intent, draft.needs_person) == ("reply_generic_sms", "generic", False)
    assert draft.body == "Thanks Pat! Sam will get back to you shortly. Reply STOP to opt out."


def test_no_approved_reply_at_all_means_a_person_replies(db: None) -> None:
    business = _playbook("no-sms", '  - {key: details_email, channel: email, approved: true, body: "Hi {first_name}"}')

    draft = draft_reply(_lead(business), "ok thanks")

    assert (draft.body, draft.needs_person) == ("", True)


@pytest.mark.parametrize(
    ("inbound", "intent"),
    [("Is the repair under warranty?", "warranty"), ("I smell gas in the basement", "emergency")],
)
def test_warranty_and_safety_messages_go_to_a_person(acme: Business, inbound: str, intent: str) -> None:
    draft = draft_reply(_lead(acme), inbound)

    assert (draft.body, draft.needs_person, draft.intent) == ("", True, intent)


@pytest.mark.parametrize(
    ("inbound", "intent"),
    [
        ("How much is a tune-up?", "price"),
        ("Do you have a $50 special?", "price"),
        ("¿Cuánto cuesta?", "price"),
        ("Can we book for Tuesday?", "schedule"),
        ("what time can you come by", "schedule"),
        ("¿Cuándo pueden venir?", "schedule"),
        ("Is it guaranteed?", "warranty"),
        ("The CO alarm is going off", "emergency"),
        ("The furnace won't fire up", "generic"),
        ("Yes this is Pat", "generic"),
    ],
)
def test_the_intent_is_read_from_the_inbound_words(inbound: str, intent: str) -> None:
    assert reply_intent(inbound) == intent


# --- approved text that makes claims ---------------------------------------------------------


def test_an_approved_template_that_makes_claims_goes_out_as_approved_with_its_findings_recorded(db: None) -> None:
    business = _playbook(
        "free-estimates",
        '  - {key: ack_sms, channel: sms, approved: true, body: "Hi {first_name}, {owner_first_name} from {business} '
        'will call you today about your free estimate."}',
    )

    draft = draft_acknowledgement(_lead(business))

    assert (draft.unmodified_approved, draft.needs_person) == (True, False)
    assert draft.findings == [
        Finding(kind="arrival_time", excerpt="today"),
        Finding(kind="discount", excerpt="free estimate"),
    ]
    assert "claims in approved text: arrival_time, discount" in draft.reason


def test_a_name_the_lead_typed_that_makes_a_claim_goes_to_a_person(acme: Business) -> None:
    draft = draft_acknowledgement(_lead(acme, first_name="Guaranteed"))

    assert (draft.unmodified_approved, draft.needs_person) == (True, True)
    assert "{first_name} makes claims (warranty)" in draft.reason


def test_a_name_with_a_link_in_it_goes_to_a_person(acme: Business) -> None:
    draft = draft_acknowledgement(_lead(acme, first_name="Win www.spam.example"))

    assert draft.needs_person
    assert "does not read as a name" in draft.reason


# --- whatever drafted, the assistant decides --------------------------------------------------


def test_the_rules_drafter_is_the_default_and_fits_the_drafter_protocol() -> None:
    drafter: Drafter = RulesDrafter()

    assert isinstance(DEFAULT_DRAFTER, RulesDrafter)
    assert callable(drafter.draft_reply)


def test_a_drafter_that_adds_a_promise_to_approved_text_is_sent_to_a_person(acme: Business) -> None:
    edited = ACK_FOR_PAT.replace("shortly", "and be there by 3pm")
    drafter = _ScriptedDrafter(Proposal(edited, "ack_sms", "acknowledgement", "personalized"))

    draft = draft_acknowledgement(_lead(acme), drafter=drafter)

    assert (draft.unmodified_approved, draft.needs_person, draft.template_version) == (False, True, None)
    assert draft.findings == [Finding(kind="arrival_time", excerpt="3pm")]


def test_a_drafter_that_rewords_approved_text_without_claims_is_not_marked_unmodified(acme: Business) -> None:
    reworded = ACK_FOR_PAT.replace("shortly", "soon")
    drafter = _ScriptedDrafter(Proposal(reworded, "ack_sms", "acknowledgement", "reworded"))

    draft = draft_acknowledgement(_lead(acme), drafter=drafter)

    assert (draft.unmodified_approved, draft.findings, draft.needs_person) == (False, [], False)


def test_free_text_from_a_drafter_goes_to_a_person_even_without_claims(acme: Business) -> None:
    drafter = _ScriptedDrafter(Proposal("Hi Pat, quick question about your HVAC.", None, "generic", "free text"))

    draft = draft_reply(_lead(acme), "hello", drafter=drafter)

    assert (draft.unmodified_approved, draft.needs_person) == (False, True)
    assert "no approved template fits" in draft.reason


def test_a_drafter_naming_an_unapproved_template_goes_to_a_person(db: None) -> None:
    business = _playbook("pending", f'  - {{key: ack_sms, channel: sms, approved: false, body: "{ACK}"}}')
    drafter = _ScriptedDrafter(Proposal(ACK_FOR_PAT, "ack_sms", "acknowledgement", "claims to be approved"))

    draft = draft_acknowledgement(_lead(business), drafter=drafter)

    assert (draft.unmodified_approved, draft.needs_person) == (False, True)
    assert "'ack_sms' is not an approved sms template" in draft.reason


def test_drafting_writes_nothing(acme: Business) -> None:
    lead = _lead(acme)
    receipts, messages = Receipt.objects.count(), Message.objects.count()

    draft_acknowledgement(lead)
    draft_reply(lead, "how much?")

    assert (Receipt.objects.count(), Message.objects.count()) == (receipts, messages)


# --- a body a person edited ---------------------------------------------------------------------


def test_an_edited_body_is_never_unmodified_approved_even_when_it_reads_the_same() -> None:
    draft = draft_check(ACK_FOR_PAT, template_key="ack_sms")

    assert (draft.unmodified_approved, draft.template_key, draft.needs_person) == (False, "ack_sms", False)


def test_an_edited_body_with_a_claim_goes_to_a_person() -> None:
    draft = draft_check("Hi Pat, we can do it for $99 and we'll be there at 3:30.", template_key="ack_sms")

    assert (draft.unmodified_approved, draft.needs_person) == (False, True)
    assert [f.kind for f in draft.findings] == ["price", "arrival_time", "arrival_time"]
    assert draft.reason == "edited text makes claims (price, arrival_time): a person must approve it"


def test_an_edited_body_without_claims_may_go_on() -> None:
    draft = draft_check("Hi Pat, Sam here. Is this the best number to reach you?")

    assert (draft.unmodified_approved, draft.needs_person, draft.findings) == (False, False, [])


def test_an_empty_edited_body_goes_to_a_person() -> None:
    assert draft_check("   ").needs_person
