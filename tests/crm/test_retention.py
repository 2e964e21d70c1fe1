"""Retention: raw bodies of processed and ignored events are pruned after the
business's number of days, a bounded batch per run; failed ones are kept."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.utils import timezone
from django_q.models import Schedule

from agents.schedules import schedules_ensure
from agents.tasks import prune_raw_bodies
from crm.models import Business, InboundEvent, Source
from crm.services.retention import raw_bodies_prune
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

META_SECRET = "meta-app-secret-for-retention"


@pytest.fixture
def site(business: Business) -> Source:
    return Source.objects.create(business=business, key="site", provider="website", secret="site-secret-123")


def deliver(body: bytes, capture: Any, url: str = "/hooks/forms/site/", **headers: Any) -> None:
    with capture(execute=True):
        Client().post(url, data=body, content_type="application/json", **headers)
    run_queued_events()


def form(capture: Any, n: int = 0) -> None:
    body = json.dumps({"first_name": f"Pat{n}", "phone": f"(212) 555-01{n:02d}", "message": "furnace"}).encode()
    deliver(body, capture, HTTP_AUTHORIZATION="Bearer site-secret-123")


def days_later(days: int) -> Any:
    return timezone.now() + timedelta(days=days)


def test_processed_and_ignored_bodies_are_pruned_after_the_retention_and_failed_ones_kept(
    site: Source, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.META_APP_SECRET = META_SECRET
    form(django_capture_on_commit_callbacks)
    deliver(b"{not json", django_capture_on_commit_callbacks, HTTP_AUTHORIZATION="Bearer site-secret-123")
    feed = json.dumps(
        {"object": "page", "entry": [{"id": "1", "time": 1, "changes": [{"field": "feed", "value": {}}]}]}
    )
    signature = "sha256=" + hmac.new(META_SECRET.encode(), feed.encode(), hashlib.sha256).hexdigest()
    deliver(feed.encode(), django_capture_on_commit_callbacks, "/hooks/meta/", HTTP_X_HUB_SIGNATURE_256=signature)
    statuses = dict(InboundEvent.objects.values_list("status", "provider"))
    assert set(statuses) == {"processed", "failed", "ignored"}

    assert raw_bodies_prune(now=days_later(89)) == 0
    assert raw_bodies_prune(now=days_later(91)) == 2

    kept = {e.status: (bytes(e.body), e.headers) for e in InboundEvent.objects.all()}
    assert kept["processed"] == kept["ignored"] == (b"", {})
    assert kept["failed"][0] == b"{not json" and kept["failed"][1]
    assert InboundEvent.objects.count() == 3  # the rows stay: ids, status, times


def test_each_business_keeps_raw_bodies_for_its_own_number_of_days(
    site: Source, business: Business, django_capture_on_commit_callbacks: Any
) -> None:
    Business.objects.filter(pk=business.pk).update(raw_retention_days=7)
    form(django_capture_on_commit_callbacks)

    assert raw_bodies_prune(now=days_later(6)) == 0
    assert raw_bodies_prune(now=days_later(8)) == 1


def test_one_run_prunes_at_most_one_batch(site: Source, django_capture_on_commit_callbacks: Any) -> None:
    for n in range(3):
        form(django_capture_on_commit_callbacks, n)

    assert raw_bodies_prune(now=days_later(91), batch=2) == 2
    assert raw_bodies_prune(now=days_later(91), batch=2) == 1
    assert raw_bodies_prune(now=days_later(91), batch=2) == 0


def test_a_batch_stays_one_batch_whatever_plan_the_database_picks(
    site: Source, django_capture_on_commit_callbacks: Any
) -> None:
    for n in range(3):
        form(django_capture_on_commit_callbacks, n)
    # The plan that once cleared three rows for a batch of two (one run in
    # ten): a nested-loop semi-join that rescans the batch for each row.
    with connection.cursor() as cursor:
        for planner_switch in (
            "enable_hashjoin",
            "enable_mergejoin",
            "enable_hashagg",
            "enable_material",
            "enable_sort",
        ):
            cursor.execute(f"SET LOCAL {planner_switch} = off")

        assert raw_bodies_prune(now=days_later(91), batch=2) == 2
        cursor.execute("SELECT count(*) FROM crm_inboundevent WHERE octet_length(body) > 0")
        assert cursor.fetchone() == (1,)


def test_the_pruning_task_is_scheduled_hourly(db: None) -> None:
    schedules_ensure()

    schedule = Schedule.objects.get(name="leadops.prune_raw_bodies")
    assert (schedule.func, schedule.schedule_type, schedule.minutes) == ("agents.tasks.prune_raw_bodies", "I", 60)
    assert prune_raw_bodies() == 0


BUSINESS_FILE = """\
business: {slug: acme, name: Acme Heating & Air, timezone: America/Chicago, region: US}
policy: {raw_retention_days: %s}
"""


def test_the_business_file_sets_the_retention(tmp_path: Path) -> None:
    path = tmp_path / "acme.yaml"
    path.write_text(BUSINESS_FILE % 30)

    call_command("load_business", str(path), stdout=StringIO())

    assert Business.objects.get(slug="acme").raw_retention_days == 30


def test_the_business_file_refuses_a_retention_under_one_day(tmp_path: Path) -> None:
    path = tmp_path / "acme.yaml"
    path.write_text(BUSINESS_FILE % 0)

    with pytest.raises(CommandError, match="'raw_retention_days' in policy must be at least 1, not 0"):
        call_command("load_business", str(path), stdout=StringIO())
