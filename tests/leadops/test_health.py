"""The health endpoints, including the task cluster's, per periodic job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.schedules import JOBS
from crm.models import PeriodicRun, Role
from tests.factories import member_create

pytestmark = pytest.mark.django_db


def record(name: str, minutes_ago: int) -> None:
    at = timezone.now() - timedelta(minutes=minutes_ago)
    PeriodicRun.objects.update_or_create(name=name, defaults={"started_at": at, "succeeded_at": at, "runs": 1})


def record_all(minutes_ago: int = 0) -> None:
    for job in JOBS:
        record(job.name, minutes_ago)


def test_healthz_answers_when_the_database_does() -> None:
    response = Client().get("/healthz/")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.fixture
def operator(business: Any) -> Client:
    """A business's manager, who reads each job's figures."""
    client = Client()
    client.force_login(member_create(business, Role.MANAGER, username="mia").user)
    return client


def test_an_anonymous_caller_reads_only_ok_or_not_ok(operator: Client) -> None:
    response = Client().get("/healthz/queue/")
    assert (response.status_code, response.json()) == (503, {"status": "not ok"})
    record_all(minutes_ago=1)
    response = Client().get("/healthz/queue/")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_queue_is_unhealthy_before_the_cluster_has_run_its_jobs(operator: Client) -> None:
    response = operator.get("/healthz/queue/")
    assert response.status_code == 503
    assert response.json()["alive"] is False
    assert response.json()["jobs"]["leadops.timers"] == {"last_succeeded_at": None, "overdue": True, "last_error": ""}


def test_queue_is_healthy_while_every_job_keeps_succeeding(operator: Client) -> None:
    record_all(minutes_ago=1)
    response = operator.get("/healthz/queue/")
    assert response.status_code == 200
    body = response.json()
    assert (body["alive"], body["healthy"], body["overdue"]) == (True, True, [])
    assert set(body["jobs"]) == {job.name for job in JOBS}


def test_queue_is_unhealthy_when_the_timer_job_is_stale(operator: Client) -> None:
    record_all()
    record("leadops.timers", minutes_ago=10)
    response = operator.get("/healthz/queue/")
    assert response.status_code == 503
    assert (response.json()["alive"], response.json()["overdue"]) == (False, ["leadops.timers"])


def test_one_overdue_job_turns_the_check_red_and_is_named_with_its_last_error(operator: Client) -> None:
    record_all()
    record("leadops.messages_sweep", minutes_ago=30)
    PeriodicRun.objects.filter(name="leadops.messages_sweep").update(
        failed_at=timezone.now(), error="SystemExit: Task exceeded maximum timeout value (55 seconds)"
    )
    response = operator.get("/healthz/queue/")
    assert response.status_code == 503
    body = response.json()
    assert body["alive"] is True  # the cluster runs; one job does not get done
    assert body["overdue"] == ["leadops.messages_sweep"]
    assert "maximum timeout" in body["jobs"]["leadops.messages_sweep"]["last_error"]


def test_an_hourly_job_is_not_overdue_within_its_hours(operator: Client) -> None:
    record_all()
    record("leadops.daily_brief", minutes_ago=100)
    assert operator.get("/healthz/queue/").status_code == 200
