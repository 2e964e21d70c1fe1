"""A technician's Google Calendar, kept in step through the sync engine: the
consent, busy blocks taking the technician off slots, a booked visit made
into one event, and the calendar's channel notifications moving or canceling
our visit through the existing reschedule and cancel paths. Against a real
local server in Google's shapes (tests/helpers/google_calendar.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.test import Client
from django.utils import timezone

from agents.booking.services import appointment_book, appointment_cancel, appointment_reschedule
from agents.booking.slots import slots_offer
from agents.sync.base import ADAPTERS, PushBooking
from agents.sync.engine import calendar_busy_refresh, calendar_watch, reconcile, sync_pump, sync_sweep, with_session
from agents.sync.google_calendar import event_id
from crm.models import Appointment, ExceptionItem, InboundEvent, Receipt, RejectedDelivery, SyncConnection, SyncLink
from crm.services.sync import connection_connect
from tests.factories import member_create
from tests.helpers.booking import NOW, TUE_9, TUE_13
from tests.helpers.capture import run_queued_events
from tests.helpers.google_calendar import EMAIL, GoogleCalendarServer, google_calendar_running

pytestmark = pytest.mark.django_db


@pytest.fixture
def google(settings: Any) -> Iterator[GoogleCalendarServer]:
    settings.PUBLIC_BASE_URL = "https://leadops.example.com"
    with google_calendar_running(settings) as server:
        yield server


@pytest.fixture
def calendar(shop, tech, google, manager) -> SyncConnection:
    """Tom's calendar connected, as the OAuth callback leaves it."""
    tokens = google.grant()
    return connection_connect(
        shop,
        provider="google_calendar",
        account_id=EMAIL,
        account_name=EMAIL,
        access_token=tokens["access_token"],
        refresh_token=tokens["refresh_token"],
        expires_at=timezone.now() + timedelta(hours=1),
        actor="tom",
        member=tech,
    )


def _notify(conn: SyncConnection, number: int, *, state: str = "exists", token: str | None = None) -> Any:
    return Client().post(
        "/hooks/google-calendar/",
        b"",
        content_type="application/json",
        headers={
            "X-Goog-Channel-ID": conn.channel_id,
            "X-Goog-Channel-Token": conn.channel_token if token is None else token,
            "X-Goog-Resource-State": state,
            "X-Goog-Resource-ID": conn.channel_resource_id,
            "X-Goog-Message-Number": str(number),
        },
    )


def _booked(lead, rule, tech) -> Appointment:
    return appointment_book(
        lead, availability=rule, starts_at=TUE_9, actor="sam", assigned_to=tech, now=NOW
    ).appointment


def test_a_technician_connects_their_own_calendar_through_the_consent(shop, tech, google):
    tech.user.is_staff = True
    tech.user.save(update_fields=["is_staff"])
    client = Client()
    client.force_login(tech.user)

    started = client.post("/admin/sync/google_calendar/connect/", {"business": shop.slug})
    assert started.status_code == 302
    consent = urlsplit(started["Location"])
    asked = parse_qs(consent.query)
    assert asked["access_type"] == ["offline"] and "calendar.freebusy" in asked["scope"][0]
    back = requests.get(started["Location"], allow_redirects=False, timeout=5)
    url = urlsplit(back.headers["Location"])
    finished = client.get(url.path, {k: v[0] for k, v in parse_qs(url.query).items()})

    assert finished.status_code == 302
    conn = SyncConnection.objects.get(provider="google_calendar")
    assert (conn.member, conn.business, conn.account_id, conn.status) == (tech, shop, EMAIL, "active")
    assert conn.refresh_token and conn.token_expires_at is not None
    assert conn.token_expires_at > timezone.now() + timedelta(minutes=50)


def test_an_expired_access_token_is_refreshed_with_google_auth_and_the_refresh_token_kept(calendar, google):
    kept = calendar.refresh_token
    google.expire_access()

    assert calendar_busy_refresh(calendar, now=timezone.now())

    calendar.refresh_from_db()
    assert calendar.refresh_token == kept  # Google's refresh tokens do not rotate
    assert calendar.busy_checked_at is not None and calendar.status == "active"


def test_a_revoked_grant_is_shown_to_the_technician_and_the_manager(calendar, google, tech, manager):
    google.revoke()

    assert not calendar_busy_refresh(calendar, now=timezone.now())

    calendar.refresh_from_db()
    assert calendar.status == "reauthorize"
    items = ExceptionItem.objects.filter(status="open")
    assert set(items.values_list("kind", "owner")) == {
        ("sync_reconnect", manager.pk),
        ("calendar_busy_stale", manager.pk),
        ("calendar_busy_stale", tech.pk),
    }


