"""Inbound events get a bounded number of attempts: a failing handler is
retried by the sweep, then the event is left `failed` for a person to replay;
a worker that died mid-event is taken over only while attempts remain."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from twilio.request_validator import RequestValidator

from agents.capture.processing import MAX_ATTEMPTS, STALE_PROCESSING, event_replay, inbound_events_sweep
from crm.models import Business, Call, InboundEvent, Lead, Source

pytestmark = pytest.mark.django_db

BASE_URL = "https://backoffice.example.com"
TOKEN = "twilio-test-token-0123456789"
VOICE = "/hooks/twilio/voice/"
LINE = "+13125550111"
CALL_SID = "CA0123456789abcdef0123456789abcdef"


@pytest.fixture(autouse=True)
def twilio_settings(settings):
    settings.PUBLIC_BASE_URL = BASE_URL
    settings.TWILIO_AUTH_TOKEN = TOKEN


def call_to_an_unconfigured_line() -> InboundEvent:
    """A real delivery whose handler fails until the number is configured."""
    params = {
        "CallSid": CALL_SID,
        "CallStatus": "ringing",
        "Direction": "inbound",
        "From": "+12125550147",
        "To": LINE,
        "AccountSid": "AC00000000000000000000000000000001",
    }
    signature = RequestValidator(TOKEN).compute_signature(BASE_URL + VOICE, params)
    response = Client().post(
        VOICE,
        data=urlencode(params),
        content_type="application/x-www-form-urlencoded",
        HTTP_X_TWILIO_SIGNATURE=signature,
    )
    assert response.status_code == 200
    return InboundEvent.objects.get()


def sweep_until_quiet(start):
    """Run the sweep every five minutes for three hours (the retries span one)."""
    taken = 0
    for minute in range(0, 3 * 60, 5):
        taken += inbound_events_sweep(now=start + timedelta(minutes=minute))
    return taken


def test_a_handler_that_keeps_failing_is_retried_then_left_failed_with_its_last_error(business: Business):
    event = call_to_an_unconfigured_line()
    start = timezone.now()
    assert sweep_until_quiet(start) == MAX_ATTEMPTS
    event.refresh_from_db()
    assert (event.status, event.attempts, event.retry_at) == ("failed", MAX_ATTEMPTS, None)
    assert "UnknownNumber" in event.error and LINE in event.error
    assert f"gave up after {MAX_ATTEMPTS} attempts" in event.error
    # A dead letter: the sweep never takes it again, however long it waits.
    assert inbound_events_sweep(now=start + timedelta(days=3)) == 0
    assert not Lead.objects.exists()

    Source.objects.create(business=business, key="second-line", provider="twilio", config={"phone_number": LINE})
    assert event_replay(event) == "processed"
    event.refresh_from_db()
    assert (event.status, event.attempts, event.error) == ("processed", MAX_ATTEMPTS + 1, "")
    assert Call.objects.get().lead == Lead.objects.get()


def test_a_failed_attempt_is_visible_at_once_and_retried_after_a_delay(business: Business):
    event = call_to_an_unconfigured_line()
    start = timezone.now()
    assert inbound_events_sweep(now=start + timedelta(minutes=3)) == 1
    event.refresh_from_db()
    assert (event.status, event.attempts) == ("failed", 1)
    assert event.retry_at is not None and event.retry_at > start + timedelta(minutes=3)
    assert f"attempt 1 of {MAX_ATTEMPTS}" in event.error
    assert inbound_events_sweep(now=start + timedelta(minutes=3, seconds=30)) == 0  # not before its time
    Source.objects.create(business=business, key="second-line", provider="twilio", config={"phone_number": LINE})
    assert inbound_events_sweep(now=event.retry_at) == 1
    event.refresh_from_db()
    assert (event.status, event.attempts, event.retry_at) == ("processed", 2, None)


def test_an_event_left_processing_by_a_killed_worker_is_taken_over_once_counting_the_attempt(business: Business):
    event = call_to_an_unconfigured_line()
    Source.objects.create(business=business, key="second-line", provider="twilio", config={"phone_number": LINE})
    claimed_at = timezone.now()
    # What a worker killed right after its claim leaves behind.
    InboundEvent.objects.filter(pk=event.pk).update(status="processing", claimed_at=claimed_at, attempts=1)
    assert inbound_events_sweep(now=claimed_at + STALE_PROCESSING - timedelta(seconds=1)) == 0  # maybe still alive
    assert inbound_events_sweep(now=claimed_at + STALE_PROCESSING + timedelta(seconds=1)) == 1
    assert inbound_events_sweep(now=claimed_at + 2 * STALE_PROCESSING + timedelta(seconds=2)) == 0
    event.refresh_from_db()
    assert (event.status, event.attempts) == ("processed", 2)
    assert Call.objects.count() == 1


def test_a_worker_killed_on_the_last_attempt_leaves_a_failed_event_not_a_stuck_one(business: Business):
    event = call_to_an_unconfigured_line()
    claimed_at = timezone.now()
    InboundEvent.objects.filter(pk=event.pk).update(status="processing", claimed_at=claimed_at, attempts=MAX_ATTEMPTS)
    assert inbound_events_sweep(now=claimed_at + STALE_PROCESSING + timedelta(seconds=1)) == 0
    event.refresh_from_db()
    assert (event.status, event.attempts) == ("failed", MAX_ATTEMPTS)
    assert "stopped mid-processing" in event.error and f"gave up after {MAX_ATTEMPTS} attempts" in event.error
    Source.objects.create(business=business, key="second-line", provider="twilio", config={"phone_number": LINE})
    assert event_replay(event) == "processed"


def race(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Real threads, each with its own connection, released together."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        try:
            barrier.wait(timeout=30)
            return call()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


@pytest.mark.django_db(transaction=True)
def test_racing_sweeps_take_over_a_stale_event_once_and_count_one_attempt(business: Business):
    event = call_to_an_unconfigured_line()
    Source.objects.create(business=business, key="second-line", provider="twilio", config={"phone_number": LINE})
    claimed_at = timezone.now()
    InboundEvent.objects.filter(pk=event.pk).update(status="processing", claimed_at=claimed_at, attempts=1)
    later = claimed_at + STALE_PROCESSING + timedelta(seconds=1)
    assert sorted(race([lambda: inbound_events_sweep(now=later)] * 6)) == [0, 0, 0, 0, 0, 1]
    event.refresh_from_db()
    assert (event.status, event.attempts) == ("processed", 2)
    assert Call.objects.count() == 1
