"""A technician's Microsoft 365 calendar, kept in step through the sync
engine: the consent, getSchedule's busy blocks taking the technician off
slots, a booked visit made into one event, the subscription's validation
handshake and clientState, and notifications moving or canceling our visit.
Against a real local server in Graph's shapes
(tests/helpers/microsoft_graph_calendar.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.test import Client
from django.utils import timezone

from agents.booking.services import appointment_book
from agents.booking.slots import slots_offer
from agents.sync.base import ADAPTERS, PushBooking
from agents.sync.engine import calendar_busy_refresh, calendar_watch, sync_pump, with_session
from crm.models import Appointment, ExceptionItem, InboundEvent, Receipt, SyncConnection, SyncLink
from crm.services.sync import connection_connect
from tests.helpers.booking import NOW, TUE_9, TUE_13
from tests.helpers.capture import run_queued_events
from tests.helpers.microsoft_graph_calendar import MAIL, USER_ID, GraphServer, graph_running

pytestmark = pytest.mark.django_db


def _validate(url: str, token: str) -> tuple[int, str, str]:
    """Graph's validation POST, made to our hook as Graph makes it."""
    answer = Client().post(f"{urlsplit(url).path}?validationToken={token}", b"", content_type="text/plain")
    return answer.status_code, answer["Content-Type"], answer.content.decode()


@pytest.fixture
def graph(settings: Any) -> Iterator[GraphServer]:
    settings.PUBLIC_BASE_URL = "https://leadops.example.com"
    with graph_running(settings) as server:
        server.validate = _validate
        yield server


@pytest.fixture
def calendar(shop, tech, graph, manager) -> SyncConnection:
    tokens = graph.grant()
    return connection_connect(
        shop,
        provider="microsoft365",
        account_id=USER_ID,
        account_name=MAIL,
        access_token=tokens["access_token"],
        refresh_token=tokens["refresh_token"],
        expires_at=timezone.now() + timedelta(hours=1),
        actor="tom",
        member=tech,
    )


def _notify(conn: SyncConnection, change: str, event_id: str, *, client_state: str | None = None) -> Any:
    item = {
        "subscriptionId": conn.channel_id,
        "clientState": conn.channel_token if client_state is None else client_state,
        "changeType": change,
        "resource": f"Users/{USER_ID}/Events/{event_id}",
        "resourceData": {"@odata.type": "#Microsoft.Graph.Event", "id": event_id},
        "subscriptionExpirationDateTime": "2026-12-07T10:00:00Z",
        "tenantId": "tenant-1",
    }
    return Client().post("/hooks/microsoft-calendar/", json.dumps({"value": [item]}), content_type="application/json")


def _booked(lead, rule, tech) -> Appointment:
    return appointment_book(
        lead, availability=rule, starts_at=TUE_9, actor="sam", assigned_to=tech, now=NOW
    ).appointment


def test_a_technician_connects_their_microsoft_calendar_through_the_consent(shop, tech, graph):
    tech.user.is_staff = True
    tech.user.save(update_fields=["is_staff"])
    client = Client()
    client.force_login(tech.user)

    started = client.post("/admin/sync/microsoft365/connect/", {"business": shop.slug})
    assert "offline_access" in parse_qs(urlsplit(started["Location"]).query)["scope"][0]
    back = requests.get(started["Location"], allow_redirects=False, timeout=5)
    url = urlsplit(back.headers["Location"])
    client.get(url.path, {k: v[0] for k, v in parse_qs(url.query).items()})

    conn = SyncConnection.objects.get(provider="microsoft365")
    assert (conn.member, conn.account_id, conn.account_name, conn.status) == (tech, USER_ID, MAIL, "active")


def test_a_rotated_refresh_token_is_kept_and_a_revoked_one_shown_to_person_and_manager(calendar, graph, tech, manager):
    old = calendar.refresh_token
    graph.expire_access()
    assert calendar_busy_refresh(calendar, now=timezone.now())
    calendar.refresh_from_db()
    assert calendar.refresh_token != old  # Microsoft's rotate

    graph.revoke()
    assert not calendar_busy_refresh(calendar, now=timezone.now(), force=True)

    calendar.refresh_from_db()
    assert calendar.status == "reauthorize"
    assert set(ExceptionItem.objects.filter(status="open").values_list("kind", "owner")) == {
        ("sync_reconnect", manager.pk),
        ("calendar_busy_stale", manager.pk),
        ("calendar_busy_stale", tech.pk),
    }