def test_a_busy_block_in_the_calendar_takes_its_slot_off_the_offer(calendar, google, lead, rule):
    google.busy_extra.append((TUE_9 + timedelta(minutes=30), TUE_9 + timedelta(minutes=90)))
    offered = {s.starts_at for s in slots_offer(lead, now=NOW)}
    assert TUE_9 in offered

    assert calendar_busy_refresh(calendar, now=timezone.now())

    offered = {s.starts_at for s in slots_offer(lead, now=NOW)}
    assert TUE_9 not in offered and TUE_13 in offered


def test_busy_times_are_read_at_most_every_five_minutes_and_a_failure_is_never_silent(calendar, google, manager):
    now = timezone.now()
    assert calendar_busy_refresh(calendar, now=now)
    assert not calendar_busy_refresh(calendar, now=now + timedelta(minutes=4))
    google.fail_busy = True

    assert not calendar_busy_refresh(calendar, now=now + timedelta(minutes=6))

    calendar.refresh_from_db()
    assert "500" in calendar.last_error
    assert ExceptionItem.objects.filter(kind="calendar_busy_stale", owner=manager, status="open").exists()
    google.fail_busy = False
    assert calendar_busy_refresh(calendar, now=now + timedelta(minutes=12))
    assert not ExceptionItem.objects.filter(kind="calendar_busy_stale", status="open").exists()


def test_a_booked_visit_becomes_one_event_with_the_address_and_the_thread(
    calendar, google, lead, rule, tech, templates
):
    booked = _booked(lead, rule, tech)

    assert sync_pump() == {"done": 1}
    assert sync_pump() == {}

    (event,) = google.live_events()
    assert event["id"] == event_id(booked.public_id) and google.inserts == 1
    assert event["location"] == booked.location
    assert f"https://leadops.example.com/app/leads/{lead.public_id}/" in event["description"]
    assert event["start"]["dateTime"].startswith(TUE_9.strftime("%Y-%m-%dT%H:%M"))
    link = SyncLink.objects.get(kind="visit")
    assert (link.record, link.external_id) == (booked.public_id, event["id"])
    # Its own event is not a busy block: the visit holds its place in the slot already.
    assert calendar_busy_refresh(calendar, now=timezone.now())
    calendar.refresh_from_db()
    assert calendar.busy == []


def test_a_retry_after_a_lost_answer_makes_no_second_event(calendar, google, lead, rule, tech, templates):
    booked = _booked(lead, rule, tech)
    sync_pump()
    made = SyncLink.objects.get(kind="visit").external_id
    item = PushBooking(booked.public_id, "", "Visit", TUE_9, TUE_9 + timedelta(hours=2), link="https://x/")

    # The first answer was lost: the same push again meets Google's 409 and finds its event.
    again = with_session(calendar, lambda session: ADAPTERS["google_calendar"].push(session, item))

    assert again.external_id == made
    assert len(google.live_events()) == 1 and google.inserts == 1


def test_a_visit_of_another_technician_stays_out_of_this_calendar(calendar, google, lead, rule, shop, templates):
    other = member_create(shop, "technician", username="ted")
    rule.members.add(other)
    _booked(lead, rule, other)

    assert sync_pump() == {}
    assert google.live_events() == []


def test_a_visit_moved_in_the_calendar_moves_ours(calendar, google, lead, rule, tech, templates):
    booked = _booked(lead, rule, tech)
    sync_pump()
    assert calendar_watch(calendar, now=timezone.now())
    calendar.refresh_from_db()
    # The stream's first read (its sync token), as the sweep makes it.
    reconcile(calendar, now=timezone.now(), every=timedelta(0))
    google.move(event_id(booked.public_id), TUE_13, TUE_13 + timedelta(hours=2))

    answered = _notify(calendar, 2)
    assert answered.status_code == 200
    assert run_queued_events() == ["processed"]
    assert sync_pump() == {"done": 1}

    booked.refresh_from_db()
    assert booked.status == "canceled"  # released: the new one holds the place
    moved = Appointment.objects.get(rescheduled_from=booked)
    assert (moved.starts_at, moved.status, moved.assigned_to) == (TUE_13, "scheduled", tech)
    assert SyncLink.objects.get(kind="visit").record == moved.public_id
    assert Receipt.objects.filter(subject=moved.public_id, action="appointment.booked").exists()
    assert len(google.live_events()) == 1  # nothing pushed back to the calendar it came from


