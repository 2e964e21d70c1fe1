"""Racing deliveries on PostgreSQL with real threads (invariant 2).

Each thread has its own database connection, as web workers and cluster
workers do; a barrier releases them together.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client

from agents.capture.processing import event_process
from crm.models import Contact, InboundEvent, Lead, LeadTouch, Source

pytestmark = pytest.mark.django_db(transaction=True)

PHONE = "+12125550147"


def race(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        try:
            barrier.wait(timeout=30)
            return call()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


@pytest.fixture
def sources(business) -> Iterator[dict[str, Source]]:
    # The rate limits' counters are committed like everything else here.
    cache.clear()
    yield {
        "website": Source.objects.create(business=business, key="site", provider="website", secret="s1"),
        "hosted": Source.objects.create(business=business, key="quote", provider="hosted_form"),
        "google": Source.objects.create(business=business, key="gads", provider="google_ads", secret="g-key"),
    }
    cache.clear()


def website_post() -> int:
    body = json.dumps({"name": "Ana Lopez", "phone": "(212) 555-0147", "email": "ana@example.com", "nonce": "w-1"})
    return (
        Client()
        .post("/hooks/forms/site/", body, content_type="application/json", HTTP_AUTHORIZATION="Bearer s1")
        .status_code
    )


def hosted_post() -> int:
    data = {"first_name": "Ana", "phone": "212.555.0147", "consent": "yes", "nonce": "h-1"}
    return Client().post("/f/quote/", data, REMOTE_ADDR="203.0.113.7").status_code


def google_post() -> int:
    body = {
        "lead_id": "lead-g-1",
        "google_key": "g-key",
        "form_id": 40000000000,
        "campaign_id": 20000000000,
        "user_column_data": [
            {"column_id": "FULL_NAME", "string_value": "Ana Lopez"},
            {"column_id": "PHONE_NUMBER", "string_value": "+1 212 555 0147"},
            {"column_id": "EMAIL", "string_value": "ANA@example.com"},
        ],
    }
    return Client().post("/hooks/google-ads/gads/", json.dumps(body), content_type="application/json").status_code


def test_thirty_racing_deliveries_of_one_person_across_three_providers_make_one_lead(sources):
    # Five hosted posts: the hosted form's per-number limit.
    statuses = race([website_post] * 10 + [hosted_post] * 5 + [google_post] * 15)
    assert set(statuses) == {200}, statuses
    assert InboundEvent.objects.count() == 3

    # Every worker tries every event, as at-least-once redelivery would.
    event_ids = list(InboundEvent.objects.values_list("pk", flat=True))
    outcomes = race([partial(event_process, pk) for pk in event_ids for _ in range(5)])
    assert sorted(o for o in outcomes if o != "skipped") == ["processed"] * 3

    assert Contact.objects.count() == 1
    assert Lead.objects.count() == 1
    assert LeadTouch.objects.count() == 3
    assert set(LeadTouch.objects.values_list("source__key", flat=True)) == {"site", "quote", "gads"}
    assert set(Contact.objects.get().points.values_list("value", flat=True)) == {PHONE, "ana@example.com"}


def test_twenty_racing_repeats_of_one_event_are_processed_once(sources):
    statuses = race([website_post] * 20)
    assert set(statuses) == {200}
    event = InboundEvent.objects.get()
    outcomes = race([lambda: event_process(event.pk)] * 20)
    assert outcomes.count("processed") == 1 and outcomes.count("skipped") == 19
    event.refresh_from_db()
    assert (event.status, event.attempts) == ("processed", 1)
    assert Lead.objects.count() == 1 and LeadTouch.objects.count() == 1
