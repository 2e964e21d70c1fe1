"""GET /metrics: refused without the token, off without METRICS_TOKEN, and the
numbers Prometheus reads match the rows that are there, in a constant number
of queries."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from agents.queue import task_enqueue
from crm.models import Business, InboundEvent, Lead, Message, OutboxEvent, Stage, WebhookDelivery
from tests.factories import lead_create
from tests.helpers.webhooks import subscribe

pytestmark = pytest.mark.django_db

TOKEN = "metrics-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def scrape(headers: dict[str, str] | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the answer, by name and labels (parsed as Prometheus does)."""
    with override_settings(METRICS_TOKEN=TOKEN):
        response = Client().get("/metrics", headers=headers or AUTH)
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        assert family.name.startswith("leadops_"), family.name
        assert family.documentation, f"{family.name} has HELP text"
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


# ------------------------------------------------------------------ the token


def test_the_endpoint_is_off_without_a_token_set() -> None:
    with override_settings(METRICS_TOKEN=""):
        response = Client().get("/metrics", headers=AUTH)
    assert response.status_code == 404
    assert b"leadops_" not in response.content


@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x", TOKEN, "Bearer "],
)
def test_a_missing_or_wrong_token_is_refused_with_nothing_said(header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    with override_settings(METRICS_TOKEN=TOKEN):
        response = Client().get("/metrics", headers=headers)
    assert response.status_code == 401
    assert response.content == b""
    assert response["WWW-Authenticate"] == "Bearer"


def test_the_right_token_reads_the_metrics_and_only_by_get() -> None:
    samples = scrape()
    assert value(samples, "leadops_inbound_events_failed") == 0
    with override_settings(METRICS_TOKEN=TOKEN):
        response = Client().post("/metrics", headers=AUTH)
        lowercase = Client().get("/metrics", headers={"Authorization": f"bearer {TOKEN}"})
    assert response.status_code == 405
    assert lowercase.status_code == 200
    assert lowercase["Cache-Control"] == "no-store"


def test_a_signed_in_session_without_the_token_reads_nothing(business: Business, manager: Any) -> None:
    client = Client()
    client.force_login(manager.user)
    with override_settings(METRICS_TOKEN=TOKEN):
        response = client.get("/metrics")
    assert response.status_code == 401


# ------------------------------------------------------------------ the numbers


def inbound(business: Business, status: str, n: int, at: datetime) -> None:
    for i in range(n):
        InboundEvent.objects.create(
            business=business,
            provider="website",
            external_id=f"{status}-{at.timestamp()}-{i}",
            body=b"{}",
            received_at=at,
            status=status,
        )


def test_inbound_events_waiting_and_failed(business: Business) -> None:
    now = timezone.now()
    inbound(business, "failed", 3, now)
    inbound(business, "received", 2, now - timedelta(minutes=10))
    inbound(business, "processed", 4, now)
    samples = scrape()
    assert value(samples, "leadops_inbound_events_failed") == 3
    assert value(samples, "leadops_inbound_events_waiting") == 2
    assert 600 <= value(samples, "leadops_inbound_events_oldest_waiting_age_seconds") < 700


def contacted(business: Business, phone: str, seconds: int) -> Lead:
    lead = lead_create(business, phone=phone)
    Lead.objects.filter(pk=lead.pk).update(
        first_response_at=lead.created_at + timedelta(seconds=seconds), speed_to_lead_seconds=seconds
    )
    return lead


def test_speed_to_lead_is_a_histogram_of_the_last_seven_days(business: Business) -> None:
    contacted(business, "+12125550101", 30)
    contacted(business, "+12125550102", 200)
    contacted(business, "+12125550103", 1200)
    contacted(business, "+12125550104", 100_000)
    old = contacted(business, "+12125550105", 30)
    Lead.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=8))
    test_lead = contacted(business, "+12125550106", 30)
    Lead.objects.filter(pk=test_lead.pk).update(is_test=True)
    lead_create(business, phone="+12125550107")  # not contacted: not in the histogram
    samples = scrape()
    buckets = {le: value(samples, "leadops_speed_to_lead_seconds_bucket", le=le) for le in ("60.0", "300.0", "900.0")}
    assert buckets == {"60.0": 1, "300.0": 2, "900.0": 2}
    assert value(samples, "leadops_speed_to_lead_seconds_bucket", le="3600.0") == 3
    assert value(samples, "leadops_speed_to_lead_seconds_bucket", le="86400.0") == 3
    assert value(samples, "leadops_speed_to_lead_seconds_bucket", le="+Inf") == 4
    assert value(samples, "leadops_speed_to_lead_seconds_count") == 4
    assert value(samples, "leadops_speed_to_lead_seconds_sum") == 30 + 200 + 1200 + 100_000


