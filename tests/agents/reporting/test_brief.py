"""The Daily Owner Brief for a constructed day, the one-line empty day, and
the hourly schedule that emails it once per member and local day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail

from agents.reporting.daily_brief import EMPTY_LINE, TIMER_KIND, brief_build, brief_text, briefs_schedule
from agents.routing.sla import sla_check
from approvals.services import approval_request_open
from crm.models import Business, Message, Payment, Receipt, Role, Timer
from crm.services.records import appointment_record, payment_record, refund_record, task_create
from crm.services.timers import timers_run_due
from tests.factories import BusinessFactory, member_create
from tests.helpers.reporting import owned, sourced_lead

pytestmark = pytest.mark.django_db

# Tuesday 10 March 2026, 10:00 in Chicago (CDT, UTC-5).
NOW = datetime(2026, 3, 10, 15, 0, tzinfo=UTC)


def _message(lead, direction, at, body, key=None):
    return Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        direction=direction,
        channel="sms",
        status="received" if direction == "in" else "sent",
        body=body,
        created_at=at,
        idempotency_key=key,
    )


@pytest.fixture
def day(business, source, setter, manager, owner):
    other = member_create(business, Role.SETTER, username="sara")
    breached = owned(sourced_lead(business, source, phone="+12125550121", first_name="Ann"), setter)
    sla_check(breached, now=NOW - timedelta(hours=3))
    replied = owned(sourced_lead(business, source, phone="+12125550122", first_name="Bo"), setter)
    _message(replied, "in", NOW - timedelta(hours=2), "Can you come Thursday?")
    answered = owned(sourced_lead(business, source, phone="+12125550123", first_name="Cy"), setter)
    _message(answered, "in", NOW - timedelta(hours=3), "Hello?")
    _message(answered, "out", NOW - timedelta(hours=1), "Hi Cy!", key="brief-answer")
    _message(replied, "in", NOW - timedelta(days=2), "an old message, not fresh")

    task_create(lead=replied, title="Call Bo back", due_at=NOW - timedelta(hours=1), actor="t", kind="call_back")
    task_create(lead=replied, title="Not due yet", due_at=NOW + timedelta(hours=1), actor="t", kind="call_back")
    sara_lead = owned(sourced_lead(business, source, phone="+12125550124", first_name="Di"), other)
    task_create(
        lead=sara_lead, title="Sara's overdue call", due_at=NOW - timedelta(hours=5), actor="t", kind="call_back"
    )

    approval_request_open(
        business=business, kind="exception", summary="Commercial job: take it?", proposed_by="agent:fit"
    )
    today = datetime(2026, 3, 10, 20, 0, tzinfo=UTC)  # 15:00 local
    appointment_record(
        lead=replied, starts_at=today, ends_at=today + timedelta(hours=1), actor="t", location="12 Elm St"
    )
    tomorrow = today + timedelta(days=1)
    appointment_record(lead=answered, starts_at=tomorrow, ends_at=tomorrow + timedelta(hours=1), actor="t")

    yesterday = datetime(2026, 3, 9, 18, 0, tzinfo=UTC)
    payment = payment_record(lead=breached, amount=Decimal("250.00"), currency="USD", actor="t", received_at=yesterday)
    refund_record(payment=payment, amount=Decimal("50.00"), actor="t", refunded_at=yesterday + timedelta(hours=1))
    stray = payment_record(
        lead=breached,
        amount=Decimal("100.00"),
        currency="USD",
        actor="t",
        received_at=datetime(2026, 3, 2, 16, 0, tzinfo=UTC),
        match_status=Payment.MatchStatus.UNMATCHED,
    )
    Payment.objects.filter(pk=stray.pk).update(lead=None)
    return {"breached": breached, "replied": replied}


def test_a_setter_gets_only_their_own_items_most_urgent_first(day, setter):
    brief = brief_build(setter, now=NOW)
    assert [(i.kind, i.title) for i in brief.items] == [
        ("sla", f"First response overdue: Ann Doe ({day['breached'].public_id})"),
        ("reply", "Reply from Bo Doe: “Can you come Thursday?”"),
        ("task", "Overdue since Tue 09:00: Call Bo back"),
        ("appointment", "15:00 appointment: Bo Doe at 12 Elm St"),
    ]
    assert [(m.period, m.source, m.net, m.refunded) for m in brief.money] == [
        ("yesterday", "site", Decimal("200.00"), Decimal("50.00")),
        ("this month", "site", Decimal("200.00"), Decimal("50.00")),
    ]


def test_a_manager_gets_the_business_with_approvals_and_unmatched_payments(day, manager):
    brief = brief_build(manager, now=NOW)
    assert [i.kind for i in brief.items] == ["sla", "reply", "task", "approval", "appointment", "payment"]
    assert brief.items[2].title == "2 overdue tasks on the rest of the team"
    assert brief.items[3].title == "Decide: Commercial job: take it?"
    assert brief.items[5].title == "Match payment $100.00 (unmatched, manual)"
    month = [(m.source, m.source_name, m.net) for m in brief.money if m.period == "this month"]
    assert month == [("site", "Website form", Decimal("200.00")), ("unattributed", "No source", Decimal("100.00"))]
    text = brief_text(brief, base_url="https://ops.example.com")
    lines = text.splitlines()
    assert lines[0] == "Acme Heating & Air — Tuesday 10 March 2026: 6 things need you now."
    # Then yesterday's headline numbers, against Sunday and the Monday before.
    assert lines[1].startswith("Yesterday: new leads ")
    assert "collected $200 (+$200 vs Sunday, +$100 vs last Monday)" in lines[1]
    assert lines[2].startswith("1. [SLA breached] First response overdue: Ann Doe")
    assert lines[2].endswith(f"https://ops.example.com/admin/crm/lead/{day['breached'].pk}/change/")
    assert lines[-2] == "Collected yesterday: Website form (site) 200.00 USD (refunds 50.00)"
    assert lines[-1] == "Collected this month: Website form (site) 200.00 USD (refunds 50.00); No source 100.00 USD"


def test_an_empty_day_says_so_in_one_line(db):
    quiet = BusinessFactory.create(slug="quiet", name="Quiet Co")
    olga = member_create(quiet, Role.OWNER, username="quiet-owner")
    brief = brief_build(olga, now=NOW)
    assert brief.is_empty
    assert brief_text(brief) == EMPTY_LINE


def test_one_item_is_counted_in_the_singular(db):
    quiet = BusinessFactory.create(slug="quiet", name="Quiet Co")
    olga = member_create(quiet, Role.OWNER, username="quiet-owner")
    task_create(
        lead=None, business=quiet, owner=olga, title="Call the supplier", due_at=NOW - timedelta(hours=2), actor="t"
    )
    brief = brief_build(olga, now=NOW)
    assert [i.kind for i in brief.items] == ["task"]
    assert brief_text(brief).splitlines()[0] == "Quiet Co — Tuesday 10 March 2026: 1 thing needs you now."


def test_the_brief_reads_a_bounded_number_of_queries(day, manager, django_assert_max_num_queries):
    manager = type(manager).objects.select_related("business").get(pk=manager.pk)
    with django_assert_max_num_queries(16):
        brief_build(manager, now=NOW)


def test_the_hourly_schedule_emails_each_member_once_a_local_day(day, business: Business):
    Business.objects.filter(pk=business.pk).update(brief_hour=7)
    six_local, eight_local = datetime(2026, 3, 10, 11, 0, tzinfo=UTC), datetime(2026, 3, 10, 13, 0, tzinfo=UTC)
    assert briefs_schedule(now=six_local) == 0
    assert briefs_schedule(now=eight_local) == 4  # sam, sara, mia, olga
    assert briefs_schedule(now=eight_local + timedelta(hours=1)) == 0
    run = timers_run_due(now=eight_local + timedelta(hours=1), kinds=[TIMER_KIND])
    assert (run.done, run.failed) == (4, 0)
    assert sorted(m.to[0] for m in mail.outbox) == [
        "mia@example.com",
        "olga@example.com",
        "sam@example.com",
        "sara@example.com",
    ]
    assert all(m.subject == "Daily brief — Acme Heating & Air — 2026-03-10" for m in mail.outbox)
    assert Receipt.objects.filter(action="brief.sent").count() == 4
    assert set(Timer.objects.filter(kind=TIMER_KIND).values_list("dedupe_key", flat=True)) == {
        f"brief:{m.public_id}:2026-03-10" for m in business.team.all()
    }
    # The next local day is a new brief.
    assert briefs_schedule(now=eight_local + timedelta(days=1)) == 4
