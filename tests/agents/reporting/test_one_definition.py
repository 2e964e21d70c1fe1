"""One definition per number (docs/reports.md): for one seeded day, the
funnel, the revenue report and the owner's brief give the same new leads,
contacted, booked, won and money — an automated acknowledgement is nobody's
contact on any of them."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from agents.orchestrator import orchestrate_pending
from agents.reporting.daily_brief import brief_build
from agents.reporting.funnel import funnel_report
from agents.revenue.payments import payment_manual_record, refund_add
from crm.attribution import revenue_report
from crm.models import Appointment, Business, Job, Lead, Message, Role, Stage, TeamMember
from crm.services import lead_sync
from crm.services.reached import lead_reached
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db

ZONE = ZoneInfo("America/Chicago")


@pytest.fixture
def week(business: Business) -> tuple[Business, TeamMember, datetime, datetime]:
    """Yesterday (the business's day) holds: four new leads; two reached by a
    person, one only acknowledged by an automated text; two booked; one won
    and paid $450, of which $50 was refunded."""
    business.timezone, business.currency = "America/Chicago", "USD"
    business.save(update_fields=["timezone", "currency"])
    owner = member_create(business, Role.OWNER, username="olivia")
    today = timezone.now().astimezone(ZONE).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(days=1)
    noon = start + timedelta(hours=12)
    leads = [lead_create(business, first_name=name, phone=f"+1312555{n:04d}") for n, name in enumerate("ABCD")]
    Lead.objects.filter(pk__in=[lead.pk for lead in leads]).update(created_at=noon - timedelta(hours=2))
    for lead in leads:
        lead.refresh_from_db()
    reached, acked, _, _ = leads
    lead_reached(reached, actor="sam", how="call", at=noon)
    lead_reached(leads[2], actor="sam", how="call", at=noon)
    Message.objects.create(
        business=business,
        lead=acked,
        contact=acked.contact,
        direction="out",
        channel="sms",
        status=Message.Status.DELIVERED,
        automated=True,
        body="We got your request",
        idempotency_key="ack:1",
        created_at=noon,
    )
    for lead in (reached, leads[2]):
        Appointment.objects.create(
            business=business, lead=lead, starts_at=noon + timedelta(days=1), ends_at=noon + timedelta(days=1, hours=1)
        )
    Appointment.objects.filter(business=business).update(created_at=noon)
    lead_sync.lead_transition(reached, Stage.BOOKED, actor="sam", reason="booked")
    lead_sync.lead_transition(reached, Stage.APPOINTMENT_HELD, actor="tom", reason="held")
    job = Job.objects.create(business=business, lead=reached, status=Job.Status.COMPLETED, completed_at=noon)
    payment = payment_manual_record(
        lead=reached, amount=Decimal("450.00"), currency="USD", received_at=noon, actor="mia", job=job
    )
    orchestrate_pending()
    Lead.objects.filter(pk=reached.pk).update(closed_at=noon + timedelta(hours=1))
    refund = refund_add(payment, amount=Decimal("50.00"), actor="mia")
    type(refund).objects.filter(pk=refund.pk).update(refunded_at=noon + timedelta(hours=2))
    assert Lead.objects.get(pk=reached.pk).stage == Stage.WON
    return business, owner, start, today


def test_the_funnel_the_revenue_report_and_the_brief_agree_on_one_day(week) -> None:
    business, owner, start, today = week

    funnel = funnel_report(Lead.objects.filter(business=business), since=start, until=today, period="day", tz=ZONE)
    revenue = revenue_report([business.pk], currency="USD", since=start, until=today).totals
    brief = brief_build(owner, now=today + timedelta(hours=7))
    headline = {h.key: h.value for h in brief.headlines}

    assert (funnel.total.counts["leads"], revenue.leads, headline["leads"]) == (4, 4, 4)
    # The acknowledged lead is not contacted anywhere: a person reached two.
    assert (funnel.total.counts["contacted"], revenue.contacted) == (2, 2)
    assert (funnel.total.counts["booked"], revenue.booked, headline["booked"]) == (2, 2, 2)
    assert (funnel.total.counts["won"], revenue.won, headline["won"]) == (1, 1, 1)
    assert (revenue.net, headline["net"]) == (Decimal("400.00"), Decimal("400.00"))
    assert funnel.total.counts["paid"] == 1


def test_the_brief_opens_with_yesterday_against_the_day_before_and_last_week(week) -> None:
    from agents.reporting.daily_brief import brief_text

    _, owner, start, today = week
    brief = brief_build(owner, now=today + timedelta(hours=7))

    collected = next(h for h in brief.headlines if h.key == "net")
    assert (collected.text, collected.change, collected.trend) == ("$400", "+$400", "up")
    leads = next(h for h in brief.headlines if h.key == "leads")
    assert [(c.previous, c.text) for c in leads.changes] == [(0, "+4"), (0, "+4")]
    first = brief_text(brief).splitlines()[1]  # under the first line
    day_before = f"{start - timedelta(days=1):%A}"
    assert first.startswith(f"Yesterday: new leads 4 (+4 vs {day_before}, +4 vs last {start:%A});")
    assert "collected $400 (+$400" in first


def test_a_setter_s_headlines_are_their_own_leads(week, business: Business) -> None:
    _, _, _, today = week
    sam = member_create(business, Role.SETTER, username="sam")
    mine = Lead.objects.filter(business=business, contact__first_name="A").get()
    lead_sync.lead_assign(mine, sam, actor="mia", reason="test")

    headline = {h.key: h.value for h in brief_build(sam, now=today + timedelta(hours=7)).headlines}

    assert (headline["leads"], headline["booked"], headline["won"], headline["net"]) == (1, 1, 1, Decimal("400.00"))
