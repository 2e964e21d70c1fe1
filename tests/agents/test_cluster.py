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
from devtools.polling import poll_until
from tests.helpers.database import test_database_url

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def cluster_start(**env: str) -> subprocess.Popen[bytes]:
    # Its own session, so teardown can end the whole process group: the
    # cluster's workers must not outlive the test and poll its database.
    return subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": test_database_url(), "Q_WORKERS": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def group_states(pgid: int) -> list[str]:
    """The process states (ps STAT) of the cluster's group, zombies left out."""
    ps = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True)
    return [state for state in ps.stdout.split() if not state.startswith("Z")]


def stop(cluster: subprocess.Popen[bytes], signum: int) -> tuple[bool, bytes]:
    """Send `signum` to the cluster's process group, as a terminal's Ctrl-C
    or systemd's stop does: (whether every process ended within 30 s, output)."""
    os.killpg(cluster.pid, signum)
    try:
        output, _ = cluster.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(cluster.pid, signal.SIGKILL)
        output, _ = cluster.communicate()
        return False, output
    # A loop or worker of the group left behind? (Zombies are no one's: gone already.)
    left = group_states(cluster.pid)
    if not left:
        return True, output
    os.killpg(cluster.pid, signal.SIGKILL)
    return False, output + f"\n{len(left)} left running: {left}".encode()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_the_cluster_and_its_intake_loops_stop_on_a_signal_to_the_group(signum: int) -> None:
    cluster = cluster_start(INTAKE_PROCESSES="2")
    assert cluster.stdout is not None
    seen = b""
    deadline = timezone.now() + timedelta(seconds=60)
    # Running: django-q2 says so once its sentinel and workers are up (the loops started before).
    while b"running" not in seen.lower() and timezone.now() < deadline and cluster.poll() is None:
        seen += cluster.stdout.readline()
    assert b"running" in seen.lower(), seen.decode()[-2000:]
    # Settled: every process of the group asleep (the loops and the main
    # process waiting for their next poll), where a signal used to find them
    # (a handler that set the stop event there deadlocked).
    asleep = poll_until(lambda: all(state.startswith("S") for state in group_states(cluster.pid)), timeout=30)
    assert asleep, group_states(cluster.pid)

    stopped, output = stop(cluster, signum)

    assert stopped, (seen + output).decode()[-2000:]


def test_cluster_runs_the_timer_schedule_against_the_database(business) -> None:
    timer = timer_schedule(business=business, kind="cluster.probe", due_at=timezone.now() - timedelta(seconds=1))
    cluster = cluster_start()
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
        stopped, output = stop(cluster, signal.SIGTERM)
    # A systemd stop (SIGTERM to the group) ends the cluster and its intake loops.
    assert stopped, output.decode()[-2000:]
    # No handler is registered for this kind in the cluster: it must be
    # claimed and marked failed with that reason, not left pending or lost.
    assert timer.status == Timer.Status.FAILED, output.decode()[-2000:]
    assert "no handler registered for timer kind 'cluster.probe'" in timer.error
    assert timer.attempts == 1
    # The job recorded its run for the health check, as a job of its own.
    assert PeriodicRun.objects.get(name="leadops.timers").result["claimed"] >= 1
