"""Webhook deliveries run on their own queue, taken by their own cluster
(Q_CLUSTER_NAME=leadops-webhooks): a slow receiver holds that cluster's
workers, never the ones that process leads."""

from __future__ import annotations

import json
import pydoc
import threading
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django_q.models import OrmQ, Schedule
from django_q.signing import SignedPackage

from agents.schedules import JOBS, schedules_ensure
from crm.models import Business, InboundEvent, Lead, Message, OutboxEvent, WebhookDelivery
from crm.services.business_file import business_file_load
from crm.services.webhooks import webhook_secret_new
from scripts.lead_statements import FORM, WEBSITE_PATH, WEBSITE_SECRET
from scripts.webhook_receiver import Receiver
from tests.helpers.capture import run_queued_events
from tests.helpers.webhooks import subscribe

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_FILE = Path(__file__).resolve().parents[3] / "demo" / "acme-hvac.yaml"
DEFAULT_QUEUE = settings.Q_CLUSTER["name"]
WEBHOOKS_QUEUE = settings.WEBHOOKS_CLUSTER


def post_lead(n: int) -> str:
    form = {**FORM, "phone": f"(312) 555-{n:04d}", "email": f"person{n}@example.com"}
    response = Client().post(
        WEBSITE_PATH, json.dumps(form), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {WEBSITE_SECRET}"
    )
    assert response.status_code == 200, response.content
    return str(response.json()["id"])


def queued(key: str) -> list[str]:
    return [str(SignedPackage.loads(q.payload)["func"]) for q in OrmQ.objects.filter(key=key).order_by("id")]


def work(key: str, funcs: tuple[str, ...] | None = None) -> list[str]:
    """Run what waits on one queue, as that queue's cluster's worker would
    (only `funcs`, when given: the rest stays queued)."""
    ran: list[str] = []
    while True:
        rows = OrmQ.objects.filter(key=key).order_by("id")
        task = next(((row, SignedPackage.loads(row.payload)) for row in rows if not funcs or _func(row) in funcs), None)
        if task is None:
            return ran
        row, package = task
        row.delete()
        ran.append(str(package["func"]))
        pydoc.locate(package["func"])(*package["args"], **package["kwargs"])  # type: ignore[operator]


def _func(row: Any) -> str:
    return str(SignedPackage.loads(row.payload)["func"])


def lead_of(event_public_id: str) -> Lead:
    return Lead.objects.get(touches__inbound_event__public_id=event_public_id)


def test_deliveries_are_queued_for_the_webhooks_cluster_and_leads_for_the_default_one(live: None) -> None:
    business_file_load(DEMO_FILE)
    business = Business.objects.get(slug="acme-hvac")
    with Receiver(webhook_secret_new()) as receiver:
        subscribe(business, receiver.url, secret=receiver.secret)
        event = post_lead(1)
        # The stored event is the intake loop's work item: no task is queued for it.
        assert queued(DEFAULT_QUEUE) == [] and queued(WEBHOOKS_QUEUE) == []
        assert InboundEvent.objects.get(public_id=event).status == "received"

        assert run_queued_events() == ["processed"]

        # The lead's events woke the webhooks cluster, once for the unit of work, on its own queue only.
        assert queued(WEBHOOKS_QUEUE) == ["agents.tasks.webhooks_pump"]
        assert "agents.tasks.webhooks_pump" not in queued(DEFAULT_QUEUE)
        work(WEBHOOKS_QUEUE)
    assert {r.type for r in receiver.accepted()} >= {"lead.created", "lead.owner_changed", "lead.stage_changed"}

    # The outbound sweeps (webhooks, conversion uploads, sync) are scheduled
    # on that cluster too; every other job on the default one.
    schedules_ensure()
    clusters = dict(Schedule.objects.values_list("name", "cluster"))
    outbound = ("leadops.webhooks_sweep", "leadops.conversions_sweep", "leadops.sync_sweep")
    assert [clusters.pop(name) for name in outbound] == [WEBHOOKS_QUEUE] * 3
    assert set(clusters.values()) == {None} and len(clusters) == len(JOBS) - len(outbound)


def test_a_slow_receiver_does_not_delay_the_processing_of_a_new_lead(live: None) -> None:
    business_file_load(DEMO_FILE)
    business = Business.objects.get(slug="acme-hvac")
    hold = threading.Event()
    with Receiver(webhook_secret_new(), hold=hold) as receiver:
        subscribe(business, receiver.url, secret=receiver.secret)
        first = post_lead(1)
        assert run_queued_events() == ["processed"]

        def webhooks_worker() -> None:
            try:
                work(WEBHOOKS_QUEUE)
            finally:
                connection.close()

        worker = threading.Thread(target=webhooks_worker)
        worker.start()
        # The webhooks worker is in the middle of a post the receiver does not answer.
        assert receiver.arrived.wait(timeout=30)
        assert WebhookDelivery.objects.filter(status="sending").count() == 1

        second = post_lead(2)

        # The new lead was processed end to end while the receiver still held its post.
        assert run_queued_events() == ["processed"]
        assert worker.is_alive() and WebhookDelivery.objects.filter(status="sending").count() == 1
        lead = lead_of(second)
        assert InboundEvent.objects.get(public_id=second).status == "processed"
        assert lead.owner_id is not None and lead.next_action
        assert Message.objects.filter(lead=lead, idempotency_key=f"ack:{lead.public_id}").exists()

        hold.set()
        worker.join(timeout=60)
        work(WEBHOOKS_QUEUE)

    expected = set(OutboxEvent.objects.filter(lead__in=[lead_of(first), lead]).values_list("public_id", flat=True))
    assert {r.webhook_id for r in receiver.accepted()} == expected
