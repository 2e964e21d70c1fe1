"""Outbound webhook subscriptions and their deliveries, as records.

A subscription is saved through `webhook_subscription_save` (the admin and
the business file both): its URL must pass the address check
(crm.services.webhook_targets), its events must be known, its secret must be
a Standard Webhooks secret (`whsec_` + base64 of 24 to 64 bytes). The secret
is encrypted at rest and never shown back.

Deliveries are made by the outbox's sequencer (`deliveries_fan_out`, an
outbox consumer): one per subscription of the business that wants the event
and is not gone, active or paused — a paused one's wait and go out in order
on resume. Sending them is agents.webhooks'; what a person does to them
(pause, resume, replay) is here, each with its receipt.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Case, Exists, F, OuterRef, Value, When
from django.utils import timezone

from crm.models import (
    ALL_EVENTS,
    Business,
    EventType,
    ExceptionItem,
    WebhookDelivery,
    WebhookSubscription,
)
from crm.services.exceptions import manager_exception_open, manager_exceptions_resolve
from crm.services.outbox import OUTBOX_CONSUMERS, Sequenced, outbox_wake
from crm.services.receipts import receipt_write
from crm.services.webhook_targets import TargetRefused, TargetUnresolved, target_check

SECRET_PREFIX = "whsec_"  # noqa: S105 (the format's prefix, not a secret)
PAUSED_EXCEPTION = "webhook_paused"
DEAD_EXCEPTION = "webhook_dead"


class WebhookRefused(ValueError):
    """A subscription that cannot be saved as given; the message says why."""


def webhook_secret_new() -> str:
    """A fresh signing secret: 32 random bytes, as Standard Webhooks writes them."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def webhook_secret_check(secret: str) -> str:
    if not secret.startswith(SECRET_PREFIX):
        raise WebhookRefused(f"a webhook secret starts with {SECRET_PREFIX} (Standard Webhooks)")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise WebhookRefused(f"a webhook secret is {SECRET_PREFIX} and base64") from exc
    if not 24 <= len(key) <= 64:
        raise WebhookRefused(f"a webhook secret holds 24 to 64 bytes, not {len(key)}")
    return secret


def webhook_events_check(events: list[str]) -> list[str]:
    """Known event types (or `*` alone), without repeats, in the order given."""
    wanted = list(dict.fromkeys(str(e).strip() for e in events))
    if not wanted:
        raise WebhookRefused("a subscription needs at least one event type, or * for all")
    if ALL_EVENTS in wanted:
        if len(wanted) > 1:
            raise WebhookRefused("* stands for every event type: list it alone")
        return wanted
    unknown = [e for e in wanted if e not in EventType.values]
    if unknown:
        raise WebhookRefused(f"unknown event type {unknown[0]!r} (one of {', '.join(EventType.values)}, or *)")
    return wanted


def webhook_url_check(url: str) -> str:
    """The URL if it may receive webhooks now. A host that does not resolve
    yet is let through: nothing can reach it, and every delivery checks
    again (that is also what stops a name that later resolves inward)."""
    url = url.strip()
    try:
        target_check(url)
    except TargetUnresolved:
        pass
    except TargetRefused as exc:
        raise WebhookRefused(str(exc)) from exc
    return url


@transaction.atomic
def webhook_subscription_save(
    *,
    business: Business,
    url: str,
    events: list[str],
    actor: str,
    secret: str | None = None,
    description: str | None = None,
    subscription: WebhookSubscription | None = None,
) -> tuple[WebhookSubscription, list[str]]:
    """Create the business's subscription for `url` (or change `subscription`,
    or the one it has for `url`); returns it and the names of the fields that
    changed (["created"] for a new one). A new one needs its `secret`; an
    existing one keeps its own unless one is given. Refuses (WebhookRefused,
    nothing written) a URL that fails the address check, unknown events or a
    malformed secret. A receipt names what changed, never the secret."""
    url = webhook_url_check(url)
    events = webhook_events_check(events)
    if secret is not None:
        secret = webhook_secret_check(secret.strip())
    if subscription is None:
        subscription = WebhookSubscription.objects.filter(business=business, url=url).first()
    elif subscription.business_id != business.pk:
        raise WebhookRefused("a subscription never moves to another business")
    if subscription is None:
        if not secret:
            raise WebhookRefused(f"a new webhook needs its secret ({SECRET_PREFIX}…)")
        subscription = WebhookSubscription(
            business=business, url=url, events=events, secret=secret, description=description or ""
        )
        subscription.full_clean()
        subscription.save()
        changed = ["created"]
    else:
        wanted: dict[str, Any] = {"url": url, "events": events}
        if description is not None:
            wanted["description"] = description
        changed = [name for name, value in wanted.items() if getattr(subscription, name) != value]
        for name in changed:
            setattr(subscription, name, wanted[name])
        if secret and secret != subscription.secret:
            subscription.secret = secret
            changed.append("secret")
        if changed:
            subscription.full_clean()
            subscription.save(update_fields=[*changed, "updated_at"])
    if changed:
        receipt_write(
            business=business,
            subject=subscription.public_id,
            actor=actor,
            action="webhook.subscription_saved",
            reason=", ".join(changed),
            after={"url": subscription.url, "events": subscription.events, "status": subscription.status},
        )
    return subscription, changed


# --- fan-out ---------------------------------------------------------------------


