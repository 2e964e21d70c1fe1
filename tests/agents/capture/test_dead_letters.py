"""Dead letters (failed inbound events with no attempt left) are listed apart
from failed events the sweep will still retry, and replay from the command
line as from the admin."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents.capture.processing import MAX_ATTEMPTS, inbound_events_sweep
from crm.models import Business, Call, InboundEvent, Source
from tests.agents.capture.test_event_attempts import LINE, call_to_an_unconfigured_line, twilio_settings  # noqa: F401

pytestmark = pytest.mark.django_db


def dead_letter() -> InboundEvent:
    event = call_to_an_unconfigured_line()
    start = timezone.now()
    for minute in range(0, 3 * 60, 5):
        inbound_events_sweep(now=start + timedelta(minutes=minute))
    event.refresh_from_db()
    assert (event.status, event.attempts, event.retry_at) == ("failed", MAX_ATTEMPTS, None)
    return event


def test_the_admin_lists_dead_letters_apart_from_failed_events_awaiting_a_retry(business: Business) -> None:
    dead = dead_letter()
    waiting = InboundEvent.objects.create(
        provider="stripe",
        external_id="evt_w",
        body=b"{}",
        status="failed",
        error="boom",
        received_at=timezone.now(),
        retry_at=timezone.now() + timedelta(minutes=4),
    )
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw-for-tests-1"))
    url = reverse("admin:crm_inboundevent_changelist")

    listed = {e.pk for e in client.get(url, {"retries": "dead"}).context["cl"].result_list}
    assert listed == {dead.pk}
    listed = {e.pk for e in client.get(url, {"retries": "waiting"}).context["cl"].result_list}
    assert listed == {waiting.pk}


def test_the_replay_command_replays_dead_letters_once_the_cause_is_fixed(business: Business) -> None:
    event = dead_letter()
    Source.objects.create(business=business, key="second-line", provider="twilio", config={"phone_number": LINE})
    out = StringIO()

    call_command("replay_events", stdout=out)

    assert out.getvalue().strip() == "replayed: 1 processed"
    event.refresh_from_db()
    assert (event.status, event.attempts) == ("processed", MAX_ATTEMPTS + 1)
    assert Call.objects.count() == 1
    call_command("replay_events", stdout=(again := StringIO()))
    assert again.getvalue().strip() == "replayed: nothing to replay"