def test_sla_breaches_are_open_leads_past_their_deadline_with_nobody_on_them(business: Business) -> None:
    now = timezone.now()
    breached = lead_create(business, phone="+12125550111")
    overdue_only = lead_create(business, phone="+12125550112")
    answered = lead_create(business, phone="+12125550113")
    closed = lead_create(business, phone="+12125550114")
    not_due = lead_create(business, phone="+12125550115")
    past = now - timedelta(minutes=20)
    Lead.objects.filter(pk__in=[breached.pk, answered.pk, closed.pk]).update(sla_due_at=past, sla_breached_at=past)
    Lead.objects.filter(pk=overdue_only.pk).update(sla_due_at=past)
    Lead.objects.filter(pk=answered.pk).update(first_response_at=now, speed_to_lead_seconds=60)
    Lead.objects.filter(pk=closed.pk).update(stage=Stage.LOST, closed_at=now)
    Lead.objects.filter(pk=not_due.pk).update(sla_due_at=now + timedelta(minutes=5))
    samples = scrape()
    assert value(samples, "leadops_sla_breached_leads") == 1
    assert value(samples, "leadops_first_response_overdue_leads") == 2


def test_messages_by_status(business: Business) -> None:
    lead = lead_create(business)
    now = timezone.now()

    def message(status: str, n: int, created_at: datetime = now) -> None:
        for i in range(n):
            Message.objects.create(
                business=business,
                lead=lead,
                contact=lead.contact,
                channel="sms",
                direction="out",
                status=status,
                body="hello",
                idempotency_key=f"{status}-{created_at.timestamp()}-{i}",
                created_at=created_at,
            )

    message("delivered", 2)
    message("failed", 1)
    message("queued", 1)
    message("delivered", 5, now - timedelta(days=3))  # outside the day: not counted
    message("queued", 1, now - timedelta(days=3))  # unsettled: counted at any age
    samples = scrape()
    assert value(samples, "leadops_messages", direction="out", status="delivered") == 2
    assert value(samples, "leadops_messages", direction="out", status="failed") == 1
    assert value(samples, "leadops_messages", direction="out", status="queued") == 1
    assert value(samples, "leadops_messages_unsettled", status="queued") == 2
    assert value(samples, "leadops_messages_unsettled", status="sending") == 0


@pytest.mark.skipif(settings.Q_BROKER != "orm", reason="the ORM broker's queue table")
def test_a_queued_task_shows_in_its_queue_with_its_age(django_capture_on_commit_callbacks: Any) -> None:
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        with django_capture_on_commit_callbacks(execute=True):
            task_enqueue("math.floor", 1.5, group="test")
        before = scrape()
    with time_machine.travel(start + timedelta(minutes=7), tick=False):
        after = scrape()
    queue = settings.Q_CLUSTER["name"]
    assert value(before, "leadops_task_queue_depth", queue=queue) == 1
    assert value(before, "leadops_task_queue_depth", queue=settings.WEBHOOKS_CLUSTER) == 0
    assert value(before, "leadops_task_queue_oldest_age_seconds", queue=queue) == 0
    assert value(after, "leadops_task_queue_oldest_age_seconds", queue=queue) == 420
    assert value(after, "leadops_task_queue_claimed", queue=queue) == 0


def test_the_webhook_backlog_and_what_is_due(business: Business) -> None:
    with override_settings(WEBHOOK_ALLOW_PRIVATE=True):
        subscription = subscribe(business, "https://127.0.0.1:9/hook")
    for phone in ("+12125550121", "+12125550122", "+12125550123", "+12125550124"):
        lead_create(business, phone=phone)
    now = timezone.now()
    for seq, (event, status, due) in enumerate(
        zip(
            OutboxEvent.objects.filter(business=business).order_by("id")[:4],
            ["pending", "pending", "held", "delivered"],
            [now - timedelta(minutes=1), now + timedelta(minutes=5), now, now],
            strict=True,
        )
    ):
        WebhookDelivery.objects.create(
            business=business,
            subscription=subscription,
            event=event,
            seq=seq,
            status=status,
            next_attempt_at=due,
            created_at=now - timedelta(minutes=30 - seq),
        )
    samples = scrape()
    assert value(samples, "leadops_webhook_deliveries_backlog", status="pending") == 2
    assert value(samples, "leadops_webhook_deliveries_backlog", status="held") == 1
    assert value(samples, "leadops_webhook_deliveries_backlog", status="sending") == 0
    assert value(samples, "leadops_webhook_deliveries_backlog_due") == 1
    assert 30 * 60 <= value(samples, "leadops_webhook_deliveries_backlog_oldest_age_seconds") < 31 * 60
    assert value(samples, "leadops_conversion_uploads_backlog", status="pending") == 0


# ------------------------------------------------------------------ the cost


def test_a_scrape_costs_the_same_few_queries_at_1_and_20_leads(
    business: Business, django_assert_max_num_queries: Any
) -> None:
    def count() -> int:
        with CaptureQueriesContext(connection) as captured:
            scrape()
        return len(captured)

    contacted(business, "+12125550200", 60)
    inbound(business, "failed", 1, timezone.now())
    one = count()
    for i in range(1, 20):
        contacted(business, f"+121255502{i:02d}", 60 * i)
        inbound(business, "received", 1, timezone.now() - timedelta(seconds=i))
    twenty = count()
    assert Lead.objects.count() == 20
    assert one == twenty
    # Leads, inbound events, messages, the task queue, conversions, webhooks
    # (and the savepoint the test client's request runs in, if any).
    with django_assert_max_num_queries(8):
        scrape()
