"""A visit booked here becomes Jobber's client and request, once: the push
is a row of the booking's transaction, the client is looked up by phone and
email before one is made, and two bookings of one person racing on real
threads against PostgreSQL make one client and one request."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial
from zoneinfo import ZoneInfo

import pytest
from django.db import transaction
from django.utils import timezone

from agents.booking.services import appointment_book, appointment_record_external
from agents.sync.engine import sync_pump
from crm.models import Appointment, Lead, Receipt, SyncChange, SyncLink
from crm.services import lead_sync
from crm.services.records import lead_open
from tests.factories import ServiceLineFactory
from tests.helpers.booking import NOW, TUE_9, TUE_13
from tests.helpers.races import run_together

pytestmark = pytest.mark.django_db


def test_a_booking_writes_its_push_in_its_own_transaction(connection, lead, rule, templates):
    with pytest.raises(RuntimeError), transaction.atomic():
        appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)
        assert SyncChange.objects.filter(direction="push").count() == 1
        raise RuntimeError("the booking rolls back")
    assert not SyncChange.objects.exists()  # no push for a booking that did not happen

    booked = appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW).appointment
    change = SyncChange.objects.get()
    assert (change.direction, change.kind, change.record, change.key) == (
        "push",
        "booking",
        booked.public_id,
        f"booking:{booked.public_id}",
    )
    assert change.lead == lead and change.status == "pending"


def test_a_booking_makes_the_jobber_client_and_a_request_naming_the_lead(connection, jobber, lead, rule, templates):
    appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)

    assert sync_pump() == {"done": 1}

    assert jobber.made == {"client": 1, "request": 1}
    (client,) = jobber.records["client"].values()
    assert (client["firstName"], client["lastName"]) == ("Rosa", "Diaz")
    assert client["phones"] == [{"number": "+12125550147"}]
    (request,) = jobber.records["request"].values()
    assert request["client"]["id"] == client["id"] and lead.public_id in request["title"]
    # The visit's time as the shop reads it (its zone), not UTC.
    assert f"{TUE_9.astimezone(ZoneInfo(lead.business.timezone)):%a %d %b %Y} 09:00" in request["title"]
    links = dict(SyncLink.objects.values_list("kind", "external_id"))
    assert links == {"client": client["id"], "request": request["id"]}
    assert SyncLink.objects.get(kind="request").lead == lead
    assert set(Receipt.objects.filter(action="sync.pushed").values_list("subject", flat=True)) == {
        lead.contact.public_id,
        lead.public_id,
    }
    change = SyncChange.objects.get()
    assert change.status == "done" and request["id"] in change.outcome
    connection.refresh_from_db()
    assert connection.last_success_at is not None
    assert sync_pump() == {}  # done once


def test_the_client_is_found_by_phone_before_one_is_made(connection, jobber, lead, rule, templates):
    existing = jobber.add("client", firstName="Rosa", lastName="D.", emails=[], phones=[{"number": "(212) 555-0147"}])

    appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)
    sync_pump()

    assert jobber.made == {"request": 1}
    assert SyncLink.objects.get(kind="client").external_id == existing
    assert jobber.fields_asked("clients") == [{"search": "+12125550147", "first": 10}]


def test_a_rescheduled_visit_finds_the_leads_request_and_makes_no_other(connection, jobber, lead, rule, templates):
    from agents.booking.services import appointment_reschedule

    booked = appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW).appointment
    sync_pump()
    appointment_reschedule(booked, availability=rule, starts_at=TUE_13, actor="sam", now=NOW)

    assert sync_pump() == {"done": 1}
    assert jobber.made == {"client": 1, "request": 1}


def test_a_visit_jobber_sent_us_is_not_pushed_back(connection, lead):
    appointment_record_external(
        lead,
        starts_at=TUE_9,
        ends_at=TUE_9 + timedelta(hours=2),
        provider="jobber",
        external_id="visit-1",
        actor="agent:sync:jobber",
    )
    assert not SyncChange.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_bookings_of_one_person_make_one_client_and_a_request_per_lead(
    connection, jobber, lead, rule, templates, setter
):
    plumbing = ServiceLineFactory.create(business=lead.business, slug="plumbing", name="Plumbing")
    second = lead_open(contact=lead.contact, actor="test", service_line=plumbing, touch={"channel": "form"})
    lead_sync.lead_assign(second, setter, actor="test", reason="test")

    def book(which: Lead, starts_at: datetime) -> str:
        return appointment_book(
            which, availability=rule, starts_at=starts_at, actor="sam", now=NOW
        ).appointment.public_id

    booked = run_together([partial(book, lead, TUE_9), partial(book, second, TUE_13)])
    assert Appointment.objects.filter(public_id__in=booked).count() == 2
    assert SyncChange.objects.filter(direction="push").count() == 2

    # Two workers take one push each; Jobber is slow to make the client.
    jobber.create_delay = 0.5
    run_together([sync_pump, sync_pump])
    # The one that waited for the other's client finishes on a later run.
    sync_pump(now=timezone.now() + timedelta(minutes=5))

    assert jobber.made == {"client": 1, "request": 2}
    # One worker met the other's claim on the person and waited for its client.
    assert sorted(SyncChange.objects.values_list("errors", flat=True)) == [0, 1]
    assert set(SyncChange.objects.values_list("status", flat=True)) == {"done"}
    assert SyncLink.objects.filter(kind="client").count() == 1
    assert sorted(SyncLink.objects.filter(kind="request").values_list("lead", flat=True)) == sorted(
        [lead.pk, second.pk]
    )


@pytest.mark.django_db(transaction=True)
def test_two_visits_of_one_lead_pushed_at_once_make_one_client_and_one_request(connection, jobber, lead, templates):
    for external_id, hours in (("invitee-a", 0), ("invitee-b", 4)):
        appointment_record_external(
            lead,
            starts_at=TUE_9 + timedelta(hours=hours),
            ends_at=TUE_9 + timedelta(hours=hours + 2),
            provider="calendly",
            external_id=external_id,
            actor="agent:booking_matcher",
        )
    jobber.create_delay = 0.5

    run_together([sync_pump, sync_pump])
    sync_pump(now=timezone.now() + timedelta(minutes=5))

    assert jobber.made == {"client": 1, "request": 1}
    assert list(SyncChange.objects.values_list("status", flat=True)) == ["done", "done"]
    assert sorted(SyncChange.objects.values_list("errors", flat=True)) == [0, 1]