def test_an_event_deleted_in_the_calendar_cancels_our_visit(calendar, google, lead, rule, tech, templates):
    booked = _booked(lead, rule, tech)
    sync_pump()
    calendar_watch(calendar, now=timezone.now())
    calendar.refresh_from_db()
    reconcile(calendar, now=timezone.now(), every=timedelta(0))
    google.delete(event_id(booked.public_id))

    assert _notify(calendar, 2, state="not_exists").status_code == 200
    run_queued_events()
    sync_pump()

    booked.refresh_from_db()
    assert booked.status == "canceled"
    actions = set(Receipt.objects.filter(subject=booked.public_id).values_list("action", flat=True))
    assert {"appointment.canceled", "sync.deleted_there"} <= actions
    lead.refresh_from_db()
    assert lead.stage == "qualified"


def test_our_visit_canceled_deletes_its_event(calendar, google, lead, rule, tech, templates):
    booked = _booked(lead, rule, tech)
    sync_pump()

    appointment_cancel(booked, actor="sam", reason="the customer called")
    assert sync_pump() == {"done": 1}

    assert google.live_events() == []


def test_a_notification_with_a_wrong_channel_token_is_refused(calendar, google):
    calendar_watch(calendar, now=timezone.now())
    calendar.refresh_from_db()

    refused = _notify(calendar, 2, token="not-the-token")

    assert refused.status_code == 401 and refused.json()["error"]
    assert not InboundEvent.objects.exists()
    assert RejectedDelivery.objects.filter(provider="google_calendar").exists()


def test_a_duplicate_notification_is_stored_once_and_reads_once(calendar, google):
    calendar_watch(calendar, now=timezone.now())
    calendar.refresh_from_db()

    first, again = _notify(calendar, 7), _notify(calendar, 7)

    assert first.json()["duplicate"] is False and again.json()["duplicate"] is True
    assert InboundEvent.objects.filter(provider="google_calendar").count() == 1
    assert _notify(calendar, 1, state="sync").json()["status"] == "ignored"  # the channel's first message


def test_the_channel_is_renewed_before_it_expires_and_the_old_one_stopped(calendar, google):
    now = timezone.now()
    assert calendar_watch(calendar, now=now)
    first = calendar.channel_id
    assert google.channels[first]["address"] == "https://leadops.example.com/hooks/google-calendar/"
    assert not calendar_watch(calendar, now=now + timedelta(days=1))

    assert calendar_watch(calendar, now=now + timedelta(days=6, hours=13))

    calendar.refresh_from_db()
    assert calendar.channel_id != first and google.stopped == [first]


def test_the_sweep_opens_the_channel_and_reads_the_busy_times(calendar, google):
    sync_sweep(seconds=1)

    calendar.refresh_from_db()
    assert calendar.channel_id in google.channels and calendar.channel_token
    assert calendar.busy_checked_at is not None and calendar.cursors["visit"]["since"].startswith("sync-")


def test_a_visit_moved_there_and_canceled_here_deletes_its_event(calendar, google, lead, rule, tech, templates):
    booked = _booked(lead, rule, tech)
    sync_pump()
    calendar_watch(calendar, now=timezone.now())
    calendar.refresh_from_db()
    reconcile(calendar, now=timezone.now(), every=timedelta(0))
    google.move(event_id(booked.public_id), TUE_13, TUE_13 + timedelta(hours=2))
    _notify(calendar, 2)
    run_queued_events()
    sync_pump()
    moved = Appointment.objects.get(rescheduled_from=booked)

    appointment_cancel(moved, actor="sam", reason="the customer called")
    sync_pump()

    assert google.live_events() == []


def test_a_visit_rescheduled_here_moves_its_event(calendar, google, lead, rule, tech, templates):
    booked = _booked(lead, rule, tech)
    sync_pump()

    new = appointment_reschedule(booked, availability=rule, starts_at=TUE_13, actor="sam", now=NOW).appointment
    assert sync_pump() == {"done": 1}

    (event,) = google.live_events()
    assert event["id"] == event_id(booked.public_id) and google.inserts == 1
    assert event["start"]["dateTime"].startswith(TUE_13.strftime("%Y-%m-%dT%H:%M"))
    assert SyncLink.objects.get(kind="visit").record == new.public_id
