"""The revenue report: each figure from its own records, attribution by first
and latest touch, money in Decimal with its currency, reconciling to the cent
with payments minus refunds, in a bounded number of queries (the selector,
the API endpoint, the page and its CSV)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import openpyxl
import pytest
from django.db import connection
from django.db.models import Sum
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from agents.capture.base import PaymentHints
from agents.revenue.jobs import invoice_issue, job_complete
from agents.revenue.payments import payment_manual_record, payment_receive, refund_add
from crm.attribution import NO_VALUE, UNATTRIBUTED, revenue_report, revenue_reports_and_before
from crm.exports import XLSX_TYPE
from crm.models import Appointment, Business, Lead, Payment, Refund, Role, Source, Stage
from crm.services import lead_sync
from crm.services.records import appointment_record, contact_create, estimate_record, job_record, lead_open, touch_add
from tests.factories import member_create

pytestmark = pytest.mark.django_db

D = Decimal


@pytest.fixture
def sources(business: Business) -> dict[str, Source]:
    return {
        key: Source.objects.create(business=business, key=key, provider=provider)
        for key, provider in [("gads", "google_ads"), ("fb", "meta"), ("site", "website")]
    }


_phones = iter(range(100, 200))


def lead_from(business, source, *, at=None, campaign="", ad="", utm=None, is_test=False) -> Lead:
    n = next(_phones)
    contact = contact_create(business=business, actor="t", first_name=f"P{n}", phones=[f"+1312555{n:04d}"])
    lead = lead_open(
        contact=contact,
        actor="t",
        source=source,
        received_at=at or timezone.now(),
        touch={"channel": "form", "campaign_id": campaign, "ad_id": ad, "utm": utm or {}},
    )
    if is_test:
        Lead.objects.filter(pk=lead.pk).update(is_test=True)
    return lead


def walk(lead, *stages) -> Lead:
    for stage in stages:
        lead_sync.lead_transition(lead, stage, actor="t", reason="t")
    lead.refresh_from_db()
    return lead


def pay(lead, amount: str, *, at=None, currency="USD", invoice=None) -> Payment:
    return payment_manual_record(
        lead=lead, amount=D(amount), currency=currency, received_at=at or timezone.now(), actor="t", invoice=invoice
    )


def row(report, key):
    return next(r for r in report.rows if r.key == key)


def test_a_booking_or_an_estimate_is_never_collected(business, sources):
    lead = walk(lead_from(business, sources["gads"]), Stage.CONTACTED, Stage.BOOKED, Stage.APPOINTMENT_HELD)
    now = timezone.now()
    appointment_record(lead=lead, starts_at=now, ends_at=now + timedelta(hours=1), actor="t", status="held")
    estimate_record(lead=lead, amount=D("5000.00"), currency="USD", actor="t", status="accepted", sent_at=now)
    report = revenue_report([business.pk], currency="USD")
    gads = row(report, "gads")
    assert (gads.leads, gads.booked, gads.held, gads.estimates, gads.estimates_amount) == (1, 1, 1, 1, D("5000.00"))
    assert (gads.invoiced, gads.collected, gads.refunded, gads.net) == (D("0.00"),) * 4


def test_the_report_reconciles_to_the_cent_with_payments_minus_refunds(business, sources, manager):
    leads = [lead_from(business, sources[key]) for key in ("gads", "gads", "fb", "site")]
    for lead in leads:
        walk(lead, Stage.CONTACTED, Stage.BOOKED, Stage.APPOINTMENT_HELD)
    invoice = invoice_issue(lead=leads[0], amount=D("1234.56"), currency="USD", actor="t")
    first = pay(leads[0], "1234.56", invoice=invoice)
    pay(leads[1], "0.01")
    third = pay(leads[2], "999.99")
    refund_add(first, amount=D("34.56"), actor="t")  # partial
    refund_add(third, amount=D("999.99"), actor="t")  # whole
    stray = payment_receive(
        business,
        provider="stripe",
        external_id="pi_stray",
        amount=D("77.70"),
        currency="USD",
        received_at=timezone.now(),
        hints=PaymentHints(emails=("nobody@example.com",)),
    ).payment
    refund_add(stray, amount=D("7.70"), actor="t")
    pay(leads[3], "50.00", currency="EUR")  # another currency: not in a USD report

    report = revenue_report([business.pk], currency="USD")
    paid = Payment.objects.filter(currency="USD").aggregate(t=Sum("amount"))["t"]
    refunded = Refund.objects.filter(currency="USD").aggregate(t=Sum("amount"))["t"]
    totals = report.totals
    assert (totals.collected, totals.refunded, totals.net) == (paid, refunded, paid - refunded)
    assert totals.net == D("1234.56") + D("0.01") + D("999.99") + D("77.70") - D("34.56") - D("999.99") - D("7.70")
    assert isinstance(totals.net, Decimal)
    assert (row(report, "gads").collected, row(report, "gads").refunded) == (D("1234.57"), D("34.56"))
    assert row(report, "fb").net == D("0.00")
    assert (row(report, UNATTRIBUTED).collected, row(report, UNATTRIBUTED).net) == (D("77.70"), D("70.00"))
    assert row(report, "gads").invoiced == D("1234.56")
    euro = revenue_report([business.pk], currency="EUR")
    assert euro.totals.collected == D("50.00") and row(euro, "site").collected == D("50.00")


def test_first_and_latest_touch_attribute_the_same_money_differently(business, sources):
    t0 = timezone.now() - timedelta(days=3)
    lead = lead_from(business, sources["gads"], at=t0, campaign="111", ad="ad-1")
    touch_add(lead=lead, source=sources["fb"], received_at=t0 + timedelta(days=1), channel="form", campaign_id="222")
    walk(lead, Stage.CONTACTED, Stage.BOOKED, Stage.APPOINTMENT_HELD)
    pay(lead, "400.00")
    first = revenue_report([business.pk], currency="USD", touch="first")
    latest = revenue_report([business.pk], currency="USD", touch="latest")
    assert [(r.key, r.collected) for r in first.rows] == [("gads", D("400.00"))]
    assert [(r.key, r.collected) for r in latest.rows] == [("fb", D("400.00"))]
    by_campaign = revenue_report([business.pk], currency="USD", by="campaign", touch="latest")
    assert [r.key for r in by_campaign.rows] == ["222"]
    by_ad = revenue_report([business.pk], currency="USD", by="ad")
    assert [r.key for r in by_ad.rows] == ["ad-1"]
    assert [r.key for r in revenue_report([business.pk], currency="USD", by="ad", touch="latest").rows] == [NO_VALUE]


def test_a_campaign_named_only_in_utm_is_its_key(business, sources):
    lead_from(business, sources["site"], utm={"campaign": "spring-tuneup"})
    assert [r.key for r in revenue_report([business.pk], currency="USD", by="campaign").rows] == ["spring-tuneup"]


def test_by_owner_counts_each_owners_leads_wins_and_money(business, sources):
    sam = member_create(business, Role.SETTER, username="sam")
    won = lead_from(business, sources["gads"])
    lead_sync.lead_assign(won, sam, actor="t", reason="t")
    walk(won, Stage.CONTACTED, Stage.BOOKED, Stage.APPOINTMENT_HELD)
    pay(won, "10.00")
    from agents.orchestrator import orchestrate_pending

    orchestrate_pending()  # the payment's step wins the lead
    lead_from(business, sources["fb"])  # nobody's yet
    report = revenue_report([business.pk], currency="USD", by="owner")
    assert (row(report, "sam").leads, row(report, "sam").won, row(report, "sam").collected) == (1, 1, D("10.00"))
    assert (row(report, NO_VALUE).leads, row(report, NO_VALUE).won) == (1, 0)


def test_every_figure_counts_at_its_own_time(business, sources):
    old = timezone.now() - timedelta(days=40)
    lead = lead_from(business, sources["gads"], at=old)
    Lead.objects.filter(pk=lead.pk).update(created_at=old)
    walk(lead, Stage.CONTACTED, Stage.BOOKED, Stage.APPOINTMENT_HELD)
    pay(lead, "300.00", at=old + timedelta(days=1))
    pay(lead, "200.00")
    job_complete(job_record(lead=lead, actor="t"), actor="t")
    since = timezone.now() - timedelta(days=7)
    recent = row(revenue_report([business.pk], currency="USD", since=since), "gads")
    assert (recent.leads, recent.collected, recent.jobs_completed) == (0, D("200.00"), 1)
    earlier = row(revenue_report([business.pk], currency="USD", until=since), "gads")
    assert (earlier.leads, earlier.collected, earlier.jobs_completed) == (1, D("300.00"), 0)


def test_test_leads_are_no_ones_demand(business, sources):
    lead_from(business, sources["gads"], is_test=True)
    lead_from(business, sources["gads"])
    assert row(revenue_report([business.pk], currency="USD"), "gads").leads == 1


def test_another_business_is_not_counted(business, other_business, sources):
    other_source = Source.objects.create(business=other_business, key="other-gads", provider="google_ads")
    pay(walk(lead_from(other_business, other_source), Stage.CONTACTED), "10.00")
    assert revenue_report([business.pk], currency="USD").rows == []


def _bulk(business, sources, n: int) -> None:
    for i in range(n):
        lead = lead_from(business, sources[("gads", "fb", "site")[i % 3]], campaign=f"c{i % 2}")
        walk(lead, Stage.CONTACTED, Stage.BOOKED, Stage.APPOINTMENT_HELD)
        now = timezone.now()
        appointment_record(
            lead=lead, starts_at=now, ends_at=now + timedelta(hours=1), actor="t", status=Appointment.Status.HELD
        )
        estimate_record(lead=lead, amount=D("100.00"), currency="USD", actor="t", status="sent", sent_at=now)
        payment = pay(lead, "100.00")
        refund_add(payment, amount=D("1.00"), actor="t")


# ------------------------------------------------------------------ the API


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_endpoint_answers_the_contract_rows(business, sources, manager):
    _bulk(business, sources, 3)
    response = api(manager.user).get("/api/v1/reports/revenue/", {"business": "acme", "by": "source"})
    assert response.status_code == 200
    body = response.json()
    assert (body["currency"], body["by"], body["touch"], body["businesses"]) == ("USD", "source", "first", ["acme"])
    for item in body["rows"]:
        assert {"key", "leads", "booked", "won", "jobs_completed", "invoiced", "collected", "refunded", "net"} <= set(
            item
        )
    gads = next(r for r in body["rows"] if r["key"] == "gads")
    assert (gads["collected"], gads["refunded"], gads["net"]) == ("100.00", "1.00", "99.00")
    assert body["totals"]["net"] == "297.00"


@pytest.mark.parametrize(
    "query",
    [{"by": "weather"}, {"touch": "middle"}, {"since": "yesterday"}, {"since": "2026-02-01", "until": "2026-01-01"}],
)
def test_a_bad_query_is_a_400_with_the_error_shape(business, manager, query):
    response = api(manager.user).get("/api/v1/reports/revenue/", query)
    assert response.status_code == 400
    assert response.json()["error"] == "bad_request"


def test_a_setter_or_a_stranger_reads_no_revenue(business, other_business, manager):
    sam = member_create(business, Role.SETTER, username="sam")
    assert api(sam.user).get("/api/v1/reports/revenue/").status_code == 403
    assert api(manager.user).get("/api/v1/reports/revenue/", {"business": "other"}).status_code == 403
    assert APIClient().get("/api/v1/reports/revenue/").status_code in (401, 403)


def test_dates_are_local_days_of_the_business(business, sources, manager):
    # 05:30 UTC on 2026-03-02 is still 2026-03-01 in Chicago.
    at = datetime(2026, 3, 2, 5, 30, tzinfo=UTC)
    pay(walk(lead_from(business, sources["gads"]), Stage.CONTACTED), "42.00", at=at)
    client = api(manager.user)
    day = client.get("/api/v1/reports/revenue/", {"since": "2026-03-01", "until": "2026-03-01"}).json()
    assert day["totals"]["collected"] == "42.00"
    assert day["since"] == "2026-03-01T06:00:00Z"  # local midnight, stored and shown in UTC
    next_day = client.get("/api/v1/reports/revenue/", {"since": "2026-03-02", "until": "2026-03-02"}).json()
    assert next_day["totals"]["collected"] == "0.00"


def test_the_endpoint_costs_the_same_queries_for_few_and_many_leads(business, sources, manager):
    client = api(manager.user)

    def count(by: str) -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/api/v1/reports/revenue/", {"by": by}).status_code == 200
        return len(ctx.captured_queries)

    count("source")
    _bulk(business, sources, 2)
    few = {by: count(by) for by in ("source", "campaign", "owner")}
    _bulk(business, sources, 12)
    many = {by: count(by) for by in ("source", "campaign", "owner")}
    assert few == many
    assert max(many.values()) <= 6  # the user's scope, the businesses, the report: one query


# ------------------------------------------------------------------ the page


def test_the_page_shows_the_report_and_exports_it_as_csv(business, sources, manager, django_assert_max_num_queries):
    _bulk(business, sources, 4)
    client = Client()
    client.force_login(manager.user)
    with django_assert_max_num_queries(20):
        page = client.get("/admin/revenue/", {"by": "source"})
    html = page.content.decode()
    assert page.status_code == 200 and 'id="revenue-table"' in html and 'data-key="gads"' in html
    export = client.get("/admin/revenue/", {"by": "source", "format": "csv"})
    assert export["Content-Type"].startswith("text/csv")
    lines = list(csv.reader(io.StringIO(export.content.decode())))
    # The columns added later (repeat customers, money by click date) follow the currency.
    assert lines[0][:3] == ["key", "leads", "contacted"] and lines[0][12:14] == ["net", "currency"]
    assert lines[0][14:] == ["repeat_leads", "collected_by_click", "refunded_by_click", "net_by_click"]
    total = lines[-1]
    assert total[0] == "total" and total[12:14] == ["396.00", "USD"]


def test_the_revenue_downloads_as_xlsx_with_typed_numbers_money_and_a_frozen_header(business, sources, manager):
    _bulk(business, sources, 4)
    client = Client()
    client.force_login(manager.user)
    page = client.get("/admin/revenue/", {"by": "source"}).content.decode()
    assert 'id="revenue-xlsx"' in page and "format=xlsx" in page

    export = client.get("/admin/revenue/", {"by": "source", "format": "xlsx"})

    assert export["Content-Type"] == XLSX_TYPE
    assert export["Content-Disposition"].endswith('-source-first.xlsx"')
    sheet = openpyxl.load_workbook(io.BytesIO(export.content)).active
    assert sheet.freeze_panes == "A2" and sheet["A1"].font.bold
    rows = list(sheet.iter_rows(values_only=True))
    as_csv = client.get("/admin/revenue/", {"by": "source", "format": "csv"}).content.decode()
    csv_lines = list(csv.reader(io.StringIO(as_csv)))
    assert list(rows[0]) == csv_lines[0]  # the same columns, in the same order
    total = rows[-1]
    assert total[0] == "total" and total[12:14] == (396, "USD")
    assert isinstance(total[1], int)  # a count is a number, not text
    net = sheet.cell(row=len(rows), column=13)
    assert (net.data_type, net.number_format) == ("n", '"$"#,##0.00;-"$"#,##0.00')


def test_the_page_asks_a_setter_to_leave_and_requires_staff_login(business):
    sam = member_create(business, Role.SETTER, username="sam")
    client = Client()
    assert client.get("/admin/revenue/").status_code == 302  # to the login page
    client.force_login(sam.user)
    response = client.get("/admin/revenue/")
    assert response.status_code == 403 and "owners and managers" in response.content.decode()


def test_money_by_click_date_and_by_payment_date_side_by_side(business, sources):
    """A March click paid in April: April's money by payment date, March's by click."""
    march = datetime(2026, 3, 10, 15, tzinfo=UTC)
    april = datetime(2026, 4, 12, 15, tzinfo=UTC)
    clicked_in_march = lead_from(business, sources["gads"], at=march)
    pay(clicked_in_march, "1200.00", at=april)
    refund_add(Payment.objects.get(lead=clicked_in_march), amount=D("200.00"), actor="t", refunded_at=april)
    clicked_in_april = lead_from(business, sources["fb"], at=april)
    pay(clicked_in_april, "300.00", at=april + timedelta(days=1))

    def month(start, end):
        return revenue_report([business.pk], currency="USD", since=start, until=end)

    in_march = month(march.replace(day=1), april.replace(day=1))
    in_april = month(april.replace(day=1), april.replace(day=30))
    gads_march, gads_april = row(in_march, "gads"), row(in_april, "gads")
    assert (gads_march.net, gads_march.net_by_click) == (D("0"), D("1000.00"))
    assert (gads_march.collected_by_click, gads_march.refunded_by_click) == (D("1200.00"), D("200.00"))
    assert (gads_april.net, gads_april.net_by_click) == (D("1000.00"), D("0"))
    assert (row(in_april, "fb").net, row(in_april, "fb").net_by_click) == (D("300.00"), D("300.00"))
    # Over all time the two views agree, to the cent.
    everything = revenue_report([business.pk], currency="USD")
    assert everything.totals.net == everything.totals.net_by_click == D("1300.00")


def test_a_repeat_customer_is_not_credited_to_the_campaign_unless_asked(business, sources):
    first = lead_from(business, sources["gads"], campaign="spring", at=timezone.now() - timedelta(days=60))
    pay(first, "500.00", at=timezone.now() - timedelta(days=50))
    walk(first, Stage.CONTACTED, Stage.QUALIFIED, Stage.LOST)
    # The same person again, through a new click of another campaign.
    again = lead_open(
        contact=first.contact,
        actor="t",
        source=sources["gads"],
        received_at=timezone.now() - timedelta(days=5),
        touch={"channel": "form", "campaign_id": "fall"},
    )
    pay(again, "800.00")
    newcomer = lead_from(business, sources["gads"], campaign="fall")
    pay(newcomer, "100.00")

    report = revenue_report([business.pk], currency="USD", by="campaign")
    assert {r.key: (r.leads, r.net, r.repeat_leads) for r in report.rows} == {
        "spring": (1, D("500.00"), 0),
        "fall": (1, D("100.00"), 0),
        "(repeat customer)": (1, D("800.00"), 1),
    }
    assert report.totals.net == D("1400.00")  # reconciles still
    included = revenue_report([business.pk], currency="USD", by="campaign", repeat="include")
    assert {r.key: (r.leads, r.net, r.repeat_leads) for r in included.rows} == {
        "spring": (1, D("500.00"), 0),
        "fall": (2, D("900.00"), 1),
    }

    client = APIClient()
    manager = member_create(business, Role.MANAGER, username="mia")
    client.force_authenticate(manager.user)
    body = client.get("/api/v1/reports/revenue/", {"by": "campaign"}).json()
    assert body["repeat"] == "exclude"
    assert {r["key"]: r["repeat_leads"] for r in body["rows"]} == {"spring": 0, "fall": 0, "(repeat customer)": 1}
    fall = next(r for r in body["rows"] if r["key"] == "fall")
    assert {"collected", "net", "collected_by_click", "refunded_by_click", "net_by_click"} <= set(fall)
    body = client.get("/api/v1/reports/revenue/", {"by": "campaign", "repeat": "include"}).json()
    assert next(r for r in body["rows"] if r["key"] == "fall")["net"] == "900.00"
    assert client.get("/api/v1/reports/revenue/", {"repeat": "sometimes"}).status_code == 400


def test_a_period_and_the_one_before_in_one_query_are_the_two_reports(business, sources):
    """The revenue page's headlines compare with the period before, counted in
    the page's own query: every row of both periods, every grouping, equals
    what two separate reports count, by-click money included."""
    start = datetime(2026, 4, 1, tzinfo=UTC)
    middle, end = start + timedelta(days=10), start + timedelta(days=20)
    booked = (Stage.CONTACTED, Stage.BOOKED)
    early = walk(lead_from(business, sources["gads"], at=start + timedelta(days=2), campaign="c1"), *booked)
    pay(early, "500.00", at=middle + timedelta(days=3))  # clicked before, paid in the later period
    late = walk(lead_from(business, sources["fb"], at=middle + timedelta(days=1), campaign="c2"), *booked)
    pay(late, "120.00", at=middle + timedelta(days=2))

    with CaptureQueriesContext(connection) as queries:
        now, before = revenue_reports_and_before(
            [business.pk], currency="USD", bys=("campaign", "source"), since=middle, until=end
        )
    assert len(queries.captured_queries) == 1
    for by in ("campaign", "source"):
        alone_now = revenue_report([business.pk], currency="USD", by=by, since=middle, until=end)
        alone_before = revenue_report([business.pk], currency="USD", by=by, since=start, until=middle)
        assert [r.as_dict() for r in now[by].rows] == [r.as_dict() for r in alone_now.rows]
        assert [r.as_dict() for r in before[by].rows] == [r.as_dict() for r in alone_before.rows]
        assert (before[by].since, before[by].until) == (start, middle)
    assert (row(before["campaign"], "c1").net, row(before["campaign"], "c1").net_by_click) == (D("0"), D("500.00"))
    assert (row(now["campaign"], "c1").net, row(now["campaign"], "c1").net_by_click) == (D("500.00"), D("0"))
