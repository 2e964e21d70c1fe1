"""The lead's booking page: what a setter sees and what each button does."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from agents.booking.services import appointment_book
from agents.booking.slots import slot_key
from crm.models import Appointment, Role, Stage
from tests.factories import member_create
from tests.helpers.booking import NOW, TUE_9, owned_lead

pytestmark = pytest.mark.django_db
PASSWORD = "pw-for-tests-1"


def client_for(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


def url(lead) -> str:
    return reverse("lead-booking", kwargs={"public_id": lead.public_id})


def next_slot_key(client: Client, lead) -> str:
    page = client.get(url(lead)).content.decode()
    return page.split('name="slot" value="', 1)[1].split('"', 1)[0]


def test_the_lead_page_links_to_booking(lead, rule, setter):
    page = client_for("sam").get(reverse("admin:crm_lead_change", args=[lead.pk])).content.decode()
    assert f'id="open-booking" href="{url(lead)}"' in page


def test_a_setter_books_from_the_page_and_sees_the_confirmation_and_the_brief(lead, rule, templates, setter):
    client = client_for("sam")
    key = next_slot_key(client, lead)

    response = client.post(url(lead), {"action": "book", "slot": key, "notes": "Gate code 1234"}, follow=True)

    appointment = Appointment.objects.get()
    page = response.content.decode()
    assert f"Booked {appointment.public_id}" in page and "Confirmation msg_" in page and ": dry_run." in page
    assert 'id="brief"' in page and "Booking notes" in page and "Gate code 1234" in page
    assert 'class="confirmation-status">dry_run' in page
    lead.refresh_from_db()
    assert lead.stage == Stage.BOOKED and appointment.notes == "Gate code 1234"


def test_a_full_slot_is_refused_on_the_page_with_the_reason(lead, rule, shop, setter, templates):
    appointment_book(
        owned_lead(shop, setter, phone="+12125550148"), availability=rule, starts_at=TUE_9, actor="sam", now=NOW
    )
    response = client_for("sam").post(url(lead), {"action": "book", "slot": slot_key(rule, TUE_9)}, follow=True)
    assert "Not done (slot_full)" in response.content.decode()
    assert Appointment.objects.count() == 1


def test_a_made_up_slot_is_refused(lead, rule, setter):
    response = client_for("sam").post(
        url(lead), {"action": "book", "slot": slot_key(rule, TUE_9 + timedelta(minutes=30))}, follow=True
    )
    assert "Not done (not_a_slot)" in response.content.decode() and not Appointment.objects.exists()


def test_cancel_held_and_no_show_buttons_call_their_services(lead, rule, setter, templates):
    client = client_for("sam")
    client.post(url(lead), {"action": "book", "slot": next_slot_key(client, lead)})
    appointment = Appointment.objects.get()
    page = client.get(url(lead)).content.decode()
    assert "Nothing is texted to Rosa: the reminders of the visit are withdrawn" in page
    assert "Yes, cancel the visit" in page and "Yes, they did not show" in page
    unconfirmed = {"action": "cancel", "appointment": appointment.public_id, "reason": "double booked"}
    response = client.post(url(lead), unconfirmed, follow=True)
    assert "confirm first" in response.content.decode()
    appointment.refresh_from_db()
    assert appointment.status == "scheduled", "a cancel without its confirmation does nothing"
    response = client.post(url(lead), {**unconfirmed, "reason": "", "confirmed": "yes"}, follow=True)
    assert "incomplete form" in response.content.decode()
    client.post(url(lead), {**unconfirmed, "confirmed": "yes"})
    appointment.refresh_from_db()
    assert appointment.status == "canceled"


def test_a_no_show_says_what_it_will_send_and_waits_for_its_confirmation(lead, rule, setter, templates):
    client = client_for("sam")
    client.post(url(lead), {"action": "book", "slot": next_slot_key(client, lead)})
    appointment = Appointment.objects.get()
    page = client.get(url(lead)).content.decode()
    says = page.split('class="no-show-form"', 1)[1].split('class="says">', 1)[1].split("</p>", 1)[0]
    assert says.startswith("For Rosa, ") and ("text" in says or "path" in says), says
    client.post(url(lead), {"action": "no_show", "appointment": appointment.public_id})
    appointment.refresh_from_db()
    assert appointment.status == "scheduled"


def test_someone_who_cannot_see_the_lead_gets_404(lead, rule, shop):
    member_create(shop, Role.SETTER, username="sara")
    assert client_for("sara").get(url(lead)).status_code == 404


def test_the_technician_of_the_visit_may_look_but_not_book(lead, rule, shop, templates):
    ted = member_create(shop, Role.TECHNICIAN, username="ted")
    rule.members.add(ted)
    appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW, assigned_to=ted)
    client = client_for("ted")
    page = client.get(url(lead)).content.decode()
    assert "You may look, not book." in page and 'id="brief"' in page
    response = client.post(url(lead), {"action": "cancel", "appointment": "x", "reason": "r"})
    assert response.status_code == 403  # a refused write is refused, not a redirect with a message
    assert Appointment.objects.get().status == "scheduled"


def test_the_page_costs_the_same_queries_however_many_appointments(
    lead, rule, setter, templates, django_assert_num_queries
):
    from agents.booking.services import appointment_reschedule

    client = client_for("sam")
    client.get(url(lead))  # the session and the user's scope, as on any later page
    booked = appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW).appointment
    # Two of them say what a no-show would send (the no_show path, else the rebooking text);
    # one reads the technicians' calendar busy blocks for the slots.
    with django_assert_num_queries(14):
        assert client.get(url(lead)).status_code == 200
    for days in (1, 2):
        booked = appointment_reschedule(
            booked, availability=rule, starts_at=TUE_9 + timedelta(days=days), actor="sam", now=NOW
        ).appointment
    assert lead.appointments.count() == 3
    with django_assert_num_queries(14):
        assert client.get(url(lead)).status_code == 200
