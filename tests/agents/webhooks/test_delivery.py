"""Outbound webhooks against real local receivers (HTTPS, their own CA) that
verify every post with the `standardwebhooks` package; the clock moves by
passing `now` to the delivery runs, never by sleeping."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from agents.webhooks.delivery import webhooks_sweep
from crm.models import (
    Business,
    ExceptionItem,
    Lead,
    OutboxEvent,
    Stage,
    TeamMember,
    Timer,
    WebhookAttempt,
    WebhookDelivery,
    WebhookSubscription,
)
from crm.services import lead_sync
from crm.services.webhooks import webhook_delivery_replay, webhook_secret_new, webhook_subscription_resume
from scripts.webhook_receiver import Received, Receiver, closed_port
from tests.factories import lead_create
from tests.helpers.webhooks import deliver, subscribe

pytestmark = pytest.mark.django_db(transaction=True)


def worked(business: Business, setter: TeamMember, phone: str) -> Lead:
    """A lead with four events: created, its owner, assigned, contacted."""
    lead = lead_create(business, phone=phone)
    lead_sync.lead_assign(lead, setter, actor="test", reason="test")
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="test", reason="called")
    return lead


def events_of(lead: Lead) -> list[str]:
    return list(OutboxEvent.objects.filter(lead=lead).order_by("id").values_list("public_id", flat=True))


def test_an_event_is_delivered_once_and_verifies(business: Business, live: None) -> None:
    secret = webhook_secret_new()
    with Receiver(secret) as receiver:
        subscription = subscribe(business, receiver.url, secret=secret)
        lead = lead_create(business, first_name="Rosa", last_name="Diaz", phone="+12125550147")

        deliver()
        deliver()  # nothing left: a second run sends nothing again

    [received] = receiver.received
    assert received.verified and received.status == 200
    event = OutboxEvent.objects.get(lead=lead, type="lead.created")
    assert received.webhook_id == event.public_id
    body = received.body
    assert set(body) == {"id", "type", "created_at", "business", "data"}
    assert (body["id"], body["type"], body["business"]) == (event.public_id, "lead.created", business.public_id)
    assert body["created_at"].endswith("+00:00")
    assert body["data"]["lead"] == lead.public_id and body["data"]["contact"] == lead.contact.public_id
    # Ids and fields, never the person's name or phone.
    # (The phone by its digits: a random public id may well contain "555".)
    assert "Rosa" not in str(body) and "5550147" not in str(body)
    delivery = WebhookDelivery.objects.get(subscription=subscription)
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == (WebhookDelivery.Status.DELIVERED, 1, 200)
    [attempt] = WebhookAttempt.objects.filter(delivery=delivery)
    assert (attempt.outcome, attempt.status_code, attempt.response_excerpt) == ("delivered", 200, "ok")
    assert attempt.request_headers["webhook-id"] == event.public_id
    assert attempt.request_headers["webhook-signature"].startswith("v1,")


def test_a_subscription_gets_only_the_events_it_names(business: Business, setter: TeamMember, live: None) -> None:
    secret = webhook_secret_new()
    with Receiver(secret) as receiver:
        subscribe(business, receiver.url, events=("lead.stage_changed",), secret=secret)
        worked(business, setter, "+12125550147")
        deliver()

    assert [(r.type, r.body["data"]["to"]) for r in receiver.accepted()] == [
        ("lead.stage_changed", "assigned"),
        ("lead.stage_changed", "contacted"),
    ]


def test_a_receiver_failing_then_recovering_gets_every_event_once_in_order_per_lead(
    business: Business, setter: TeamMember, live: None
) -> None:
    secret = webhook_secret_new()
    failing = threading.Event()
    failing.set()
    with Receiver(secret, answer=lambda received: 503 if failing.is_set() else 200) as receiver:
        subscribe(business, receiver.url, secret=secret)
        leads = [worked(business, setter, phone) for phone in ("+12125550147", "+12125550148", "+12125550149")]
        start = timezone.now()

        deliver(now=start)
        # Each lead's first event failed; its later events wait behind it.
        assert [r.type for r in receiver.received] == ["lead.created"] * 3
        assert {r.status for r in receiver.received} == {503}
        assert WebhookDelivery.objects.filter(status=WebhookDelivery.Status.PENDING).count() == 12

        deliver(now=start + timedelta(minutes=1))  # the first retry: still failing
        failing.clear()
        deliver(now=start + timedelta(minutes=10))

    accepted = receiver.accepted()
    # Every event once, whatever was tried before.
    assert Counter(r.webhook_id for r in accepted) == Counter(e for lead in leads for e in events_of(lead))
    for lead in leads:
        assert [r.webhook_id for r in accepted if r.lead == lead.public_id] == events_of(lead)
    assert not WebhookDelivery.objects.exclude(status=WebhookDelivery.Status.DELIVERED).exists()
    assert WebhookSubscription.objects.get().failing_since is None


def test_a_receiver_down_for_a_day_pauses_its_subscription_with_an_alert(
    business: Business, setter: TeamMember, live: None
) -> None:
    Business.objects.filter(pk=business.pk).update(slack_webhook_url="https://hooks.slack.com/services/T/B/x")
    secret, port = webhook_secret_new(), closed_port()
    subscription = subscribe(business, f"https://localhost:{port}/hook", secret=secret)
    lead = worked(business, setter, "+12125550147")
    start = timezone.now()

    deliver(now=start)
    subscription.refresh_from_db()
    assert subscription.failing_since is not None and subscription.status == "active"
    webhooks_sweep(now=start + timedelta(hours=12))  # failing, not yet for a day
    assert WebhookSubscription.objects.get().status == "active"

    webhooks_sweep(now=start + timedelta(hours=25))

    subscription.refresh_from_db()
    assert subscription.status == "paused" and "failed for 1 day" in subscription.pause_reason
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {WebhookDelivery.Status.HELD}
    item = ExceptionItem.objects.get(kind="webhook_paused", subject=subscription.public_id, status="open")
    assert subscription.url in item.detail and "Connection refused" in item.detail
    alert = Timer.objects.get(kind="reporting.slack_alert", dedupe_key__startswith="alert:webhook-paused:")
    assert subscription.url in alert.payload["text"]
    outcomes = WebhookAttempt.objects.filter(delivery__lead=lead).values_list("outcome", flat=True)
    assert set(outcomes) == {"failed"}

    # A paused subscription keeps what happens meanwhile, and sends nothing.
    lead_sync.lead_transition(lead, Stage.ENGAGED, actor="test", reason="replied")
    deliver(now=start + timedelta(hours=26))
    assert WebhookDelivery.objects.filter(status=WebhookDelivery.Status.HELD).count() == 5

    # The receiver is back and a person resumes: every event goes, in order, once.
    with Receiver(secret, port=port) as receiver:
        assert webhook_subscription_resume(subscription, actor="mia") == 5
        deliver(now=start + timedelta(hours=27))
    assert [r.webhook_id for r in receiver.accepted()] == events_of(lead)
    item.refresh_from_db()
    assert item.status == "resolved"


def test_a_delivery_out_of_tries_is_dead_with_an_item_then_later_events_go_and_a_replay_delivers(
    business: Business, setter: TeamMember, live: None
) -> None:
    secret = webhook_secret_new()
    refusing = threading.Event()
    refusing.set()
    bad: list[str] = []

    def answer(received: Received) -> int:
        return 500 if refusing.is_set() and received.lead in bad else 200

    with Receiver(secret, answer=answer) as receiver:
        subscribe(business, receiver.url, secret=secret)
        lead = lead_create(business, phone="+12125550148")
        bad.append(lead.public_id)
        lead_sync.lead_assign(lead, setter, actor="test", reason="test")
        at = timezone.now()
        for round_ in range(WebhookDelivery.MAX_ATTEMPTS):
            # Another lead's event succeeds each round: the subscription never fails for a day.
            lead_create(business, phone=f"+1212555{round_:04d}")
            deliver(now=at)
            at += timedelta(hours=12)
        created, owner_changed, stage_changed = WebhookDelivery.objects.filter(lead=lead).order_by("seq")

        assert (created.status, created.attempts) == (WebhookDelivery.Status.DEAD, WebhookDelivery.MAX_ATTEMPTS)
        # Dead lets the lead's next event go (refused too, so the one after it waits).
        assert (owner_changed.status, owner_changed.attempts) == (WebhookDelivery.Status.PENDING, 1)
        assert stage_changed.attempts == 0
        item = ExceptionItem.objects.get(kind="webhook_dead", subject=created.public_id, status="open")
        assert item.lead_id == lead.pk and "lead.created" in item.detail and "HTTP 500" in item.detail
        assert WebhookSubscription.objects.get().status == "active"

        refusing.clear()
        assert webhook_delivery_replay(created, actor="mia")
        deliver(now=at)

    created.refresh_from_db()
    assert (
        created.status == WebhookDelivery.Status.DELIVERED and created.attempt_limit == 2 * WebhookDelivery.MAX_ATTEMPTS
    )
    item.refresh_from_db()
    assert item.status == "resolved"
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {WebhookDelivery.Status.DELIVERED}
    sent = [r.webhook_id for r in receiver.accepted() if r.lead == lead.public_id]
    assert sorted(sent) == sorted(events_of(lead))


def test_dry_run_calls_nothing_and_records_what_would_be_sent(business: Business) -> None:
    secret = webhook_secret_new()
    with override_settings(SEND_MODE="dry_run", WEBHOOK_ALLOW_PRIVATE=True), Receiver(secret) as receiver:
        subscribe(business, receiver.url, secret=secret)
        lead = lead_create(business)
        deliver()

    assert receiver.received == []
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == WebhookDelivery.Status.DRY_RUN
    [attempt] = WebhookAttempt.objects.filter(delivery=delivery)
    assert attempt.outcome == "dry_run" and attempt.status_code is None
    assert attempt.request_headers["webhook-id"] == OutboxEvent.objects.get(lead=lead).public_id
    assert receiver.url in attempt.response_excerpt


def test_concurrent_workers_and_sweeps_deliver_each_delivery_once(
    business: Business, setter: TeamMember, live: None
) -> None:
    secrets = [webhook_secret_new(), webhook_secret_new()]
    with Receiver(secrets[0], delay=0.02) as first, Receiver(secrets[1], delay=0.02) as second:
        subscribe(business, first.url, secret=secrets[0])
        subscribe(business, second.url, secret=secrets[1])
        leads = [worked(business, setter, f"+1212555{n:04d}") for n in range(8)]
        barrier = threading.Barrier(4)

        def run(job: str) -> None:
            try:
                barrier.wait(timeout=30)
                webhooks_sweep() if job == "sweep" else deliver()
            finally:
                connection.close()

        threads = [threading.Thread(target=run, args=(job,)) for job in ("pump", "pump", "sweep", "sweep")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)

    expected = Counter(e for lead in leads for e in events_of(lead))
    assert sum(expected.values()) == 32
    for receiver in (first, second):
        assert all(r.verified for r in receiver.received)
        assert Counter(r.webhook_id for r in receiver.received) == expected
        for lead in leads:
            assert [r.webhook_id for r in receiver.received if r.lead == lead.public_id] == events_of(lead)
    assert set(WebhookDelivery.objects.values_list("status", "attempts")) == {(WebhookDelivery.Status.DELIVERED, 1)}
