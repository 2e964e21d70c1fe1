"""Calendly webhooks: signed as Calendly signs (t=…,v1=… over "t.body"),
stored raw first, then created / canceled / no-show processed and linked to
the lead by the Booking Matcher (email, phone, UTM), or handed to a person."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agents.capture.providers.calendly import TOLERANCE_SECONDS, calendly_signature, signature_problem
from crm.models import (
    Appointment,
    ExceptionItem,
    InboundEvent,
    Lead,
    Receipt,
    RejectedDelivery,
    Source,
    Stage,
    Task,
    Timer,
)
from tests.helpers.booking import owned_lead
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

SAMPLES = Path(__file__).parent / "samples"
CREATED = (SAMPLES / "calendly_invitee_created.json").read_bytes()
CANCELED = (SAMPLES / "calendly_invitee_canceled.json").read_bytes()
NO_SHOW = (SAMPLES / "calendly_no_show.json").read_bytes()
# The signature test vector Calendly's documentation gives.
VECTOR_KEY = "test_calendly_signing_key_0123456789"
VECTOR_CREATED = "t=1773500713,v1=8a8477f9ed2164ab3fd8942ebbbc8c2b0617e2a96d9294c952b0db871393a160"
VECTOR_NO_SHOW = "t=1773786005,v1=7e4c1bc8d400ad48b4fe34286789d4f5a8a7b5cff5b9b511bc5bff18389fd26e"
INVITEE = "https://api.calendly.com/scheduled_events/CCCCCCCCCCCCCCCC/invitees/DDDDDDDDDDDDDDDD"
URL = "/hooks/calendly/cal/"
EMAIL = "jordan.sample@example.com"


@pytest.fixture
def source(shop) -> Source:
    return Source.objects.create(business=shop, key="cal", provider="calendly", secret=VECTOR_KEY)


def edited(raw: bytes, **payload: Any) -> bytes:
    data = json.loads(raw)
    for key, value in payload.items():
        if key == "tracking":
            data["payload"]["tracking"].update(value)
        else:
            data["payload"][key] = value
    return json.dumps(data).encode()


def post(body: bytes, *, key: str = VECTOR_KEY, t: int | None = None, header: str | None = None):
    signed = calendly_signature(key, body, int(time.time()) if t is None else t)
    headers = {"Calendly-Webhook-Signature": signed if header is None else header}
    return Client().post(URL, data=body, content_type="application/json", headers=headers)


def deliver(body: bytes, on_commit) -> list[str]:
    with on_commit(execute=True):
        response = post(body)
    assert response.status_code == 200, response.content
    return run_queued_events()


# --- signatures -------------------------------------------------------------------


def test_the_signing_helper_reproduces_the_published_vectors():
    assert calendly_signature(VECTOR_KEY, CREATED, 1773500713) == VECTOR_CREATED
    assert calendly_signature(VECTOR_KEY, NO_SHOW, 1773786005) == VECTOR_NO_SHOW
    assert signature_problem(VECTOR_CREATED, CREATED, VECTOR_KEY, now=1773500713 + 60) == ""


def test_the_published_vector_is_stale_now_and_outside_the_tolerance_either_way():
    assert signature_problem(VECTOR_CREATED, CREATED, VECTOR_KEY).startswith("stale Calendly-Webhook-Signature")
    early = 1773500713 - TOLERANCE_SECONDS - 1
    assert signature_problem(VECTOR_CREATED, CREATED, VECTOR_KEY, now=early).startswith("stale")
    assert signature_problem(VECTOR_CREATED, CREATED, VECTOR_KEY, now=1773500713 + TOLERANCE_SECONDS) == ""


def test_a_good_signature_stores_the_raw_event_first(source, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(CREATED)
    assert response.status_code == 200 and response.json()["status"] == "received"
    event = InboundEvent.objects.get()
    assert bytes(event.body) == CREATED and event.signature_ok
    assert (event.provider, event.kind, event.external_id) == (
        "calendly",
        "invitee.created",
        f"invitee.created:{INVITEE}",
    )
    assert event.headers["Calendly-Webhook-Signature"].startswith("t=")


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"key": "not-the-signing-key"}, "does not match the body"),
        ({"t": -TOLERANCE_SECONDS - 30}, "stale"),
        ({"t": TOLERANCE_SECONDS + 30}, "stale"),
        ({"header": ""}, "missing or malformed"),
        ({"header": "v1=abc"}, "missing or malformed"),
    ],
    ids=["bad", "stale", "future", "missing", "no timestamp"],
)
def test_a_bad_stale_or_missing_signature_is_refused_counted_and_not_stored(source, kwargs, reason):
    if "t" in kwargs:  # seconds from now, taken when the test runs
        kwargs = {"t": int(time.time()) + kwargs["t"]}
    response = post(CREATED, **kwargs)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_signature" and reason in response.json()["detail"]
    assert not InboundEvent.objects.exists()
    assert RejectedDelivery.objects.get(source=source).count == 1


def test_the_published_vector_replayed_today_is_refused_as_stale(source):
    response = post(CREATED, header=VECTOR_CREATED)
    assert response.status_code == 401 and "stale" in response.json()["detail"]


def test_without_a_source_secret_the_settings_key_signs(shop, settings):
    Source.objects.create(business=shop, key="cal", provider="calendly")
    settings.CALENDLY_SIGNING_KEY = "global-calendly-key"
    assert post(CREATED, key="global-calendly-key").status_code == 200
    settings.CALENDLY_SIGNING_KEY = ""
    response = post(CREATED, key="")
    assert response.status_code == 401 and "no Calendly signing key" in response.json()["detail"]


def test_an_unknown_source_is_404_and_a_repeat_is_answered_200_once_stored(source):
    assert Client().post("/hooks/calendly/nope/", data=CREATED, content_type="application/json").status_code == 404
    first, second = post(CREATED), post(CREATED)
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.json()["duplicate"] is True and InboundEvent.objects.count() == 1


def test_a_signed_body_we_cannot_read_is_stored_failed_and_answered_400(source):
    response = post(b'{"event": "invitee.created", "payload": "nope"}')
    assert response.status_code == 400
    assert response.json()["error"] == "malformed_payload" and "payload" in response.json()["detail"]
    event = InboundEvent.objects.get()
    assert event.status == "failed" and event.error.startswith("malformed payload")


# --- the Booking Matcher ---------------------------------------------------------------


def test_a_booking_matched_by_email_books_the_lead(source, shop, setter, tech, django_capture_on_commit_callbacks):
    lead = owned_lead(shop, setter, email=EMAIL, phone="+12125550147")
    tech.email = "estimator@example.com"
    tech.save()

    assert deliver(CREATED, django_capture_on_commit_callbacks) == ["processed"]

    appointment = Appointment.objects.get()
    lead.refresh_from_db()
    assert (appointment.lead, appointment.provider, appointment.external_id) == (lead, "calendly", INVITEE)
    assert appointment.starts_at.isoformat() == "2026-03-17T22:00:00+00:00"
    assert appointment.assigned_to == tech  # the Calendly host, by email
    assert "What do you need help with?: Roof repair - leak over garage" in appointment.notes
    assert lead.stage == Stage.BOOKED and "Technician brief" in appointment.brief
    # Calendly confirms its own bookings: no confirmation from us.
    assert not lead.messages.exists()


def test_a_booking_matched_by_phone_books_the_lead(source, shop, setter, django_capture_on_commit_callbacks):
    lead = owned_lead(shop, setter, phone="+12125550147")
    body = edited(CREATED, email="someone.else@example.com", text_reminder_number="(212) 555-0147")
    deliver(body, django_capture_on_commit_callbacks)
    lead.refresh_from_db()
    assert Appointment.objects.get().lead == lead and lead.stage == Stage.BOOKED


def test_a_booking_matched_by_the_lead_id_in_the_utm_wins_over_the_email(
    source, shop, setter, django_capture_on_commit_callbacks
):
    by_email = owned_lead(shop, setter, email=EMAIL, phone="+12125550147")
    named = owned_lead(shop, setter, phone="+12125550148")
    deliver(edited(CREATED, tracking={"utm_content": named.public_id}), django_capture_on_commit_callbacks)
    assert Appointment.objects.get().lead == named
    by_email.refresh_from_db()
    assert by_email.stage == Stage.ASSIGNED


def test_an_unmatched_booking_becomes_an_exception_for_the_manager(
    source, shop, manager, django_capture_on_commit_callbacks
):
    assert deliver(CREATED, django_capture_on_commit_callbacks) == ["processed"]

    assert not Appointment.objects.exists() and not Lead.objects.exists()
    event = InboundEvent.objects.get()
    item = ExceptionItem.objects.get()
    assert (item.kind, item.subject, item.owner, item.status) == ("booking_unmatched", event.public_id, manager, "open")
    assert INVITEE in item.detail and "no contact has this email or phone" in item.detail
    task = Task.objects.get(kind="exception")
    assert task.owner == manager and task.lead is None
    assert task.title.startswith("Calendly booking matches no lead: Jordan Sample <jordan.sample@example.com>")

    # Canceled before anyone matched it: the exception closes with its task.
    deliver(CANCELED, django_capture_on_commit_callbacks)
    item.refresh_from_db()
    task.refresh_from_db()
    assert (item.status, task.status) == ("resolved", "done")
    # Opened and closed through the task service: a receipt each, like every other task.
    actions = set(Receipt.objects.filter(subject=task.public_id).values_list("action", flat=True))
    assert actions == {"task.created", "task.completed"}


def test_email_and_phone_of_different_people_are_ambiguous_and_go_to_a_person(
    source, shop, setter, manager, django_capture_on_commit_callbacks
):
    owned_lead(shop, setter, email=EMAIL, phone="+12125550147")
    owned_lead(shop, setter, phone="+12125550148")
    deliver(edited(CREATED, text_reminder_number="+12125550148"), django_capture_on_commit_callbacks)
    assert not Appointment.objects.exists()
    assert "ambiguous" in ExceptionItem.objects.get().detail


def test_a_lead_that_cannot_be_booked_goes_to_a_person_with_the_lead(
    source, shop, setter, manager, django_capture_on_commit_callbacks
):
    from crm.services import lead_sync

    lead = owned_lead(shop, setter, email=EMAIL)
    for stage in (Stage.QUALIFIED, Stage.BOOKED, Stage.APPOINTMENT_HELD):
        lead_sync.lead_transition(lead, stage, actor="sam", reason="test")
    deliver(CREATED, django_capture_on_commit_callbacks)
    item = ExceptionItem.objects.get()
    assert item.lead == lead and "appointment_held" in item.detail and not Appointment.objects.exists()


# --- canceled, rescheduled, no-show ---------------------------------------------------------


def test_a_cancellation_cancels_the_visit_and_the_owner_rebooks(
    source, shop, setter, django_capture_on_commit_callbacks
):
    from agents.orchestrator import orchestrate_pending

    lead = owned_lead(shop, setter, email=EMAIL)
    deliver(CREATED, django_capture_on_commit_callbacks)
    assert deliver(CANCELED, django_capture_on_commit_callbacks) == ["processed"]

    appointment = Appointment.objects.get()
    lead.refresh_from_db()
    assert appointment.status == "canceled" and lead.stage == Stage.QUALIFIED
    orchestrate_pending()
    task = Task.objects.get(lead=lead, kind="next_action", status="open")
    assert task.title.startswith("Rebook ") and task.owner == setter


def test_a_reschedule_frees_the_old_visit_and_books_the_new_one_without_unbooking_the_lead(
    source, shop, setter, django_capture_on_commit_callbacks
):
    lead = owned_lead(shop, setter, email=EMAIL)
    deliver(CREATED, django_capture_on_commit_callbacks)
    new_uri = INVITEE.replace("DDDDDDDDDDDDDDDD", "EEEEEEEEEEEEEEEE")
    deliver(edited(CANCELED, rescheduled=True, new_invitee=new_uri), django_capture_on_commit_callbacks)
    lead.refresh_from_db()
    assert lead.stage == Stage.BOOKED
    assert not Timer.objects.filter(dedupe_key__startswith="evt:cancellation:").exists()

    deliver(edited(CREATED, uri=new_uri, old_invitee=INVITEE), django_capture_on_commit_callbacks)

    old, new = Appointment.objects.get(external_id=INVITEE), Appointment.objects.get(external_id=new_uri)
    assert (old.status, new.status, new.rescheduled_from) == ("canceled", "scheduled", old)
    lead.refresh_from_db()
    assert lead.stage == Stage.BOOKED


def test_a_no_show_starts_recovery(source, shop, setter, django_capture_on_commit_callbacks):
    lead = owned_lead(shop, setter, email=EMAIL)
    deliver(CREATED, django_capture_on_commit_callbacks)
    assert deliver(NO_SHOW, django_capture_on_commit_callbacks) == ["processed"]
    lead.refresh_from_db()
    assert Appointment.objects.get().status == "no_show" and lead.stage == Stage.NO_SHOW
    assert Timer.objects.filter(dedupe_key=f"evt:no_show:{Appointment.objects.get().public_id}").exists()


def test_the_invitee_no_show_resource_shape_is_read_too(source, shop, setter, django_capture_on_commit_callbacks):
    lead = owned_lead(shop, setter, email=EMAIL)
    deliver(CREATED, django_capture_on_commit_callbacks)
    body = json.dumps(
        {
            "event": "invitee_no_show.created",
            "created_at": "2026-03-17T22:20:05.000000Z",
            "payload": {
                "uri": "https://api.calendly.com/invitee_no_shows/FFFFFFFFFFFFFFFF",
                "invitee": INVITEE,
                "created_at": "2026-03-17T22:20:04.000000Z",
            },
        }
    ).encode()
    assert deliver(body, django_capture_on_commit_callbacks) == ["processed"]
    lead.refresh_from_db()
    assert lead.stage == Stage.NO_SHOW


def test_a_taken_back_no_show_is_stored_and_ignored(source, shop, setter, django_capture_on_commit_callbacks):
    body = NO_SHOW.replace(b'"invitee_no_show.created"', b'"invitee_no_show.deleted"')
    assert deliver(body, django_capture_on_commit_callbacks) == ["ignored"]


def test_replaying_a_processed_booking_records_nothing_twice(source, shop, setter, django_capture_on_commit_callbacks):
    from agents.capture.processing import event_process

    owned_lead(shop, setter, email=EMAIL)
    deliver(CREATED, django_capture_on_commit_callbacks)
    event = InboundEvent.objects.get()
    InboundEvent.objects.filter(pk=event.pk).update(status="failed")  # as if a person pressed replay
    assert event_process(event.pk) == "processed"
    assert Appointment.objects.count() == 1


def test_a_no_show_processed_before_its_booking_records_the_booking_first(
    source, shop, setter, django_capture_on_commit_callbacks
):
    from agents.capture.processing import event_process

    lead = owned_lead(shop, setter, email=EMAIL)
    for body in (CREATED, NO_SHOW):
        with django_capture_on_commit_callbacks(execute=True):
            assert post(body).status_code == 200
    booking, missed = InboundEvent.objects.order_by("received_at", "pk")
    # Calendly does not promise order and workers run in parallel: the no-show's worker goes first.
    assert event_process(missed.pk) == "processed"
    booking.refresh_from_db()
    lead.refresh_from_db()
    assert booking.status == "processed" and Appointment.objects.get().status == "no_show"
    assert lead.stage == Stage.NO_SHOW
    assert event_process(booking.pk) == "skipped"


def test_a_booking_link_names_the_lead_and_its_booking_matches_by_it(
    source, shop, setter, django_capture_on_commit_callbacks
):
    from urllib.parse import parse_qs, urlsplit

    from agents.booking.matcher import booking_link

    lead = owned_lead(shop, setter, phone="+12125550148")
    link = booking_link("https://calendly.com/acme/visit?utm_source=sms&utm_content=old", lead)
    query = parse_qs(urlsplit(link).query)
    assert query == {"utm_source": ["sms"], "utm_content": [lead.public_id]}
    # Calendly hands the link's UTM parameters back in `tracking`.
    deliver(edited(CREATED, tracking={"utm_content": query["utm_content"][0]}), django_capture_on_commit_callbacks)
    assert Appointment.objects.get().lead == lead
