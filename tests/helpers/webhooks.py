"""Outbound webhooks in tests: live sending to real local receivers
(scripts/webhook_receiver.py), subscriptions made through the service, and
delivery runs as the webhooks cluster makes them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest
from django.test import override_settings

from agents.webhooks.delivery import webhooks_pump
from crm.models import Business, WebhookSubscription
from crm.services.webhooks import webhook_secret_new, webhook_subscription_save
from scripts.webhook_receiver import tls_files

SECONDS = 30.0


@pytest.fixture
def live() -> Iterator[None]:
    """Posts really go out, to receivers on this machine (loopback, own CA)."""
    with override_settings(SEND_MODE="live", WEBHOOK_ALLOW_PRIVATE=True, WEBHOOK_CA_BUNDLE=tls_files().ca):
        yield


def subscribe(business: Business, url: str, events: tuple[str, ...] = ("*",), secret: str = "") -> WebhookSubscription:
    subscription, _ = webhook_subscription_save(
        business=business, url=url, events=list(events), secret=secret or webhook_secret_new(), actor="test"
    )
    return subscription


def deliver(now: datetime | None = None) -> dict[str, int]:
    """One delivery run, as a worker of the webhooks cluster runs it."""
    return webhooks_pump(now=now, seconds=SECONDS)
