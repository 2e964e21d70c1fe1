"""Shared helpers for capture tests: sources, and running what the queue holds."""

from __future__ import annotations

import pytest
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from agents.capture.processing import event_process
from crm.models import Business, Source


@pytest.fixture
def website_source(business: Business) -> Source:
    return Source.objects.create(business=business, key="site", provider="website", secret="site-secret-123")


def run_queued_events() -> list[str]:
    """Run every queued `process_inbound_event` task the way a worker would
    (the real task function on the real queued arguments), then drop it."""
    outcomes = []
    for queued in OrmQ.objects.order_by("id"):
        task = SignedPackage.loads(queued.payload)
        if task["func"] != "agents.tasks.process_inbound_event":
            continue  # first responses and the like: their own tests run them
        outcomes.append(event_process(*task["args"]))
        queued.delete()
    return outcomes
