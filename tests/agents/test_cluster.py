"""The real django-q2 cluster, as `make run` starts it, runs the named
`leadops.timers` job, which claims due timer rows and records its run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from crm.models import PeriodicRun, Timer
from crm.services.timers import timer_schedule
from tests.helpers.database import test_database_url

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_runs_the_timer_schedule_against_the_database(business) -> None:
    timer = timer_schedule(business=business, kind="cluster.probe", due_at=timezone.now() - timedelta(seconds=1))
    env = {**os.environ, "DATABASE_URL": test_database_url(), "Q_WORKERS": "1"}
    # Its own session, so teardown can end the whole process group: the
    # cluster's workers must not outlive the test and poll its database.
    cluster = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = timezone.now() + timedelta(seconds=90)
        while timezone.now() < deadline:
            timer.refresh_from_db()
            # Claimed is not yet done: a timer is `running` between its claim
            # and its outcome, each in its own transaction.
            recorded = PeriodicRun.objects.filter(name="leadops.timers", succeeded_at__isnull=False).exists()
            if timer.status not in (Timer.Status.PENDING, Timer.Status.RUNNING) and recorded:
                break
            try:
                cluster.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                continue
            pytest.fail(f"the cluster exited early:\n{cluster.stdout.read().decode() if cluster.stdout else ''}")
    finally:
        os.killpg(cluster.pid, signal.SIGTERM)
        try:
            output, _ = cluster.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(cluster.pid, signal.SIGKILL)
            output, _ = cluster.communicate()
    # No handler is registered for this kind in the cluster: it must be
    # claimed and marked failed with that reason, not left pending or lost.
    assert timer.status == Timer.Status.FAILED, output.decode()[-2000:]
    assert "no handler registered for timer kind 'cluster.probe'" in timer.error
    assert timer.attempts == 1
    # The job recorded its run for the health check, as a job of its own.
    assert PeriodicRun.objects.get(name="leadops.timers").result["claimed"] >= 1
