"""SLA timer: business-hours deadlines, a breach that fires once, reassignment."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core import mail
from django.utils import timezone

from agents.orchestrator import orchestrate_pending
from agents.outbound.local_hours import Window, business_minutes_after, hours_open, next_allowed
from agents.routing.sla import sla_start
from crm.models import Lead, Receipt, Role, Source, Timer
from crm.services import lead_sync
from crm.services.records import touch_add
from crm.services.timers import timers_run_due
from tests.agents.notices import run_queued_notices
from tests.factories import BusinessFactory, lead_create, member_create
from tests.helpers.races import run_together

CHICAGO = ZoneInfo("America/Chicago")
HOURS = {d: "08:00-18:00" for d in ("mon", "tue", "wed", "thu", "fri")}


def test_a_deadline_counts_only_open_business_minutes() -> None:
    friday_evening = datetime(2026, 12, 4, 17, 58, tzinfo=CHICAGO)
    assert business_minutes_after(friday_evening, 5, HOURS, CHICAGO) == datetime(2026, 12, 7, 8, 3, tzinfo=CHICAGO)
    tuesday_night = datetime(2026, 12, 1, 23, 0, tzinfo=CHICAGO)
    assert business_minutes_after(tuesday_night, 5, HOURS, CHICAGO) == datetime(2026, 12, 2, 8, 5, tzinfo=CHICAGO)
    assert business_minutes_after(tuesday_night, 5, {}, CHICAGO) == tuesday_night + timedelta(minutes=5)


def test_hours_until_midnight_are_open_to_the_days_last_minute() -> None:
    all_day = {d: "00:00-24:00" for d in ("mon", "tue", "wed", "thu", "fri", "sat", "sun")}
    last_minute = datetime(2026, 12, 1, 23, 59, 59, tzinfo=CHICAGO)
    assert hours_open(all_day, CHICAGO, last_minute) and hours_open(
        all_day, CHICAGO, last_minute + timedelta(seconds=1)
    )
    assert not hours_open({"tue": "00:00-23:59"}, CHICAGO, last_minute)
    # Quiet hours that end at midnight let a text go in the day's last minute.
    assert next_allowed(last_minute, Window(time(0, 0), time.max, CHICAGO, "")) is None
    assert next_allowed(last_minute, Window(time(0, 0), time(23, 59), CHICAGO, "")) is not None
    # Open around the clock, a deadline is plain time across midnight.
    assert business_minutes_after(last_minute, 5, all_day, CHICAGO) - last_minute < timedelta(minutes=5, seconds=1)
    monday_late = datetime(2026, 11, 30, 23, 58, tzinfo=CHICAGO)
    assert business_minutes_after(monday_late, 5, {"mon": "20:00-24:00"}, CHICAGO) == datetime(
        2026, 12, 7, 20, 3, tzinfo=CHICAGO
    )


@pytest.mark.django_db
def test_a_source_standard_overrides_the_business_one(business) -> None:
    source = Source.objects.create(business=business, key="gads", provider="google_ads", first_response_minutes=2)
    lead = lead_create(business)
    touch_add(lead=lead, source=source, channel="form", received_at=lead.created_at - timedelta(seconds=1))
    due = sla_start(lead)
    lead.refresh_from_db()
    assert due == lead.created_at + timedelta(minutes=2) == lead.sla_due_at
    timer = Timer.objects.get(lead=lead, kind="orchestrate")
    assert timer.payload["event"] == "sla.due" and timer.due_at == due
    sla_start(lead)
    assert Timer.objects.filter(lead=lead, kind="orchestrate").count() == 1, "one clock per lead"


def _breachable(business, n: int) -> list[Lead]:
    leads = [lead_create(business, first_name=f"S{i}", phone=f"+1212555{i:04d}") for i in range(n)]
    past = timezone.now() - timedelta(days=2)
    Lead.objects.filter(pk__in=[lead.pk for lead in leads]).update(created_at=past)
    for lead in leads:
        lead.refresh_from_db()
        sla_start(lead)
    return leads


def test_a_breach_fires_exactly_once_however_many_runs_overlap(transactional_db: None) -> None:
    business = BusinessFactory.create(slug="sla", timezone="America/Chicago")
    member_create(business, Role.MANAGER, username="boss", email="boss@example.com")
    leads = _breachable(business, 30)
    run_together([lambda: timers_run_due(batch=5)] * 4)
    timers_run_due()
    for lead in leads:
        assert Receipt.objects.filter(lead=lead, action="sla.breached").count() == 1
        lead.refresh_from_db()
        assert lead.sla_breached_at is not None and "sla_breached" in lead.exceptions
    assert Timer.objects.filter(kind="orchestrate", status="done").count() == 30


@pytest.mark.django_db
def test_a_lead_reached_in_time_is_not_breached(business) -> None:
    lead = _breachable(business, 1)[0]
    lead_sync.lead_record_first_contact(lead, lead.created_at + timedelta(minutes=2), actor="sam", how="call")
    orchestrate_pending()
    lead.refresh_from_db()
    assert lead.sla_breached_at is None and lead.speed_to_lead_seconds == 120
    assert Receipt.objects.get(lead=lead, action="orchestrator.step").after["outcome"].startswith("met")


@pytest.mark.django_db
def test_a_breach_alerts_the_manager_and_reassigns_where_the_business_chooses(
    business, manager, django_capture_on_commit_callbacks
) -> None:
    business.sla_reassign_on_breach = True
    business.save()
    slow = member_create(business, Role.SETTER, username="slow")
    fast = member_create(business, Role.SETTER, username="fast")
    lead = _breachable(business, 1)[0]
    lead_sync.lead_assign(lead, slow, actor="test", reason="first owner")
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        orchestrate_pending()
    lead.refresh_from_db()
    assert lead.owner == fast
    assert lead.tasks.get(kind="next_action", status="open").owner == fast
    assert run_queued_notices() >= 1
    assert any("SLA breached" in m.subject and manager.user.email in m.to for m in mail.outbox)
    decided = Receipt.objects.filter(lead=lead, action="routing.decided").latest("id")
    assert decided.after["owner"] == "fast"
    assert decided.after["candidates"][0] == {
        "member": "slow",
        "weight": 1,
        "open_leads": 1,
        "on_shift": True,
        "skipped": ["excluded (current owner)"],
    }
