"""A failed timer stays visible with its error, and a manager can put it back in line."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from crm.models import Receipt, Timer
from crm.services.timers import timer_handler_register, timer_schedule, timers_run_due
from tests.factories import lead_create

pytestmark = pytest.mark.django_db


def test_a_failed_timer_is_retried_from_the_admin_and_then_runs(business, manager) -> None:
    calls: list[str] = []

    def flaky(timer: Timer) -> None:
        calls.append(timer.public_id)
        if len(calls) == 1:
            raise RuntimeError("provider down")

    timer_handler_register("test.flaky", flaky)
    lead = lead_create(business)
    timer = timer_schedule(business=business, lead=lead, kind="test.flaky", due_at=timezone.now())
    timers_run_due()
    timer.refresh_from_db()
    assert (timer.status, timer.error) == ("failed", "RuntimeError: provider down")

    client = Client()
    client.force_login(manager.user)
    listing = client.get("/admin/crm/timer/?status__exact=failed")
    assert timer.public_id in listing.content.decode() and "provider down" in listing.content.decode()
    response = client.post("/admin/crm/timer/", {"action": "timers_retry", "_selected_action": [timer.pk]}, follow=True)
    assert "1 timer(s) back in line" in response.content.decode()
    timer.refresh_from_db()
    assert timer.status == "pending"
    assert Receipt.objects.get(subject=timer.public_id, action="timer.retried").actor == manager.user.username
    timers_run_due()
    timer.refresh_from_db()
    assert timer.status == "done" and len(calls) == 2
