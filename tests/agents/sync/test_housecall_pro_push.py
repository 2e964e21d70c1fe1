"""A visit booked here becomes Housecall Pro's customer and one job naming
the lead, once: the customer is looked up by phone before one is made, the
job by the lead's id before one is made, and two bookings of one person
racing on real threads against PostgreSQL make one customer and one job."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agents.booking.services import appointment_book
from agents.sync.engine import sync_pump
from crm.models import Appointment, Business, SyncChange, SyncConnection, SyncLink
from tests.helpers.booking import NOW, TUE_9, TUE_13
from tests.helpers.housecall_pro import HousecallProServer, housecall_pro_connect, housecall_pro_running
from tests.helpers.races import run_together

pytestmark = pytest.mark.django_db


@pytest.fixture
def hcp(settings: Any) -> Iterator[HousecallProServer]:
    with housecall_pro_running(settings) as server:
        yield server


@pytest.fixture
def hcp_connection(shop: Business, hcp: HousecallProServer) -> SyncConnection:
    return housecall_pro_connect(shop)


def test_a_booking_makes_the_customer_and_a_job_naming_the_lead(hcp_connection, hcp, lead, rule, templates):
    appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)

    assert sync_pump() == {"done": 1}

    assert hcp.made == {"customers": 1, "jobs": 1}
    (made,) = hcp.records["customers"].values()
    assert (made["first_name"], made["last_name"], made["mobile_number"]) == ("Rosa", "Diaz", "+12125550147")
    (job,) = hcp.records["jobs"].values()
    assert job["customer"]["id"] == made["id"] and lead.public_id in job["description"]
    assert dict(SyncLink.objects.values_list("kind", "external_id")) == {"client": made["id"], "request": job["id"]}
    assert SyncLink.objects.get(kind="request").lead == lead
    assert sync_pump() == {}  # done once


def test_the_customer_is_found_by_phone_and_a_lost_answers_job_found_by_the_lead(
    hcp_connection, hcp, lead, rule, templates
):
    existing = hcp.add("customers", first_name="Rosa", last_name="D.", email=None, mobile_number="(212) 555-0147")
    # A try whose answer was lost made the job already: the retry finds it by the lead's id.
    hcp.add("jobs", description=f"Tune-up (LeadOps {lead.public_id})", customer={"id": existing}, work_status="x")

    appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)
    assert sync_pump() == {"done": 1}

    assert hcp.made == {}
    assert SyncLink.objects.get(kind="client").external_id == existing
    assert hcp.asked("/customers") == [{"q": "+12125550147", "page": "1", "page_size": "10"}]


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_bookings_of_one_person_make_one_customer_and_one_job(hcp_connection, hcp, lead, templates):
    from agents.booking.services import appointment_record_external

    for external_id, hours in (("invitee-a", 0), ("invitee-b", 4)):
        appointment_record_external(
            lead,
            starts_at=TUE_13 + timedelta(hours=hours),
            ends_at=TUE_13 + timedelta(hours=hours + 2),
            provider="calendly",
            external_id=external_id,
            actor="agent:booking_matcher",
        )
    assert Appointment.objects.count() == 2
    # Two workers take one push each; Housecall Pro is slow to make the customer.
    hcp.create_delay = 0.5

    run_together([sync_pump, sync_pump])
    # The one that waited for the other's customer finishes on a later run.
    sync_pump(now=timezone.now() + timedelta(minutes=5))

    assert hcp.made == {"customers": 1, "jobs": 1}
    assert list(SyncChange.objects.values_list("status", flat=True)) == ["done", "done"]
    assert sorted(SyncChange.objects.values_list("errors", flat=True)) == [0, 1]
    assert SyncLink.objects.filter(kind="client").count() == 1
    assert SyncLink.objects.filter(kind="request").count() == 1
