"""Delivering outbound webhooks: claim a delivery, post it outside any
transaction, record the answer.

Everything runs on the webhooks cluster's own queue (settings.
WEBHOOKS_CLUSTER), never on the one that processes leads:

- `webhooks_pump` (task `agents.tasks.webhooks_pump`, enqueued after the
  commit of any change that announced an event someone subscribes to)
  numbers the new outbox events, which fans them out into deliveries
  (crm.services.outbox, crm.services.webhooks), then claims and sends
  deliveries until none is due or its time is up, when it hands over to a
  fresh run;
- `webhooks_sweep` (job `leadops.webhooks_sweep`, every minute on the same
  cluster) numbers what no pump did, gives back claims whose worker died,
  pauses subscriptions that have failed for a day, and runs a pump for the
  retries that came due.

A claim is one conditional UPDATE (pending → sending, one more attempt) of
the first due delivery that a concurrent claim has not locked (SKIP
LOCKED), of an active subscription with fewer than MAX_IN_FLIGHT in flight
(a slow receiver holds at most that many workers), and with no earlier
event of the same lead still unfinished for that subscription (pending,
held or sending): a lead's events reach a receiver in the order they
happened, each waiting until the one before it is delivered or dead.

Any answer but a 2xx, a timeout, a refused connection or a target that
fails its address check is a failed attempt: tried again after an
exponential backoff with jitter, up to the delivery's attempt limit, then
dead with an exception item for the manager. A subscription whose attempts
have all failed for a day is paused (its deliveries held) with an exception
item and a Slack alert. With SEND_MODE=dry_run nothing is posted: each
delivery records what would have been sent, as `dry_run`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, Exists, F, OuterRef, Q, Value, When
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from standardwebhooks import Webhook

from agents.guarded_post import Answer, webhook_post
from agents.notify import slack_escape
from agents.queue import task_enqueue
from agents.reporting.alerts import alert_raise
from crm.fields import FieldDecryptionError
from crm.models import WebhookAttempt, WebhookDelivery, WebhookSubscription
from crm.services.outbox import OUTBOX_WAKE, event_envelope, outbox_sequence_all
from crm.services.receipts import receipt_write
from crm.services.webhooks import (
    DEAD_EXCEPTION,
    PAUSED_EXCEPTION,
    webhook_exception_open,
    webhook_exceptions_resolve,
    webhook_subscription_pause,
)
from crm.work_queue import Backoff, claims_take_back, pump

log = logging.getLogger(__name__)
Outcome = WebhookAttempt.Outcome
ACTOR = "agent:webhooks"
PUMP_FUNC = "agents.tasks.webhooks_pump"
# A pump starts no new post after this many seconds: with the last post's
# 15 s it ends well inside the cluster's 60 s task timeout.
PUMP_SECONDS = 40
# A delivery `sending` this long lost its worker (the post itself times out at 15 s).
STALE_CLAIM = timedelta(minutes=2)
# Posts in flight per subscription at once, whatever the number of workers.
MAX_IN_FLIGHT = 2
# Backoff: 30 s, 2 min, 8 min, 32 min, 2.1 h, 8.5 h, then 10 h, each ±10%:
# the nine attempts of a delivery span more than a day (28 h at least), so a
# receiver down for a day is paused before its deliveries run out.
BACKOFF_FIRST = timedelta(seconds=30)
BACKOFF_FACTOR = 4
BACKOFF_CAP = timedelta(hours=10)
JITTER = 0.1
PAUSE_AFTER = timedelta(days=1)
SUCCESS_STAMP_EVERY = timedelta(minutes=1)
CONTENT_TYPE = "application/json"


# How long a delivery waits after its n-th failed attempt.
RETRY = Backoff(first=BACKOFF_FIRST, cap=BACKOFF_CAP, factor=BACKOFF_FACTOR, jitter=JITTER)


# --- claiming ------------------------------------------------------------------------

_CLAIM_SQL = """
UPDATE crm_webhookdelivery SET status = 'sending', attempts = attempts + 1, claimed_at = %(now)s
WHERE id = (
    SELECT d.id FROM crm_webhookdelivery AS d
    JOIN crm_webhooksubscription AS s ON s.id = d.subscription_id
    WHERE d.status = 'pending' AND d.next_attempt_at <= %(now)s AND s.status = 'active'
      AND d.attempts < d.attempt_limit
      AND NOT EXISTS (
          SELECT 1 FROM crm_webhookdelivery AS p
          WHERE p.subscription_id = d.subscription_id AND p.lead_id = d.lead_id AND p.seq < d.seq
            AND p.status IN ('pending', 'held', 'sending'))
      AND (SELECT count(*) FROM crm_webhookdelivery AS f
           WHERE f.subscription_id = d.subscription_id AND f.status = 'sending') < %(in_flight)s
    ORDER BY d.next_attempt_at, d.id
    LIMIT 1
    FOR UPDATE OF d SKIP LOCKED
) AND status = 'pending'
RETURNING id, attempts
"""


def delivery_claim(*, now: datetime) -> tuple[int, int] | None:
    """Claim the next due delivery this worker may send: (id, its attempt
    number), or None when nothing may be sent now. One statement, in
    autocommit: the claim is visible to every other worker at once."""
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, {"now": now, "in_flight": MAX_IN_FLIGHT})
        row = cursor.fetchone()
    return (row[0], row[1]) if row else None


# --- sending -------------------------------------------------------------------------


def webhook_request(delivery: WebhookDelivery, *, sent_at: datetime) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one attempt, signed as Standard Webhooks says:
    `webhook-id` (the event's id: the same on every retry), `webhook-timestamp`
    (when this attempt is made, by the real clock: receivers compare it with
    theirs) and `webhook-signature` (v1, HMAC-SHA256 of id.timestamp.body)."""
    envelope = event_envelope(delivery.event, delivery.business.public_id)
    text = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)
    msg_id = delivery.event.public_id
    signature = Webhook(delivery.subscription.secret).sign(msg_id=msg_id, timestamp=sent_at, data=text)
    headers = {
        "Content-Type": CONTENT_TYPE,
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": signature,
    }
    return text.encode(), headers


