"""The stored event is the work item (its one INSERT:
tests/leadops/test_acceptance_path.py): the sources kept in memory are
dropped when a change commits, a NOTIFY wakes the intake loop, two loops
take disjoint events, and a poison event spends its allowance and waits for
a replay."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from agents.capture.processing import MAX_ATTEMPTS, event_claim_next, event_run_claimed, intake_serve
from agents.capture.source_cache import SOURCES, SourceCache
from agents.capture.webhooks import WebhookError, source_for
from crm.models import Business, InboundEvent, Lead, Source
from tests.agents.capture.test_event_attempts import call_to_an_unconfigured_line, twilio_settings  # noqa: F401
from tests.helpers.database import test_database_url
from tests.helpers.races import run_together

GOOGLE_KEY = "google-key-for-tests"


def google_ads_post(lead_id: str) -> dict[str, object]:
    body = {
        "lead_id": lead_id,
        "google_key": GOOGLE_KEY,
        "campaign_id": 20000000001,
        "user_column_data": [
            {"column_id": "FULL_NAME", "string_value": "Pat Loop"},
            {"column_id": "PHONE_NUMBER", "string_value": "+13125550177"},
        ],
    }
    response = Client().post("/hooks/google-ads/gads/", json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return dict(response.json())


@pytest.fixture
def gads(business: Business) -> Source:
    return Source.objects.create(business=business, key="gads", provider="google_ads", secret=GOOGLE_KEY)


def another_process_runs(sql: str) -> None:
    """A change committed on a connection of its own, as another host's would be."""
    with psycopg.connect(test_database_url(), autocommit=True) as other:
        other.execute(sql)


@pytest.mark.django_db(transaction=True)
def test_a_source_changed_elsewhere_is_dropped_as_the_change_commits(gads: Source) -> None:
    assert SOURCES.wait_for(lambda: SOURCES.listening, timeout=30)
    assert source_for("gads", "google_ads").is_active
    before = SOURCES.generation

    another_process_runs("UPDATE crm_source SET is_active = false WHERE key = 'gads'")

    assert SOURCES.wait_for(lambda: SOURCES.generation > before, timeout=30), "no drop after the commit"
    with pytest.raises(WebhookError) as refused:
        source_for("gads", "google_ads")
    assert refused.value.status == 403


@pytest.mark.django_db(transaction=True)
def test_a_business_edited_elsewhere_drops_the_sources_that_carry_it(gads: Source) -> None:
    assert SOURCES.wait_for(lambda: SOURCES.listening, timeout=30)
    assert source_for("gads", "google_ads").business.name == "Acme Heating & Air"
    before = SOURCES.generation

    another_process_runs("UPDATE crm_business SET name = 'Acme Comfort' WHERE slug = 'acme'")

    assert SOURCES.wait_for(lambda: SOURCES.generation > before, timeout=30)
    assert source_for("gads", "google_ads").business.name == "Acme Comfort"


@pytest.mark.django_db(transaction=True)
def test_nothing_is_kept_while_no_listener_listens(gads: Source) -> None:
    # A listener that cannot connect (no such database alias) never listens.
    deaf = SourceCache(alias="no-such-database")
    loads = []

    def load() -> Source:
        loads.append(1)
        return gads

    try:
        for _ in range(3):
            assert deaf.get("gads", load) == gads
    finally:
        deaf.stop()
    assert len(loads) == 3 and not deaf.listening


@pytest.mark.django_db
def test_a_transaction_reads_its_own_uncommitted_change_to_a_source(gads: Source) -> None:
    assert source_for("gads", "google_ads").is_active
    Source.objects.filter(pk=gads.pk).update(is_active=False)  # no signal, not committed: no NOTIFY
    with pytest.raises(WebhookError):
        source_for("gads", "google_ads")


@pytest.mark.django_db(transaction=True)
def test_the_intake_loop_wakes_on_the_notification_not_the_poll(gads: Source) -> None:
    stop = threading.Event()

    def serve() -> None:
        # A poll far longer than the test: only the NOTIFY can wake the loop.
        try:
            intake_serve(stop.wait, poll=600)
        finally:
            connection.close()

    loop = threading.Thread(target=serve, daemon=True)
    loop.start()
    try:
        answer = google_ads_post("woken")
        event = InboundEvent.objects.get(public_id=answer["id"])
        deadline = timezone.now() + timedelta(seconds=30)
        while event.status != "processed" and timezone.now() < deadline:
            stop.wait(0.05)
            event.refresh_from_db()
        assert event.status == "processed" and event.attempts == 1
        assert Lead.objects.filter(business=gads.business).count() == 1
    finally:
        stop.set()
        another_process_runs("SELECT pg_notify('leadops_inbound', '')")  # wakes it to see the stop
        loop.join(timeout=30)
    assert not loop.is_alive()


@pytest.mark.django_db(transaction=True)
def test_two_loops_claim_disjoint_events(business: Business) -> None:
    now = timezone.now()
    InboundEvent.objects.bulk_create(
        InboundEvent(provider="website", external_id=f"race-{n}", body=b"{}", status="received", received_at=now)
        for n in range(40)
    )

    def claim_all() -> list[int]:
        claimed = []
        while (event_id := event_claim_next(now=now)) is not None:
            claimed.append(event_id)
        return claimed

    first, second = run_together([claim_all, claim_all])

    assert not set(first) & set(second), "an event was claimed twice"
    assert sorted(first + second) == sorted(InboundEvent.objects.values_list("pk", flat=True))
    assert InboundEvent.objects.filter(status="processing", attempts=1).count() == 40


@pytest.mark.django_db
@pytest.mark.usefixtures("twilio_settings")
def test_a_poison_event_spends_its_allowance_then_waits_for_a_replay(business: Business) -> None:
    event = call_to_an_unconfigured_line()  # its handler fails until the line is configured
    start = timezone.now()
    for minute in range(0, 3 * 60, 5):
        at = start + timedelta(minutes=minute)
        while (event_id := event_claim_next(now=at)) is not None:
            assert event_id == event.pk
            event_run_claimed(event_id, now=at)

    event.refresh_from_db()
    assert (event.status, event.attempts, event.retry_at) == ("failed", MAX_ATTEMPTS, None)
    assert "gave up after" in event.error
    assert event_claim_next(now=start + timedelta(days=30)) is None, "a dead letter is never claimed again"
