"""Shared helpers for capture tests: sources, and running what the queue holds."""

from __future__ import annotations

import pytest
from django.utils import timezone

from agents.capture.processing import event_claim_next, event_run_claimed
from crm.models import Business, Source


@pytest.fixture
def website_source(business: Business) -> Source:
    return Source.objects.create(business=business, key="site", provider="website", secret="site-secret-123")


def run_queued_events() -> list[str]:
    """Process every due inbound event the way the intake loop does (its
    claim, oldest first, then the event's handler); their outcomes in order."""
    outcomes = []
    now = timezone.now()
    while (event_id := event_claim_next(now=now)) is not None:
        outcomes.append(event_run_claimed(event_id, now=now))
    return outcomes
