"""The funnel: stages reached by their own records, conversions, speed to
lead, show, close and no-show recovery rates."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.reporting.funnel import funnel_report
from agents.reporting.trace import leak_audit
from crm.models import Lead, Source
from crm.services.records import appointment_record, estimate_record, refund_record
from tests.helpers.reporting import completed_job, held, owned, paid, sourced_lead, to_stage

pytestmark = pytest.mark.django_db


def _appointment(lead, status, days_ago):
    start = timezone.now() - timedelta(days=days_ago)
    appointment_record(lead=lead, starts_at=start, ends_at=start + timedelta(hours=1), actor="t", status=status)


@pytest.fixture
def leads(business, source, setter):
    ads = Source.objects.create(business=business, key="gads", provider="google_ads", secret="k")
    a = owned(sourced_lead(business, source, phone="+12125550301"), setter)  # booked, no-show, rebooked, held, paid
    Lead.objects.filter(pk=a.pk).update(first_response_at=timezone.now(), speed_to_lead_seconds=60)
    _appointment(a, "no_show", 5)
    held(a)
    estimate_record(lead=a, amount=Decimal("900.00"), currency="USD", actor="t", status="accepted")
    completed_job(a)
    paid(a)
    b = owned(sourced_lead(business, source, phone="+12125550302"), setter)  # no-show, never recovered
    Lead.objects.filter(pk=b.pk).update(first_response_at=timezone.now(), speed_to_lead_seconds=300)
    _appointment(b, "no_show", 3)
    c = sourced_lead(business, ads, phone="+12125550303")  # held, paid then refunded in full: not paid
    Lead.objects.filter(pk=c.pk).update(first_response_at=timezone.now(), speed_to_lead_seconds=1000)
    held(c)
    payment = paid(c, "100.00")
    refund_record(payment=payment, amount=Decimal("100.00"), actor="t", refunded_at=timezone.now())
    d = to_stage(sourced_lead(business, ads, phone="+12125550304"), "lost")  # arrived, nothing else
    return {"a": a, "b": b, "c": c, "d": d}


def test_stages_are_counted_by_their_own_records(leads):
    funnel = funnel_report(Lead.objects.all())
    assert funnel.total.counts == {
        "leads": 4,
        "contacted": 3,
        "booked": 3,
        "held": 2,
        "estimate": 1,
        "won": 1,
        "paid": 1,
    }
    by_key = {r.key: r.counts for r in funnel.by_key}
    assert by_key["site"]["paid"] == 1 and by_key["gads"]["paid"] == 0
    assert dict(funnel.total.conversions)["contacted"] == pytest.approx(0.75)
    assert funnel.total.close_rate == pytest.approx(0.5)  # won (a) of held (a, c)


def test_a_providers_test_lead_is_in_neither_the_funnel_nor_the_leak_audit(leads, business, source):
    tester = sourced_lead(business, source, phone="+16505550123")  # Google's "send test data" person
    Lead.objects.filter(pk=tester.pk).update(is_test=True)

    assert funnel_report(Lead.objects.all()).total.counts["leads"] == 4
    assert leak_audit(Lead.objects.all()).leads == 4


def test_show_close_and_no_show_recovery_rates(leads):
    rates = funnel_report(Lead.objects.all()).rates
    assert (rates.held, rates.no_show) == (2, 2)
    assert rates.show_rate == pytest.approx(0.5)
    assert (rates.no_show_leads, rates.recovered) == (2, 1)
    assert rates.recovery_rate == pytest.approx(0.5)


def test_speed_to_lead_median_and_p90_by_source_and_owner(leads):
    funnel = funnel_report(Lead.objects.all())
    by_source = {s.key: s for s in funnel.speed_by_source}
    assert (by_source["site"].n, by_source["site"].median_seconds) == (2, 180.0)
    assert by_source["site"].p90_seconds == pytest.approx(276.0)
    assert by_source["gads"].median_seconds == 1000.0
    by_owner = {s.key: s.n for s in funnel.speed_by_owner}
    assert by_owner == {"sam": 2, "unowned": 1}


def test_grouping_by_owner_and_period(leads):
    funnel = funnel_report(Lead.objects.all(), by="owner", period="day")
    assert {r.key: r.counts["leads"] for r in funnel.by_key} == {"sam": 2, "unowned": 2}
    assert {r.period.date() for r in funnel.rows} == {timezone.now().date()}


def test_the_funnel_costs_the_same_queries_for_more_leads(leads, business, source, django_assert_max_num_queries):
    with django_assert_max_num_queries(5):
        funnel_report(Lead.objects.all())
    for n in range(10):
        sourced_lead(business, source, phone=f"+1212555040{n}")
    with django_assert_max_num_queries(5):
        funnel_report(Lead.objects.all())