def delivery_attempt(delivery_id: int, number: int, *, now: datetime) -> str:
    """Make attempt `number` of a claimed delivery and record it; returns
    the delivery's status afterwards ("stale" when the claim was taken back
    meanwhile). The post runs outside any transaction."""
    loaded = WebhookDelivery.objects.select_related("subscription", "event", "business")
    try:
        delivery = loaded.get(pk=delivery_id)
        body, headers = webhook_request(delivery, sent_at=timezone.now())
    except (FieldDecryptionError, ValueError, TypeError) as exc:
        # A secret that no longer opens (a dropped FIELD_ENCRYPTION_KEYS key)
        # or decodes: nothing can be signed, and the attempt says why.
        delivery = loaded.defer("subscription__secret").get(pk=delivery_id)
        failed = Answer(None, "", f"cannot sign: {type(exc).__name__}: {exc}"[:300], refused=True, duration_ms=0)
        return _record(delivery, number, failed, headers={}, now=now)
    if settings.SEND_MODE != "live":
        return _record_dry_run(delivery, number, headers=headers, size=len(body), now=now)
    answer = webhook_post(delivery.subscription.url, body, headers)
    return _record(delivery, number, answer, headers=headers, now=now)


def _attempt_row(delivery: WebhookDelivery, number: int, outcome: str, **fields: Any) -> None:
    WebhookAttempt.objects.create(delivery=delivery, number=number, outcome=outcome, **fields)


def _record_dry_run(
    delivery: WebhookDelivery, number: int, *, headers: dict[str, str], size: int, now: datetime
) -> str:
    with transaction.atomic():
        if not _claimed(delivery, number).update(
            status=WebhookDelivery.Status.DRY_RUN, last_status_code=None, last_error=""
        ):
            return "stale"
        _attempt_row(
            delivery,
            number,
            Outcome.DRY_RUN,
            at=now,
            request_headers=headers,
            response_excerpt=f"dry run: {size} bytes would be posted to {delivery.subscription.url}",
        )
    return WebhookDelivery.Status.DRY_RUN


def _claimed(delivery: WebhookDelivery, number: int) -> Any:
    # This worker's claim only: one the sweep took back (and maybe another
    # worker claimed since) has moved on, and its outcome stands.
    return WebhookDelivery.objects.filter(pk=delivery.pk, status=WebhookDelivery.Status.SENDING, attempts=number)


