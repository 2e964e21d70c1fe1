"""The real webhooks cluster, as `make run` starts it
(Q_CLUSTER_NAME=leadops-webhooks): it takes the deliveries' tasks from its
own queue and runs its own periodic sweep, and leaves the default queue's
tasks alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from agents.queue import task_enqueue
from crm.models import Business, PeriodicRun, WebhookDelivery
from crm.services.webhooks import webhook_secret_new
from scripts.webhook_receiver import Receiver, tls_files
from tests.factories import lead_create
from tests.helpers.database import test_database_url
from tests.helpers.webhooks import subscribe

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[3]


def test_the_webhooks_cluster_delivers_from_its_own_queue_and_runs_its_sweep(business: Business, live: None) -> None:
    secret = webhook_secret_new()
    with Receiver(secret) as receiver:
        subscribe(business, receiver.url, secret=secret)
        lead = lead_create(business)  # committed: its delivery run is queued on the webhooks queue
        # A task for the default cluster, which this one must not take.
        task_enqueue("agents.tasks.run_timers", group="probe")
        assert set(OrmQ.objects.values_list("key", flat=True)) == {settings.WEBHOOKS_CLUSTER, "leadops"}
        env = {
            **os.environ,
            "DATABASE_URL": test_database_url(),
            "Q_CLUSTER_NAME": settings.WEBHOOKS_CLUSTER,
            "Q_WEBHOOK_WORKERS": "1",
            "SEND_MODE": "live",
            "WEBHOOK_ALLOW_PRIVATE": "true",
            "WEBHOOK_CA_BUNDLE": tls_files().ca,
        }
        # Its own session, so teardown ends the whole process group.
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
                swept = PeriodicRun.objects.filter(name="leadops.webhooks_sweep", succeeded_at__isnull=False).exists()
                if receiver.accepted() and swept:
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

    [received] = receiver.accepted()
    assert received.verified and received.lead == lead.public_id, output.decode()[-2000:]
    assert WebhookDelivery.objects.get().status == "delivered"
    assert PeriodicRun.objects.filter(name="leadops.webhooks_sweep", succeeded_at__isnull=False).exists()
    # The default queue's task is still there: only the default cluster takes it.
    # (Stopped as soon as its sweep ran, this cluster may leave its own queue's
    # other scheduled job, the conversions sweep, untaken: not what is asked.)
    left = [(q.key, SignedPackage.loads(q.payload)["func"]) for q in OrmQ.objects.order_by("id")]
    assert [func for key, func in left if key != settings.WEBHOOKS_CLUSTER] == ["agents.tasks.run_timers"], left
    assert {key for key, _ in left} <= {"leadops", settings.WEBHOOKS_CLUSTER}, left
