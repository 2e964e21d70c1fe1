"""Technician Brief: quotes the record, names where each line came from,
turns what is missing into questions, and never invents."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest

from agents.booking.services import appointment_book
from agents.booking.slots import moment_label
from agents.booking.technician_brief import brief_build
from crm.models import Contact, Lead
from crm.services.records import touch_add
from tests.factories import ServiceLineFactory
from tests.helpers.booking import NOW, TUE_9, TUE_9_LABEL, owned_lead

pytestmark = pytest.mark.django_db


def test_the_brief_quotes_the_request_source_answers_notes_and_property(shop, setter, rule):
    hvac = ServiceLineFactory.create(business=shop, slug="hvac", name="HVAC")
    lead = owned_lead(shop, setter, first_name="Rosa", last_name="Diaz", email="rosa@example.com", service_line=hvac)
    Contact.objects.filter(pk=lead.contact_id).update(
        address="12 Elm St", postal_code="60601", notes="Side gate, dog in the yard"
    )
    Lead.objects.filter(pk=lead.pk).update(request_text="Furnace  makes a\nbanging noise at night")
    touch = touch_add(
        lead=lead,
        channel="form",
        provider="typeform",
        campaign_id="cmp-9",
        utm={"source": "facebook"},
        answers={
            "age": {"title": "How old is the furnace?", "type": "short_text", "value": "about 15 years"},
            "_hidden": {"gclid": "x"},
        },
    )
    appointment = appointment_book(
        lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW, notes="Bring the long ladder"
    ).appointment
    lead.refresh_from_db()

    brief = brief_build(appointment)

    assert f"Technician brief — {appointment.public_id} for {lead.public_id}" in brief
    assert f"When: {TUE_9_LABEL} (America/Chicago)" in brief
    assert "Technician: Tom Technician" in brief
    assert f"Customer: Rosa Diaz ({lead.contact.public_id})" in brief
    assert "Phone: +12125550147" in brief and "Email: rosa@example.com" in brief
    assert "Property: 12 Elm St, 60601" in brief
    assert "Service: HVAC" in brief
    # Quoted as written (whitespace folded), never paraphrased.
    assert f"Request ({lead.public_id}): “Furnace makes a banging noise at night”" in brief
    # One format for every time in the brief, on the business's clock (the visit's and the source's).
    received = moment_label(touch.received_at, ZoneInfo("America/Chicago"))
    assert received.endswith(("CST", "CDT")) and "UTC" not in brief
    assert f"Source ({touch.public_id}): form via typeform on {received}" in brief
    assert "campaign cmp-9, source=facebook" in brief
    assert "  - How old is the furnace?: “about 15 years”" in brief and "gclid" not in brief
    assert f"Customer notes ({lead.contact.public_id}): “Side gate, dog in the yard”" in brief
    assert f"Booking notes ({appointment.public_id}): “Bring the long ladder”" in brief
    assert "Open questions:\n  - none: the record answers the basics" in brief
    assert f"/admin/crm/lead/{lead.pk}/change/" in brief and f"/admin/crm/appointment/{appointment.pk}/change/" in brief
    assert appointment.brief == brief


def test_what_the_record_lacks_becomes_an_open_question_not_a_guess(shop, setter, rule):
    lead = owned_lead(shop, setter, first_name="", last_name="")
    appointment = appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW).appointment

    brief = brief_build(appointment)

    assert "Property: not on record" in brief and "Service: not identified" in brief
    assert "Request (" not in brief and "Customer notes" not in brief
    questions = brief.split("Open questions:\n", 1)[1].split("\nLead record:")[0].splitlines()
    assert questions == [
        "  - Ask the customer's name: the record has none.",
        "  - No property address on record: confirm the address before driving out.",
        "  - The service is not identified: ask what the job is.",
        "  - The customer wrote no request: ask what they need done.",
    ]


def test_every_quoted_line_is_text_from_the_record(shop, setter, rule):
    lead = owned_lead(shop, setter, first_name="Ana", last_name="Lopez")
    Lead.objects.filter(pk=lead.pk).update(request_text="Water heater leaking")
    appointment = appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW).appointment
    record_text = {"Water heater leaking"}
    quoted = [line.split("“", 1)[1].rstrip("”") for line in brief_build(appointment).splitlines() if "“" in line]
    assert quoted and set(quoted) <= record_text