def _record(delivery: WebhookDelivery, number: int, answer: Answer, *, headers: dict[str, str], now: datetime) -> str:
    outcome = Outcome.DELIVERED if answer.delivered else Outcome.REFUSED if answer.refused else Outcome.FAILED
    error = answer.error or ("" if answer.delivered else f"HTTP {answer.status_code}")
    status: str
    with transaction.atomic():
        if answer.delivered:
            status = WebhookDelivery.Status.DELIVERED
            moved = _claimed(delivery, number).update(
                status=status, delivered_at=now, last_status_code=answer.status_code, last_error=""
            )
        else:
            status = _after_failure(delivery, number)
            moved = _claimed(delivery, number).update(
                status=_held_if_paused(status),
                next_attempt_at=now + RETRY.delay(number),
                last_status_code=answer.status_code,
                last_error=error[:300],
            )
        if not moved:
            return "stale"
        _attempt_row(
            delivery,
            number,
            outcome,
            at=now,
            status_code=answer.status_code,
            duration_ms=answer.duration_ms,
            error=error[:300],
            response_excerpt=answer.excerpt,
            request_headers=headers,
        )
        if answer.delivered:
            _succeeded(delivery, now=now)
        else:
            _failed(delivery.subscription_id, now=now)
            if status == WebhookDelivery.Status.DEAD:
                _dead(delivery, number, error)
    if not answer.delivered:
        subscription_pause_if_failing(delivery.subscription, now=now)
    return status


def _after_failure(delivery: WebhookDelivery, number: int) -> str:
    return WebhookDelivery.Status.DEAD if number >= delivery.attempt_limit else WebhookDelivery.Status.PENDING


def _held_if_paused(status: str) -> Any:
    """`status`, or held when it is pending and the subscription was paused meanwhile."""
    if status != WebhookDelivery.Status.PENDING:
        return Value(status)
    paused = WebhookSubscription.objects.filter(
        pk=OuterRef("subscription_id"), status=WebhookSubscription.Status.PAUSED
    )
    return Case(
        When(Exists(paused), then=Value(WebhookDelivery.Status.HELD)), default=Value(WebhookDelivery.Status.PENDING)
    )


def _succeeded(delivery: WebhookDelivery, *, now: datetime) -> None:
    # The row of a busy subscription is written only when its state changes
    # or its success stamp is a minute old: workers delivering to it in
    # parallel do not queue on it (and, as read with the delivery, most
    # successes need no statement at all).
    seen = delivery.subscription
    fresh = seen.last_success_at is not None and seen.last_success_at >= now - SUCCESS_STAMP_EVERY
    if seen.failing_since is not None or not fresh:
        _success_stamp(delivery.subscription_id, now=now)
    if delivery.attempt_limit > WebhookDelivery.MAX_ATTEMPTS:  # a replay: its dead-letter item is settled
        webhook_exceptions_resolve(
            business_id=delivery.business_id, kind=DEAD_EXCEPTION, subject=delivery.public_id, actor=ACTOR
        )


def _success_stamp(subscription_id: int, *, now: datetime) -> None:
    WebhookSubscription.objects.filter(pk=subscription_id).filter(
        Q(failing_since__isnull=False)
        | Q(last_success_at__isnull=True)
        | Q(last_success_at__lt=now - SUCCESS_STAMP_EVERY)
    ).update(failing_since=None, consecutive_failures=0, last_success_at=now)


def _failed(subscription_id: int, *, now: datetime) -> None:
    WebhookSubscription.objects.filter(pk=subscription_id).update(
        failing_since=Coalesce(F("failing_since"), Value(now)),
        consecutive_failures=F("consecutive_failures") + 1,
        last_failure_at=now,
    )


def _dead(delivery: WebhookDelivery, number: int, error: str) -> None:
    event, subscription = delivery.event, delivery.subscription
    receipt_write(
        business=delivery.business,
        subject=delivery.public_id,
        actor=ACTOR,
        action="webhook.dead",
        reason=error[:300],
        before={"status": WebhookDelivery.Status.SENDING},
        after={
            "status": WebhookDelivery.Status.DEAD,
            "attempts": number,
            "event": event.public_id,
            "subscription": subscription.public_id,
        },
    )
    webhook_exception_open(
        business_id=delivery.business_id,
        lead_id=delivery.lead_id,
        kind=DEAD_EXCEPTION,
        subject=delivery.public_id,
        detail=f"{event.type} {event.public_id} not delivered to {subscription.url} after {number} attempts: {error}",
    )


