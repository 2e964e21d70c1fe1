"""Booking from the thread: the service address confirmed, a visit that
already holds the lead warned of, and back to the conversation with what
happened in words."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.booking.services import appointment_book
from crm.models import Appointment, Stage
from tests.agents.booking.test_booking_page import client_for
from tests.helpers.booking import NOW, TUE_9

pytestmark = pytest.mark.django_db


def url(lead) -> str:
    return reverse("workspace:book", kwargs={"public_id": lead.public_id})


def first_slot(page: str) -> str:
    return page.split('name="slot" value="', 1)[1].split('"', 1)[0]


def test_booking_from_the_thread_keeps_the_address_and_returns_to_the_conversation(lead, rule, templates, setter):
    client = client_for("sam")
    page = client.get(url(lead)).content.decode()
    assert "Back to the conversation" in page and 'id="already-booked"' not in page

    response = client.post(url(lead), {"slot": first_slot(page), "address": "12 Elm St, Apt 3", "notes": "Dog"})

    appointment = Appointment.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("workspace:thread", args=[lead.public_id])
    assert appointment.location == "12 Elm St, Apt 3" and appointment.notes == "Dog"
    lead.refresh_from_db()
    assert lead.stage == Stage.BOOKED
    thread = client.get(response["Location"]).content.decode()
    assert "Booked: " in thread and "the confirmation text is recorded (dry run: nothing is sent)" in thread
    assert "dry_run" not in thread.split('id="flash"', 1)[1].split("</div>", 1)[0], "words, not codes"


def test_the_address_must_be_confirmed_before_booking(lead, rule, templates, setter):
    client = client_for("sam")
    page = client.get(url(lead)).content.decode()
    response = client.post(url(lead), {"slot": first_slot(page), "address": ""})
    assert response.status_code == 200 and "confirm the service address" in response.content.decode()
    assert not Appointment.objects.exists()


def test_a_visit_that_already_holds_the_lead_is_warned_of_and_a_second_booking_is_said_in_words(
    lead, rule, templates, setter
):
    appointment_book(lead, availability=rule, starts_at=TUE_9, actor="calendly", now=NOW)
    client = client_for("sam")
    page = client.get(url(lead)).content.decode()
    assert 'id="already-booked"' in page and "A visit already holds this lead" in page

    response = client.post(url(lead), {"slot": first_slot(page), "address": "12 Elm St"}, follow=True)
    said = response.content.decode()
    assert "Not booked:" in said and "is still scheduled" in said
    assert Appointment.objects.count() == 1
