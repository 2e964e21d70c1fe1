"""Service-area check, job-scope qualifier, fit scorer and offer matcher."""

from __future__ import annotations

import pytest

from agents.fit.qualify import lead_fit, postal_matches, postal_normalize
from crm.models import ConsentState, MessageTemplate, ServiceArea, ServiceLine
from crm.services.consent import consent_record
from crm.services.records import touch_add
from tests.factories import lead_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def lines(business):
    hvac = ServiceLine.objects.create(
        business=business,
        slug="hvac",
        name="HVAC",
        keywords=["furnace", "air conditioner"],
        offer="Free second opinion on replacements",
        offer_templates=["hvac_offer", "draft_only"],
    )
    plumbing = ServiceLine.objects.create(business=business, slug="plumbing", name="Plumbing", keywords=["drain"])
    ServiceArea.objects.create(business=business, name="Metro", postal_codes=["60601", "606*"])
    return hvac, plumbing


def _lead(business, text: str, postal: str = "", **answers: str):
    lead = lead_create(business)
    lead.request_text = text
    lead.save(update_fields=["request_text"])
    if postal:
        lead.contact.postal_code = postal
        lead.contact.save(update_fields=["postal_code"])
    if answers:
        touch_add(lead=lead, channel="form", answers=answers)
    return lead


def test_postal_codes_match_exactly_or_by_prefix() -> None:
    assert postal_normalize(" 60614-1234 ") == "60614"
    assert postal_matches("60614", ["606*"]) and postal_matches("60601", ["60601"])
    assert not postal_matches("60701", ["606*", "60601"])


def test_an_in_area_request_is_classified_and_scored_with_reasons(business, lines) -> None:
    hvac, _ = lines
    lead = _lead(business, "Our furnace stopped working", postal="60614")
    fit = lead_fit(lead)
    assert fit.territory.status == "in_area" and fit.territory.areas == ("Metro",)
    assert fit.service_line == hvac and fit.flags == []
    assert {r["rule"]: r["points"] for r in fit.reasons} == {"in_area": 30, "service_matched": 25, "has_phone": 15}
    assert fit.score == 70


def test_a_lead_without_a_postal_code_is_unknown_territory_not_a_guess(business, lines) -> None:
    fit = lead_fit(_lead(business, "drain is slow"))
    assert fit.territory.status == "unknown" and fit.territory.postal_code == ""
    assert "out_of_area" not in fit.flags


def test_a_form_answer_supplies_the_postal_code(business, lines) -> None:
    fit = lead_fit(_lead(business, "drain", zip="60701"))
    assert fit.territory.status == "out_of_area" and fit.flags[0] == "out_of_area"
    assert {"rule": "out_of_area", "points": -40, "why": "postal code 60701 outside every service area"} in fit.reasons


def test_scope_flags_name_the_words_that_raised_them(business, lines) -> None:
    business.scope_keywords = {"commercial": ["strip mall"]}
    business.save()
    fit = lead_fit(_lead(business, "URGENT: no heat at our strip mall, unit is under warranty", postal="60601"))
    assert fit.flags == ["emergency", "commercial", "warranty"]
    assert fit.matched["emergency"] == ["urgent", "no heat"] and fit.matched["commercial"] == ["strip mall"]
    assert fit.urgent


def test_two_matching_service_lines_are_left_for_a_person(business, lines) -> None:
    fit = lead_fit(_lead(business, "furnace and a drain", postal="60601"))
    assert fit.service_line is None and fit.matched["service_lines"] == ["hvac", "plumbing"]


def test_the_business_can_configure_the_fit_rules(business, lines) -> None:
    business.fit_rules = [{"rule": "sms_consent", "points": 50}, {"rule": "in_area", "points": 1}]
    business.save()
    lead = _lead(business, "furnace", postal="60601")
    consent_record(contact_point=lead.contact.points.get(), channel="sms", granted=True, basis="form", actor="t")
    assert ConsentState.objects.filter(channel="sms", status="granted").exists()
    fit = lead_fit(lead)
    assert fit.score == 51
    assert [r["rule"] for r in fit.reasons] == ["sms_consent", "in_area"]


def test_the_offer_matcher_lists_only_approved_templates(business, lines) -> None:
    MessageTemplate.objects.create(business=business, key="hvac_offer", channel="sms", body="x", approved=True)
    MessageTemplate.objects.create(business=business, key="draft_only", channel="sms", body="y", approved=False)
    fit = lead_fit(_lead(business, "air conditioner", postal="60601"))
    assert fit.offer == {
        "service_line": "hvac",
        "offer": "Free second opinion on replacements",
        "templates": ["hvac_offer"],
    }


def test_a_business_without_service_areas_is_unrestricted(business) -> None:
    fit = lead_fit(_lead(business, "anything", postal="99999"))
    assert fit.territory.status == "unrestricted" and "out_of_area" not in fit.flags


def test_recording_the_fit_sets_the_line_and_names_it_in_the_receipt(business, lines) -> None:
    from crm.models import Receipt
    from crm.services import lead_sync

    hvac, _ = lines
    lead = _lead(business, "furnace", postal="60601")
    fit = lead_fit(lead)
    lead_sync.lead_record_fit(
        lead,
        facts=fit.facts(),
        fit_score=fit.score,
        fit_reasons=fit.reasons,
        service_line=fit.service_line,
        actor="agent:fit",
        reason="new lead",
    )
    lead.refresh_from_db()
    assert lead.service_line == hvac and lead.fit_score == fit.score
    receipt = Receipt.objects.get(lead=lead, action="lead.fit_recorded")
    assert receipt.before["service_line"] is None and receipt.after["service_line"] == hvac.public_id
