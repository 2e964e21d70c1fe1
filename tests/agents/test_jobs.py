"""The periodic jobs: one named schedule each, with its own timeout as
django-q2's scheduler hands it to the cluster; a bounded batch per run; no
network call inside the timer loop; a `PeriodicRun` row per job for the health
check."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ, Schedule
from django_q.scheduler import scheduler

from agents.reporting.alerts import alert_raise
from agents.schedules import JOBS, schedules_ensure
from agents.tasks import alerts, run_timers
from crm.models import PeriodicRun, Timer
from crm.services.timers import timer_handler_register, timer_schedule, timers_run_due
from tests.agents.reporting.test_alerts import slack  # noqa: F401 - the local Slack server fixture

pytestmark = pytest.mark.django_db


def test_each_periodic_job_is_its_own_schedule_and_the_old_combined_one_is_removed_on_migrate() -> None:
    # A site deployed before the split still has the combined schedule.
    Schedule.objects.create(name="leadops.run_timers", func="agents.tasks.run_timers", schedule_type="I", minutes=1)

    schedules_ensure()

    names = set(Schedule.objects.filter(name__startswith="leadops.").values_list("name", flat=True))
    assert names == {job.name for job in JOBS}
    assert {
        "leadops.timers",
        "leadops.event_sweep",
        "leadops.messages_sweep",
        "leadops.approvals_expire",
        "leadops.alerts",
        "leadops.pipeline_qa",
        "leadops.daily_brief",
    } <= names
    assert len({job.func for job in JOBS}) == len(JOBS)


@pytest.mark.django_db(transaction=True)  # the scheduler closes a connection that is not in autocommit
def test_the_scheduler_hands_each_job_to_the_cluster_with_its_own_timeout_below_retry(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    schedules_ensure()
    Schedule.objects.filter(name__startswith="leadops.").update(next_run=timezone.now() - timedelta(minutes=1))
    OrmQ.objects.all().delete()

    scheduler(broker=get_broker())  # django-q2's own scheduler loop, one pass
    # The webhooks cluster (Q_CLUSTER_NAME=leadops-webhooks) schedules its own jobs, on its own queue.
    monkeypatch.setattr(Conf, "CLUSTER_NAME", settings.WEBHOOKS_CLUSTER)
    scheduler(broker=get_broker(settings.WEBHOOKS_CLUSTER))

    queues = {q.task["group"]: q.key for q in OrmQ.objects.all()}
    assert queues == {job.name: job.cluster or settings.Q_CLUSTER["name"] for job in JOBS}
    assert {job.name for job in JOBS if job.cluster} == {
        "leadops.webhooks_sweep",
        "leadops.conversions_sweep",
        "leadops.sync_sweep",
    }
    tasks = {q.task["group"]: q.task for q in OrmQ.objects.all()}
    for job in JOBS:
        assert tasks[job.name]["func"] == job.func
        assert tasks[job.name]["timeout"] == job.timeout < settings.Q_CLUSTER["retry"]
        assert tasks[job.name]["kwargs"] == {}  # the options are the cluster's, nothing reaches the job


def test_the_timer_loop_leaves_slack_posts_to_the_alerts_job(business: Any, slack: Any) -> None:  # noqa: F811
    timer = alert_raise(business=business, key="test:loop", text="hello")
    assert timer is not None

    run_timers()
    timer.refresh_from_db()
    assert (timer.status, slack.posts) == ("pending", [])

    assert alerts()["posted"] == 1
    timer.refresh_from_db()
    assert timer.status == "done" and slack.posts == [{"text": "hello"}]


def test_one_timer_run_claims_at_most_its_limit_and_leaves_the_rest_pending(business: Any) -> None:
    ran: list[int] = []
    timer_handler_register("test.count", lambda timer: ran.append(timer.pk))
    now = timezone.now()
    for n in range(5):
        timer_schedule(business=business, kind="test.count", due_at=now - timedelta(minutes=n))

    first = timers_run_due(now=now, batch=2, limit=3)

    assert (first.claimed, first.done, len(ran)) == (3, 3, 3)
    assert Timer.objects.filter(kind="test.count", status="pending").count() == 2
    assert timers_run_due(now=now, limit=3).claimed == 2


def test_a_job_records_when_it_last_succeeded_and_keeps_it_when_a_later_run_fails(business: Any) -> None:
    run_timers()
    first = PeriodicRun.objects.get(name="leadops.timers")
    assert first.succeeded_at is not None and first.result == {"claimed": 0, "done": 0, "failed": 0}
    assert first.runs == 1 and first.failed_at is None

    run_timers()
    assert PeriodicRun.objects.get(name="leadops.timers").runs == 2
    assert PeriodicRun.objects.filter(name="leadops.timers").count() == 1


def test_a_failing_job_records_its_error_and_keeps_its_last_success(business: Any, settings: Any) -> None:
    from agents.tasks import _job

    @_job("leadops.test_failing")
    def failing() -> dict[str, int]:
        raise RuntimeError("the provider is down")

    @_job("leadops.test_failing")
    def passing() -> dict[str, int]:
        return {"ok": 1}

    passing()
    with pytest.raises(RuntimeError):
        failing()

    run = PeriodicRun.objects.get(name="leadops.test_failing")
    assert run.succeeded_at is not None and run.failed_at is not None and run.failed_at >= run.succeeded_at
    assert run.error == "RuntimeError: the provider is down" and run.result == {"ok": 1} and run.runs == 2


def test_one_expiry_run_expires_at_most_its_limit(business: Any) -> None:
    from approvals.models import ApprovalRequest
    from approvals.services import approval_request_open, approvals_expire

    for n in range(3):
        approval_request_open(business=business, kind="exception", summary=f"a{n}", proposed_by="agent:fit")
    ApprovalRequest.objects.update(expires_at=timezone.now() - timedelta(minutes=1))

    assert approvals_expire(limit=2) == 2
    assert approvals_expire(limit=2) == 1
    assert ApprovalRequest.objects.filter(status="pending").count() == 0