def test_a_busy_block_from_get_schedule_takes_its_slot_off_the_offer(calendar, graph, lead, rule):
    graph.busy_extra.append((TUE_13, TUE_13 + timedelta(minutes=30)))

    assert calendar_busy_refresh(calendar, now=timezone.now())

    offered = {s.starts_at for s in slots_offer(lead, now=NOW)}
    assert TUE_13 not in offered and TUE_9 in offered


def test_a_booked_visit_becomes_one_event_whatever_the_retries(calendar, graph, lead, rule, tech, templates):
    booked = _booked(lead, rule, tech)
    assert sync_pump() == {"done": 1}
    (event,) = graph.events.values()
    assert f"/app/leads/{lead.public_id}/" in event["body"]["content"]
    assert event["location"]["displayName"] == booked.location
    item = PushBooking(booked.public_id, "", "Visit", TUE_9, TUE_9 + timedelta(hours=2))

    # A lost answer's retry: the same transactionId, the same event.
    again = with_session(calendar, lambda session: ADAPTERS["microsoft365"].push(session, item))

    assert again.external_id == event["id"] and graph.creates == 1
    assert SyncLink.objects.get(kind="visit").external_id == event["id"]


def test_the_subscription_is_made_through_the_validation_handshake_and_renewed(calendar, graph):
    now = timezone.now()
    assert calendar_watch(calendar, now=now)
    (subscription,) = graph.subscriptions.values()
    assert subscription["notificationUrl"] == "https://leadops.example.com/hooks/microsoft-calendar/"
    assert subscription["clientState"] == calendar.channel_token and subscription["resource"] == "me/events"
    assert calendar.channel_expires_at is not None and calendar.channel_expires_at < now + timedelta(days=3)
    assert not calendar_watch(calendar, now=now + timedelta(days=1))

    assert calendar_watch(calendar, now=now + timedelta(days=2, hours=12))

    assert list(graph.subscriptions) == [calendar.channel_id]  # renewed in place
    assert calendar.channel_expires_at is not None
    renewed = calendar.channel_expires_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert graph.subscriptions[calendar.channel_id]["expirationDateTime"] == renewed


def test_the_validation_token_is_echoed_as_plain_text():
    answer = Client().post("/hooks/microsoft-calendar/?validationToken=Validation%3A+Testing", b"", content_type="")
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/plain")
    assert answer.content == b"Validation: Testing"


def test_a_visit_moved_in_outlook_moves_ours(calendar, graph, lead, rule, tech, templates):
    booked = _booked(lead, rule, tech)
    sync_pump()
    calendar_watch(calendar, now=timezone.now())
    event_id = str(SyncLink.objects.get(kind="visit").external_id)
    graph.move(event_id, TUE_13, TUE_13 + timedelta(hours=2))

    assert _notify(calendar, "updated", event_id).status_code == 202
    assert run_queued_events() == ["processed"]
    sync_pump()

    booked.refresh_from_db()
    moved = Appointment.objects.get(rescheduled_from=booked)
    assert (booked.status, moved.starts_at, moved.assigned_to) == ("canceled", TUE_13, tech)
    assert SyncLink.objects.get(kind="visit").record == moved.public_id


def test_an_event_deleted_in_outlook_cancels_our_visit(calendar, graph, lead, rule, tech, templates):
    booked = _booked(lead, rule, tech)
    sync_pump()
    calendar_watch(calendar, now=timezone.now())
    event_id = str(SyncLink.objects.get(kind="visit").external_id)
    graph.delete(event_id)

    _notify(calendar, "deleted", event_id)
    run_queued_events()
    sync_pump()

    booked.refresh_from_db()
    assert booked.status == "canceled"
    actions = set(Receipt.objects.filter(subject=booked.public_id).values_list("action", flat=True))
    assert {"appointment.canceled", "sync.deleted_there"} <= actions


def test_a_notification_with_a_wrong_client_state_is_refused(calendar, graph):
    calendar_watch(calendar, now=timezone.now())

    refused = _notify(calendar, "updated", "AAMk1", client_state="forged")

    assert refused.status_code == 401 and refused.json()["error"]
    assert not InboundEvent.objects.exists()


def test_a_duplicate_notification_is_stored_once(calendar, graph):
    calendar_watch(calendar, now=timezone.now())

    first, again = _notify(calendar, "updated", "AAMk1"), _notify(calendar, "updated", "AAMk1")

    assert first.json()["duplicate"] is False and again.json()["duplicate"] is True
    assert InboundEvent.objects.filter(provider="microsoft365").count() == 1