def deliveries_fan_out(business_id: int, events: list[Sequenced]) -> None:
    """The outbox consumer: one delivery per event and subscription that
    wants it, due now. Runs in the sequencer's transaction, so an event is
    fanned out exactly once; the unique (subscription, event) would refuse
    a second anyway."""
    subscriptions = list(WebhookSubscription.objects.filter(business_id=business_id).only("pk", "events", "status"))
    if not subscriptions:
        return
    now = timezone.now()
    paused = WebhookSubscription.Status.PAUSED
    deliveries = [
        WebhookDelivery(
            business_id=business_id,
            subscription=subscription,
            event_id=event.id,
            lead_id=event.lead_id,
            seq=event.seq,
            status=WebhookDelivery.Status.HELD if subscription.status == paused else WebhookDelivery.Status.PENDING,
            # Due since it happened.
            next_attempt_at=event.created_at,
            created_at=now,
        )
        for event in events
        for subscription in subscriptions
        if subscription.wants(event.type)
    ]
    WebhookDelivery.objects.bulk_create(deliveries, batch_size=500)


# --- what a person does ------------------------------------------------------------


def webhook_exception_open(
    *, business_id: int, kind: str, subject: str, detail: str, lead_id: int | None = None
) -> ExceptionItem | None:
    """One open item per kind and subject, for the business's manager."""
    return manager_exception_open(business_id=business_id, kind=kind, subject=subject, detail=detail, lead_id=lead_id)


def webhook_exceptions_resolve(*, business_id: int, kind: str, subject: str, actor: str) -> int:
    return manager_exceptions_resolve(business_id=business_id, kind=kind, subject=subject, actor=actor)


@transaction.atomic
def webhook_subscription_pause(
    subscription: WebhookSubscription,
    *,
    actor: str,
    reason: str,
    now: datetime | None = None,
    failing_since_before: datetime | None = None,
) -> bool:
    """Stop attempting deliveries to this subscription: its waiting ones are
    held (new ones too) until it is resumed. With `failing_since_before`,
    only if it has failed without a success since before then (the
    automatic pause). False when it is not paused now (paused already, or
    not failing that long). A receipt."""
    now = now or timezone.now()
    active = WebhookSubscription.objects.filter(pk=subscription.pk, status=WebhookSubscription.Status.ACTIVE)
    if failing_since_before is not None:
        active = active.filter(failing_since__lte=failing_since_before)
    if not active.update(
        status=WebhookSubscription.Status.PAUSED, paused_at=now, pause_reason=reason[:300], updated_at=now
    ):
        return False
    held = WebhookDelivery.objects.filter(subscription=subscription, status=WebhookDelivery.Status.PENDING).update(
        status=WebhookDelivery.Status.HELD
    )
    subscription.refresh_from_db()
    receipt_write(
        business=subscription.business,
        subject=subscription.public_id,
        actor=actor,
        action="webhook.paused",
        reason=reason,
        before={"status": "active"},
        after={"status": "paused", "held": held},
    )
    return True


@transaction.atomic
def webhook_subscription_resume(subscription: WebhookSubscription, *, actor: str, now: datetime | None = None) -> int:
    """Attempt deliveries again: the subscription active with a clean slate,
    its waiting deliveries due now (in order), its `webhook_paused` item
    resolved; returns how many deliveries wait. A no-op (0) on an active one."""
    now = now or timezone.now()
    resumed = WebhookSubscription.objects.filter(pk=subscription.pk, status=WebhookSubscription.Status.PAUSED).update(
        status=WebhookSubscription.Status.ACTIVE,
        paused_at=None,
        pause_reason="",
        failing_since=None,
        consecutive_failures=0,
        updated_at=now,
    )
    if not resumed:
        return 0
    waiting = WebhookDelivery.objects.filter(
        subscription=subscription, status__in=[WebhookDelivery.Status.PENDING, WebhookDelivery.Status.HELD]
    ).update(status=WebhookDelivery.Status.PENDING, next_attempt_at=now)
    webhook_exceptions_resolve(
        business_id=subscription.business_id, kind=PAUSED_EXCEPTION, subject=subscription.public_id, actor=actor
    )
    subscription.refresh_from_db()
    receipt_write(
        business=subscription.business,
        subject=subscription.public_id,
        actor=actor,
        action="webhook.resumed",
        reason=f"{waiting} deliveries waiting",
        before={"status": "paused"},
        after={"status": "active"},
    )
    outbox_wake()
    return waiting


@transaction.atomic
def webhook_delivery_replay(delivery: WebhookDelivery, *, actor: str, now: datetime | None = None) -> bool:
    """Send a finished delivery (dead, delivered or dry_run) again, with the
    same webhook-id and a fresh allowance of tries (held, with the rest,
    while its subscription is paused); False when it is still waiting or in
    flight. It keeps its place in its lead's order: a later event of the lead
    that is still waiting now waits for it. A receipt."""
    now = now or timezone.now()
    paused = WebhookSubscription.objects.filter(
        pk=OuterRef("subscription_id"), status=WebhookSubscription.Status.PAUSED
    )
    replayed = WebhookDelivery.objects.filter(
        pk=delivery.pk,
        status__in=[WebhookDelivery.Status.DEAD, WebhookDelivery.Status.DELIVERED, WebhookDelivery.Status.DRY_RUN],
    ).update(
        # A paused subscription's replay waits with the rest, held.
        status=Case(
            When(Exists(paused), then=Value(WebhookDelivery.Status.HELD)), default=Value(WebhookDelivery.Status.PENDING)
        ),
        next_attempt_at=now,
        claimed_at=None,
        attempt_limit=F("attempts") + WebhookDelivery.MAX_ATTEMPTS,
    )
    if not replayed:
        return False
    before = delivery.status
    delivery.refresh_from_db()
    receipt_write(
        business=delivery.business,
        subject=delivery.public_id,
        actor=actor,
        action="webhook.replayed",
        before={"status": before},
        after={"status": delivery.status, "attempt_limit": delivery.attempt_limit},
    )
    outbox_wake()
    return True


def register() -> None:
    OUTBOX_CONSUMERS.register("webhooks", deliveries_fan_out)
