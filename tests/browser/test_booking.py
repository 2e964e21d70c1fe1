"""A setter books an appointment from the lead page in a real browser and
sees the confirmation (dry run) and the technician brief."""

from __future__ import annotations

from datetime import time

import pytest

from crm.models import Appointment, Availability, Lead, Message, MessageTemplate, Role
from crm.services import lead_sync
from crm.services.consent import consent_record
from tests.factories import BusinessFactory, lead_create, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"


def _bookable_lead() -> Lead:
    """Rosa, Sam's lead, who may be texted, in a business with Tom's daily
    9-11 slot and the approved confirmation."""
    # Quiet hours wide open, so the confirmation is not deferred by the hour the test runs at.
    business = BusinessFactory.create(
        slug="acme", name="Acme", quiet_hours_start=time(0, 0), quiet_hours_end=time(23, 59, 59)
    )
    MessageTemplate.objects.create(
        business=business,
        key="appointment_confirmation_sms",
        channel="sms",
        approved=True,
        body="Hi {first_name}, {business} has you booked {appointment_time}. Reply STOP to opt out.",
    )
    sam = member_create(business, Role.SETTER, username="sam")
    tom = member_create(business, Role.TECHNICIAN, username="tom", display_name="Tom Technician", email="tom@x.example")
    rule = Availability.objects.create(
        business=business, days=["mon", "tue", "wed", "thu", "fri", "sat", "sun"], slots=["09:00-11:00"], capacity=1
    )
    rule.members.add(tom)
    lead = lead_sync.lead_assign(
        lead_create(business, first_name="Rosa", last_name="Diaz"), sam, actor="mia", reason="t"
    )
    consent_record(
        contact_point=lead.contact.points.get(), channel="sms", granted=True, basis="form_disclosure", actor="t"
    )
    return lead


def test_a_setter_books_an_appointment_from_the_lead_page_and_sees_the_confirmation_and_the_brief(
    live_server, browser_context
):
    lead = _bookable_lead()
    Lead.objects.filter(pk=lead.pk).update(request_text="Furnace rattles when it starts")

    page = browser_context.new_page()
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "sam")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.goto(f"{live_server.url}/admin/crm/lead/{lead.pk}/change/")
    page.click("#open-booking")
    page.wait_for_selector("#book-form")
    first_slot = page.locator("#book-form input[name=slot]").first
    first_slot.check()
    page.fill("#book-form textarea[name=notes]", "Side gate is open")
    page.click("#book-button")

    page.wait_for_selector(".messagelist .success")
    appointment = Appointment.objects.get()
    assert f"Booked {appointment.public_id}" in page.inner_text(".messagelist")
    assert page.inner_text(f"#confirmation-{appointment.public_id} .confirmation-status") == "dry_run"
    assert "Hi Rosa, Acme has you booked" in page.inner_text(f"#confirmation-{appointment.public_id}")
    brief = page.inner_text("#brief")
    assert brief.startswith(f"Technician brief — {appointment.public_id} for {lead.public_id}")
    assert "“Furnace rattles when it starts”" in brief and "Technician: Tom Technician" in brief
    assert "“Side gate is open”" in brief
    assert page.inner_text("#stage") == "booked"

    confirmation = Message.objects.get(idempotency_key=f"appointment.confirmation:{appointment.public_id}")
    assert (confirmation.status, confirmation.actor) == ("dry_run", "sam")
    rule = Availability.objects.get(business=lead.business)
    assert appointment.assigned_to.user.username == "tom" and appointment.availability == rule


def test_a_setter_books_from_the_thread_with_the_address_and_lands_back_in_it(live_server, browser_context, shots):
    lead = _bookable_lead()

    page = browser_context.new_page()
    page.goto(f"{live_server.url}/admin/login/?next=/app/leads/{lead.public_id}/")
    page.fill("#id_username", "sam")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.click("#book-button")
    page.wait_for_selector("#book-form")
    assert page.is_visible("#back-to-thread")
    page.locator("#book-form input[name=slot]").first.check()
    page.fill("#id_address", "12 Elm St, Apt 3, Chicago")
    page.screenshot(path=str(shots / "book-from-thread.png"), full_page=True)
    page.click("#book-submit")

    page.wait_for_url(f"**/app/leads/{lead.public_id}/")
    flash = page.inner_text("#flash")
    assert flash.startswith("Booked: ") and "the confirmation text is recorded (dry run: nothing is sent)" in flash
    assert Appointment.objects.get().location == "12 Elm St, Apt 3, Chicago"
    page.wait_for_selector("#conversation >> text=has you booked")
    page.screenshot(path=str(shots / "booked-thread.png"), full_page=True)
