"""The health endpoints, including the task cluster's liveness."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from django_q.models import Success

pytestmark = pytest.mark.django_db


def record_run_timers(minutes_ago: int) -> None:
    stopped = timezone.now() - timedelta(minutes=minutes_ago)
    Success.objects.create(
        id=f"task{minutes_ago}",
        name=f"run-{minutes_ago}",
        func="agents.tasks.run_timers",
        started=stopped - timedelta(seconds=1),
        stopped=stopped,
        success=True,
    )


def test_healthz_answers_when_the_database_does() -> None:
    response = Client().get("/healthz/")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_queue_is_unhealthy_before_the_cluster_has_run_its_schedule() -> None:
    response = Client().get("/healthz/queue/")
    assert response.status_code == 503
    assert response.json()["alive"] is False


def test_queue_is_healthy_while_run_timers_keeps_running() -> None:
    record_run_timers(minutes_ago=1)
    response = Client().get("/healthz/queue/")
    assert response.status_code == 200
    assert response.json()["alive"] is True


def test_queue_is_unhealthy_when_the_last_run_is_stale() -> None:
    record_run_timers(minutes_ago=10)
    assert Client().get("/healthz/queue/").status_code == 503