def subscription_pause_if_failing(subscription: WebhookSubscription, *, now: datetime) -> bool:
    """Pause a subscription whose attempts have all failed for PAUSE_AFTER,
    with an exception item for the manager and a Slack alert; once."""
    with transaction.atomic():
        paused = webhook_subscription_pause(
            subscription,
            actor=ACTOR,
            reason=f"every attempt failed for {PAUSE_AFTER.days} day(s)",
            now=now,
            failing_since_before=now - PAUSE_AFTER,
        )
        if not paused:
            return False
        subscription.refresh_from_db()
        last = (
            WebhookDelivery.objects.filter(subscription=subscription)
            .exclude(last_error="")
            .order_by("-next_attempt_at")
            .values_list("last_error", flat=True)
            .first()
        )
        detail = (
            f"{subscription.url} paused: failing since {subscription.failing_since:%Y-%m-%d %H:%M} UTC, "
            f"{subscription.consecutive_failures} failed attempts in a row; last: {last or 'no answer'}"
        )
        webhook_exception_open(
            business_id=subscription.business_id, kind=PAUSED_EXCEPTION, subject=subscription.public_id, detail=detail
        )
        link = settings.PUBLIC_BASE_URL + reverse("admin:crm_webhooksubscription_change", args=[subscription.pk])
        alert_raise(
            business=subscription.business,
            key=f"webhook-paused:{subscription.public_id}:{now:%Y%m%dT%H%M}",
            text=f":no_entry: {slack_escape(subscription.business.name)}: webhook {slack_escape(detail)}. "
            f"Its deliveries wait; resume it once the receiver answers — {link}",
        )
    return True


# --- running -------------------------------------------------------------------------


def pump_enqueue() -> None:
    """A delivery run on the webhooks cluster's queue, after the caller's commit."""
    task_enqueue(PUMP_FUNC, group="webhooks", save=False, cluster=settings.WEBHOOKS_CLUSTER)


def webhooks_pump(*, now: datetime | None = None, seconds: float = PUMP_SECONDS) -> dict[str, int]:
    """Number new events (making their deliveries), then send what is due
    until nothing is or `seconds` have passed; with work left then, a fresh
    run is enqueued. `now` fixes the clock the claims and retries go by
    (tests); signatures are stamped with the real time regardless."""
    clock: Callable[[], datetime] = (lambda: now) if now is not None else timezone.now
    counts = {"sequenced": outbox_sequence_all()}

    def refill() -> bool:
        # Nothing due: events committed since the run began may have made some.
        numbered = outbox_sequence_all()
        counts["sequenced"] += numbered
        return bool(numbered)

    run = pump(
        lambda: delivery_claim(now=clock()),
        lambda claimed: delivery_attempt(*claimed, now=clock()),
        seconds=seconds,
        refill=refill,
    )
    if not run.finished:
        pump_enqueue()
    return {**counts, **run.outcomes}


def _lost_claims(now: datetime) -> int:
    """Deliveries whose worker died between claim and record: the attempt
    counts as lost (the receiver may have it: the webhook-id lets it tell),
    then the delivery waits for its retry, or is dead when out of tries."""
    why = "the worker stopped before the answer was recorded"

    def take_back(delivery: WebhookDelivery) -> bool:
        number = delivery.attempts
        status = _after_failure(delivery, number)
        moved = (
            _claimed(delivery, number)
            .filter(claimed_at=delivery.claimed_at)
            .update(status=_held_if_paused(status), next_attempt_at=now + RETRY.delay(number), last_error=why)
        )
        if moved:
            _attempt_row(delivery, number, Outcome.LOST, at=now, error=why)
            if status == WebhookDelivery.Status.DEAD:
                _dead(delivery, number, why)
        return bool(moved)

    rows = WebhookDelivery.objects.select_related("subscription", "event", "business")
    return claims_take_back(
        rows, claimed=WebhookDelivery.Status.SENDING, now=now, after=STALE_CLAIM, take_back=take_back
    )


def webhooks_sweep(*, now: datetime | None = None, seconds: float = PUMP_SECONDS) -> dict[str, int]:
    """The periodic job: number what no pump did, take back dead workers'
    claims, pause subscriptions failing for a day, then send what is due
    (one pump here; more enqueued for the cluster's other workers when
    there is a backlog)."""
    at = now or timezone.now()
    counts: dict[str, int] = {"lost": _lost_claims(at)}
    failing = WebhookSubscription.objects.filter(
        status=WebhookSubscription.Status.ACTIVE, failing_since__lte=at - PAUSE_AFTER
    )
    counts["paused"] = sum(subscription_pause_if_failing(s, now=at) for s in failing.select_related("business"))
    due = WebhookDelivery.objects.filter(status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=at).count()
    for _ in range(min(due // 10, settings.Q_WEBHOOK_WORKERS - 1)):
        pump_enqueue()
    counts.update(webhooks_pump(now=now, seconds=seconds))
    return counts


def register() -> None:
    OUTBOX_WAKE.register("webhooks", pump_enqueue)
