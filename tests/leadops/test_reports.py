"""The reporting pages and the trace API: scoped to what the user may see,
a bounded number of queries, CSV and JSON as documented."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta

import openpyxl
import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token

from agents.reporting.funnel import STAGES
from agents.reporting.pipeline_qa import pipeline_qa_run
from approvals.services import approval_request_open
from crm.exports import XLSX_TYPE
from crm.models import InboundEvent, Lead, Message, RejectedDelivery, Role, Source
from crm.services import lead_sync
from tests.factories import member_create
from tests.helpers.reporting import (
    completed_job,
    grant_sms,
    held,
    owned,
    paid,
    sourced_lead,
    won,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def source(business) -> Source:
    return Source.objects.create(business=business, key="site", provider="website", secret="s3cret-site")


def client_for(member) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


@pytest.fixture
def world(business, source, setter, manager, other_business):
    """Leads for two setters and one in another business the users must never see."""
    sara = member_create(business, Role.SETTER, username="sara")
    mine = [owned(sourced_lead(business, source, phone=f"+1212555020{n}"), setter) for n in range(3)]
    grant_sms(mine[0])
    held(mine[0])
    completed_job(mine[0])
    paid(mine[0])
    won(mine[0])
    Lead.objects.filter(pk=mine[1].pk).update(speed_to_lead_seconds=120)
    Lead.objects.filter(pk=mine[2].pk).update(speed_to_lead_seconds=600)
    theirs = owned(sourced_lead(business, source, phone="+12125550210"), sara)
    unowned = sourced_lead(business, source, phone="+12125550211")
    hidden = sourced_lead(other_business, None, phone="+12125550212")
    Message.objects.create(
        business=business,
        lead=theirs,
        contact=theirs.contact,
        direction="out",
        channel="sms",
        status="blocked",
        block_reason="quiet_hours",
        idempotency_key="rep-blocked-1",
    )
    InboundEvent.objects.create(
        business=business,
        provider="website",
        external_id="bad-1",
        body=b"{}",
        status="failed",
        error="boom",
        received_at=timezone.now(),
    )
    Message.objects.create(
        business=business,
        lead=theirs,
        contact=theirs.contact,
        direction="out",
        channel="sms",
        status="sending",
        idempotency_key="rep-stuck-1",
        claimed_at=timezone.now() - timedelta(hours=1),
        attempts=1,
    )
    Message.objects.create(
        business=business,
        lead=theirs,
        contact=theirs.contact,
        direction="out",
        channel="sms",
        status="failed",
        error_code="gave_up",
        idempotency_key="rep-failed-1",
    )
    RejectedDelivery.objects.create(
        business=business,
        source=source,
        provider="website",
        day=timezone.now().date(),
        count=3,
        last_reason="bad bearer",
        last_at=timezone.now(),
    )
    approval = approval_request_open(
        business=business, kind="exception", summary="Out of area?", proposed_by="agent:fit"
    )
    type(approval).objects.filter(pk=approval.pk).update(created_at=timezone.now() - timedelta(days=2))
    pipeline_qa_run(now=timezone.now() + timedelta(hours=1))
    return {"mine": mine, "theirs": theirs, "unowned": unowned, "hidden": hidden, "sara": sara}


def test_the_exception_report_lists_every_section_in_bounded_queries(world, manager, django_assert_max_num_queries):
    client = client_for(manager)
    with django_assert_max_num_queries(20):
        response = client.get(reverse("report-exceptions"))
    assert response.status_code == 200
    page = response.content.decode()
    assert world["unowned"].public_id in page  # no_owner
    assert world["hidden"].public_id not in page  # another business
    assert "quiet_hours: <strong>1</strong>" in page
    assert "sending: <strong>1</strong>" in page and "failed (gave_up): <strong>1</strong>" in page  # stuck and failed
    assert "stuck_message" in page  # and Pipeline QA's item for the stuck one
    assert "bad-1" not in page and "boom" in page  # failed events, by public id and error
    assert "website / site: <strong>3</strong>" in page
    assert "Out of area?" in page
    kinds = {c["kind"]: c["n"] for c in response.context["counts"]}
    assert kinds["no_owner"] == 1
    # Headline first: the open items and failed events as the sections below count them, then the chart.
    figures = {f.key: f.text for f in response.context["figures"]}
    assert figures == {"open": f"{sum(kinds.values()):,}", "failed_events": f"{response.context['failed_total']:,}"}
    assert page.index('id="exception-headlines"') < page.index('id="exceptions-chart"') < page.index("exception-items")
    assert 'role="img"' in page and "visually-hidden" in page


def test_the_exception_report_filters_and_exports_csv(world, manager):
    client = client_for(manager)
    response = client.get(reverse("report-exceptions"), {"kind": "no_owner"})
    assert [i.kind for i in response.context["page"]] == ["no_owner"]
    response = client.get(reverse("report-exceptions"), {"format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.getvalue().decode())))
    assert rows[0] == ["section", "kind", "subject", "lead", "owner", "detail", "at", "count", "status"]
    sections = {r[0] for r in rows[1:]}
    assert sections == {
        "exception",
        "blocked_send",
        "stuck_or_failed_send",
        "failed_event",
        "rejected_signature",
        "approval_waiting",
    }
    no_owner = next(r for r in rows if r[1] == "no_owner")
    assert no_owner[2] == world["unowned"].public_id and no_owner[4] == "mia"


def test_the_exception_report_exports_xlsx_with_the_csv_rows_and_real_dates(world, manager):
    client = client_for(manager)
    assert 'id="xlsx-export"' in client.get(reverse("report-exceptions")).content.decode()
    as_csv = client.get(reverse("report-exceptions"), {"format": "csv"}).getvalue().decode()
    csv_rows = list(csv.reader(io.StringIO(as_csv)))

    response = client.get(reverse("report-exceptions"), {"format": "xlsx"})

    assert response["Content-Type"] == XLSX_TYPE
    sheet = openpyxl.load_workbook(io.BytesIO(response.content)).active
    rows = list(sheet.iter_rows(values_only=True))
    assert list(rows[0]) == csv_rows[0] and sheet.freeze_panes == "A2"
    assert len(rows) == len(csv_rows)
    no_owner = next(r for r in rows if r[1] == "no_owner")
    assert no_owner[2] == world["unowned"].public_id and no_owner[4] == "mia"
    assert isinstance(no_owner[6], datetime) and no_owner[7] == 1  # a date and a number, not text


def test_a_setter_cannot_export_the_exception_report_as_xlsx_either(world, setter):
    assert client_for(setter).get(reverse("report-exceptions"), {"format": "xlsx"}).status_code == 403


def test_a_setter_sees_exceptions_only_on_their_own_leads(world, setter):
    response = client_for(setter).get(reverse("report-exceptions"))
    leads = {i.lead_id for i in response.context["page"]}
    assert leads <= {lead.pk for lead in world["mine"]}
    assert response.context["failed_total"] == 0  # provider deliveries are for owners and managers


def test_the_funnel_page_draws_its_chart_in_bounded_queries(world, manager, django_assert_max_num_queries):
    client = client_for(manager)
    # Two funnels (this period and the one before, for the headlines), each a fixed number of queries.
    with django_assert_max_num_queries(15):
        response = client.get(reverse("report-funnel"), {"period": "week"})
    assert response.status_code == 200
    page = response.content.decode()
    assert '<svg id="funnel-chart"' in page and "<script" not in page.split('id="funnel-chart"')[1].split("</svg>")[0]
    total = response.context["funnel"].total.counts
    assert (total["leads"], total["held"], total["won"], total["paid"]) == (5, 1, 1, 1)
    speed = {s.key: (s.n, s.median_seconds) for s in response.context["funnel"].speed_by_source}
    assert speed == {"site": (2, 360.0)}


def test_the_funnel_headlines_are_the_tables_totals_against_the_period_before(world, business, source, manager):
    # One lead, booked, in the ten days before the page's period: the "before" side of each change.
    earlier = sourced_lead(business, source, phone="+12125550299")
    held(earlier)
    Lead.objects.filter(pk=earlier.pk).update(created_at=timezone.now() - timedelta(days=15))
    today = timezone.localdate()
    response = client_for(manager).get(
        reverse("report-funnel"), {"since": str(today - timedelta(days=9)), "until": str(today + timedelta(days=1))}
    )
    assert response.status_code == 200
    total_row = response.context["table"][-1]
    assert total_row["key"] == "all"
    totals = dict(zip([key for key, _ in STAGES], [n for n, _share in total_row["cells"]], strict=True))
    figures = {f.key: (f.label, f.text, f.change) for f in response.context["figures"]}
    assert figures == {
        "leads": ("New leads", str(totals["leads"]), "+4"),
        "booked": ("Booked", str(totals["booked"]), "same"),
        "won": ("Won", str(totals["won"]), "+1"),
        "paid": ("Paid", str(totals["paid"]), "+1"),
    }
    assert (totals["leads"], totals["booked"], totals["won"], totals["paid"]) == (5, 1, 1, 1)
    assert {c.against for f in response.context["figures"] for c in f.changes} == {"the 10 days before"}
    page = response.content.decode()
    headlines = page.split('id="funnel-headlines"')[1].split("</dl>")[0]
    assert "<dt>New leads</dt>" in headlines and '<dd class="headline-value">5</dd>' in headlines
    assert "+4 vs the 10 days before" in headlines
    assert page.index('id="funnel-headlines"') < page.index('<svg id="funnel-chart"') < page.index('id="funnel-table"')
    assert '<table class="visually-hidden chart-data" id="funnel-chart-data">' in page


def test_the_funnel_downloads_as_csv_and_xlsx_with_the_pages_counts(world, manager):
    client = client_for(manager)
    page = client.get(reverse("report-funnel"))
    assert 'id="funnel-csv"' in page.content.decode() and 'id="funnel-xlsx"' in page.content.decode()
    total = page.context["funnel"].total.counts

    as_csv = list(csv.reader(io.StringIO(client.get(reverse("report-funnel"), {"format": "csv"}).content.decode())))
    xlsx = client.get(reverse("report-funnel"), {"format": "xlsx"})
    rows = list(openpyxl.load_workbook(io.BytesIO(xlsx.content)).active.iter_rows(values_only=True))

    assert as_csv[0] == list(rows[0]) and as_csv[0][:3] == ["key", "period", "leads"]
    stages = as_csv[0][2:-1]
    assert as_csv[-1][0] == rows[-1][0] == page.context["funnel"].total.key
    assert [int(n) for n in as_csv[-1][2:-1]] == list(rows[-1][2:-1]) == [total[key] for key in stages]


def test_a_setter_funnel_counts_only_their_leads(world, setter):
    response = client_for(setter).get(reverse("report-funnel"), {"by": "owner"})
    assert [r.key for r in response.context["funnel"].by_key] == ["sam"]
    assert response.context["funnel"].total.counts["leads"] == 3


def test_bad_funnel_filters_are_a_400_with_the_reason(world, manager):
    response = client_for(manager).get(reverse("report-funnel"), {"since": "2026-05-01", "until": "2026-04-01"})
    assert response.status_code == 400
    assert "&#x27;since&#x27; must be before &#x27;until&#x27;" in response.content.decode()


def test_the_leak_audit_page_counts_first_breaks(world, manager, django_assert_max_num_queries):
    client = client_for(manager)
    # The audit of this period and of the one before it (each with JIT off: two queries).
    with django_assert_max_num_queries(10):
        response = client.get(reverse("report-leaks"))
    assert response.status_code == 200
    audit = response.context["audit"]
    assert audit.leads == 5
    # The won, paid lead has no break; the others have no consent on record.
    assert {k: n for k, n in audit.totals.items() if n} == {"": 1, "may_contact": 4}
    assert '<svg id="leak-chart"' in response.content.decode()
    # The headlines are the totals row, against the period before (no leads then).
    figures = {f.key: (f.text, f.change) for f in response.context["figures"]}
    assert figures == {"leads": ("5", "+5"), "broken": ("4", "+4"), "share": ("80%", "—")}
    assert 'id="leak-headlines"' in response.content.decode()


def test_the_trace_page_links_the_evidence(world, manager, django_assert_max_num_queries):
    lead = world["mine"][0]
    client = client_for(manager)
    with django_assert_max_num_queries(30):
        response = client.get(reverse("lead-trace", args=[lead.public_id]))
    assert response.status_code == 200
    page = response.content.decode()
    assert "No break" in page
    payment = lead.payments.get()
    assert f'href="/admin/crm/payment/?q={payment.public_id}"' in page


def test_the_trace_page_of_someone_elses_lead_is_not_found(world, setter):
    client = client_for(setter)
    assert client.get(reverse("lead-trace", args=[world["theirs"].public_id])).status_code == 404
    assert client.get(reverse("lead-trace", args=[world["hidden"].public_id])).status_code == 404


def test_the_brief_page_shows_the_users_brief(world, setter, django_assert_max_num_queries):
    client = client_for(setter)
    with django_assert_max_num_queries(25):
        response = client.get(reverse("report-brief"))
    assert response.status_code == 200
    assert 'id="daily-brief"' in response.content.decode()
    assert [entry["brief"].member for entry in response.context["briefs"]] == [setter]


def test_the_report_pages_need_a_staff_login(world):
    for name in ("report-brief", "report-exceptions", "report-funnel", "report-leaks"):
        response = Client().get(reverse(name))
        assert response.status_code == 302 and "/admin/login/" in response["Location"]


# ----------------------------------------------------------------- the API


def api_for(member) -> Client:
    token = Token.objects.create(user=member.user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}")


def test_the_trace_api_answers_the_seven_questions(world, manager, django_assert_max_num_queries):
    lead = world["unowned"]
    client = api_for(manager)
    with django_assert_max_num_queries(25):
        response = client.get(f"/api/v1/leads/{lead.public_id}/trace/")
    assert response.status_code == 200
    body = response.json()
    assert body["lead"] == lead.public_id
    assert [q["key"] for q in body["questions"]] == [
        "source",
        "may_contact",
        "next_action_owner",
        "stop_rule",
        "appointment_happened",
        "job_completed",
        "payment_collected",
    ]
    assert set(body["questions"][0]) == {"key", "question", "answer", "ok", "evidence"}
    assert body["questions"][0]["evidence"] == [lead.touches.get().public_id]
    # No consent on record is the first thing this lead's record cannot answer.
    assert body["first_break"] == "may_contact"


def test_the_trace_api_follows_the_lead_scoping_and_error_shape(world, setter):
    client = api_for(setter)
    assert client.get(f"/api/v1/leads/{world['mine'][0].public_id}/trace/").json()["first_break"] is None
    response = client.get(f"/api/v1/leads/{world['theirs'].public_id}/trace/")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    response = Client().get(f"/api/v1/leads/{world['theirs'].public_id}/trace/")
    assert response.status_code == 401
    assert response.json()["error"] == "not_authenticated"


def test_the_trace_is_in_the_openapi_schema(db, manager):
    response = client_for(manager).get("/api/schema/", {"format": "json"})
    schema = response.json()
    operation = schema["paths"]["/api/v1/leads/{id}/trace/"]["get"]
    assert operation["operationId"] == "leads_trace_retrieve"
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    component = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert set(component["properties"]) == {"lead", "questions", "first_break"}


def test_a_closed_lost_lead_needs_no_next_action(world, manager):
    lead = world["theirs"]
    lead_sync.lead_transition(lead, "lost", actor="mia", reason="went elsewhere")
    body = api_for(manager).get(f"/api/v1/leads/{lead.public_id}/trace/").json()
    owner_q = body["questions"][2]
    assert owner_q["ok"] is True and owner_q["answer"].startswith("closed as lost")
