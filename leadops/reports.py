"""The reporting pages of the back office: the daily brief, the
manager exception report (with CSV), the funnel with its charts, the lead
trace and the leak audit.

Staff login; every page reads only what the user may see (`crm.selectors`):
owners and managers their businesses, a setter their own leads. Thin views:
parse the filters, call one reporting function, render.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, cast
from zoneinfo import ZoneInfo

from django import forms
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, Max, Q, QuerySet, Sum
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from agents.reporting.daily_brief import BRIEF_ROLES, KINDS, brief_build, brief_text
from agents.reporting.exception_words import kind_words
from agents.reporting.funnel import GROUPS, PERIODS, STAGES, funnel_report
from agents.reporting.pipeline_qa import IN_FLIGHT, QA_KINDS, STUCK_SEND
from agents.reporting.trace import KEYS, QUESTIONS, LeakAudit, lead_for_trace, lead_trace, leak_audit
from approvals.models import ApprovalRequest
from crm.exports import XLSX_TYPE, SafeCsvWriter, xlsx_bytes
from crm.figures import Figure, before_words, figure
from crm.models import (
    Business,
    Campaign,
    ExceptionItem,
    InboundEvent,
    LeadTouch,
    Message,
    RejectedDelivery,
    TeamMember,
)
from crm.permissions import business_ids_where, can_anywhere
from crm.selectors import lead_list_visible, scoped
from leadops.charts import bar_chart, percent, rate_figure, seconds

DEFAULT_DAYS = 90
EXCEPTION_WINDOW = timedelta(days=7)
APPROVAL_WAIT = timedelta(hours=24)
PAGE_SIZE = 50
# Public id prefix -> the admin list that finds it by `?q=<id>`.
ID_ADMIN = {
    "tch": "leadtouch",
    "evt": "inboundevent",
    "cev": "consentevent",
    "tm": "teammember",
    "task": "task",
    "enr": "enrollment",
    "appt": "appointment",
    "est": "estimate",
    "job": "job",
    "inv": "invoice",
    "pay": "payment",
    "rfnd": "refund",
    "msg": "message",
    "rcpt": "receipt",
    "call": "call",
}


def visible_businesses(user: Any) -> QuerySet[Business]:
    """The businesses whose reports `user` may read (their leaders' only)."""
    allowed = business_ids_where(user, "report.view")
    qs = Business.objects.all() if allowed is None else Business.objects.filter(pk__in=allowed)
    return qs.order_by("name")


def _require_reports(request: HttpRequest) -> None:
    if not can_anywhere(request.user, "report.view"):
        raise PermissionDenied("reports are for the owners and managers of a business")


class ReportForm(forms.Form):
    business = forms.ChoiceField(required=False)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), help_text="exclusive")
    period = forms.ChoiceField(choices=[(p, p) for p in PERIODS], required=False, initial="month")
    by = forms.ChoiceField(choices=[(g, g) for g in GROUPS], required=False, initial="source")

    def __init__(self, data: Any, businesses: list[Business]) -> None:
        super().__init__(data)
        self.businesses = {b.public_id: b for b in businesses}
        self.fields["business"].choices = [("", "all my businesses")] + [(b.public_id, b.name) for b in businesses]  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("since") and data.get("until") and data["since"] >= data["until"]:
            raise forms.ValidationError("'since' must be before 'until'")
        return data


@dataclass
class Filters:
    business: Business | None
    tz: ZoneInfo
    since: datetime
    until: datetime
    period: str
    by: str


def _filters(request: HttpRequest, businesses: list[Business]) -> tuple[ReportForm, Filters | None]:
    form = ReportForm(request.GET, businesses)
    if not form.is_valid():
        return form, None
    data = form.cleaned_data
    business = form.businesses.get(data.get("business") or "")
    # A business's report counts its own days; across businesses, the reader's.
    tz = ZoneInfo(business.timezone) if business else timezone.get_current_timezone()
    today = timezone.now().astimezone(tz).date()
    since_day: date = data.get("since") or today - timedelta(days=DEFAULT_DAYS)
    until_day: date = data.get("until") or today + timedelta(days=1)
    return form, Filters(
        business=business,
        tz=tz,
        since=datetime.combine(since_day, time.min, tzinfo=tz),
        until=datetime.combine(until_day, time.min, tzinfo=tz),
        period=data.get("period") or "month",
        by=data.get("by") or "source",
    )


def _scoped_leads(request: HttpRequest, filters: Filters) -> Any:
    leads = lead_list_visible(request.user, "report.view")
    return leads.filter(business=filters.business) if filters.business else leads


def evidence_link(public_id: str) -> str:
    prefix = public_id.split("_", 1)[0]
    if prefix == "lead":
        return reverse("lead-trace", args=[public_id])
    model = ID_ADMIN.get(prefix)
    if model is None:
        return ""
    try:
        return reverse(f"admin:crm_{model}_changelist") + f"?q={public_id}"
    except NoReverseMatch:
        return ""


# -------------------------------------------------------------------- brief


@staff_member_required
def brief_page(request: HttpRequest) -> HttpResponse:
    """Today's brief for each of the user's memberships (the same as the email)."""
    members = TeamMember.objects.filter(
        user_id=cast(int, request.user.pk), is_active=True, role__in=BRIEF_ROLES
    ).select_related("business", "user")
    now = timezone.now()
    zone = timezone.get_current_timezone()
    briefs = [brief_build(m, now=now, zone=zone) for m in members]
    return render(
        request,
        "leadops/reports/brief.html",
        {
            "title": "Daily brief",
            "briefs": [{"brief": b, "text": brief_text(b), "kinds": KINDS} for b in briefs],
        },
    )


# --------------------------------------------------------------- exceptions


@dataclass(frozen=True)
class ExceptionRow:
    """One item as the manager reads it: the person and campaign by name, the
    thread to open, what to do next in words."""

    item: ExceptionItem
    what: str
    next_step: str
    person: str
    campaign: str
    owner: str


def exception_rows_in_words(items: list[ExceptionItem]) -> list[ExceptionRow]:
    """The page's items in words: two queries for the page (first touches,
    campaign names), whatever its length."""
    lead_ids = [i.lead_id for i in items if i.lead_id]
    touches: dict[int, LeadTouch] = {}
    for first in LeadTouch.objects.filter(lead_id__in=lead_ids).order_by("lead_id", "received_at", "pk"):
        touches.setdefault(first.lead_id, first)
    campaign_ids = {t.campaign_id for t in touches.values() if t.campaign_id}
    names = {
        (business_id, campaign_id): name
        for business_id, campaign_id, name in Campaign.objects.filter(
            business_id__in={i.business_id for i in items}, campaign_id__in=campaign_ids
        ).values_list("business_id", "campaign_id", "name")
        if name
    }
    rows = []
    for item in items:
        words = kind_words(item.kind)
        touch = touches.get(item.lead_id) if item.lead_id is not None else None
        campaign = ""
        if touch is not None and touch.campaign_id:
            campaign = names.get((item.business_id, touch.campaign_id)) or touch.campaign_id
        person = ""
        if item.lead is not None:
            person = item.lead.contact.name or item.lead.public_id
        owner = ""
        if item.owner is not None:
            owner = item.owner.user.get_full_name() or item.owner.user.get_username()
        rows.append(ExceptionRow(item, words.label, words.next_step, person, campaign, owner))
    return rows


class ExceptionFilterForm(forms.Form):
    business = forms.ChoiceField(required=False)
    kind = forms.CharField(required=False)
    status = forms.ChoiceField(
        choices=[("open", "open"), ("resolved", "resolved"), ("all", "all")], required=False, initial="open"
    )
    owner = forms.CharField(required=False, help_text="a username, or 'none'")

    def __init__(self, data: Any, businesses: list[Business]) -> None:
        super().__init__(data)
        self.fields["business"].choices = [("", "all my businesses")] + [(b.public_id, b.name) for b in businesses]  # type: ignore[attr-defined]


def _exception_data(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    businesses = list(visible_businesses(user))
    form = ExceptionFilterForm(request.GET, businesses)
    form.is_valid()
    data = form.cleaned_data if form.is_valid() else {}
    now = timezone.now()
    since = now - EXCEPTION_WINDOW
    base = scoped(ExceptionItem.objects.all(), user, lead_path="lead")
    business_id = data.get("business") or ""
    if business_id:
        base = base.filter(business__public_id=business_id)
    status = data.get("status") or "open"
    if status != "all":
        base = base.filter(status=status)
    owner = data.get("owner") or ""
    if owner == "none":
        base = base.filter(owner__isnull=True)
    elif owner:
        base = base.filter(owner__user__username=owner)
    counts = list(base.values("kind").annotate(n=Count("pk")).order_by("-n", "kind"))
    items = base.filter(kind=data["kind"]) if data.get("kind") else base
    items = items.select_related("lead__contact", "owner__user", "business").order_by("-detected_at", "-pk")

    def in_business(qs: QuerySet[Any], field: str = "business__public_id") -> QuerySet[Any]:
        return qs.filter(**{field: business_id}) if business_id else qs

    blocked = list(
        in_business(scoped(Message.objects.filter(status="blocked", created_at__gte=since), user, lead_path="lead"))
        .values("block_reason")
        .annotate(n=Count("pk"))
        .order_by("-n", "block_reason")
    )
    # Sends in flight longer than Pipeline QA allows, and failed sends of the window, by status and error.
    in_flight = Coalesce("claimed_at", "queued_at", "created_at")
    stuck_or_failed = Q(status__in=IN_FLIGHT, since__lt=now - STUCK_SEND) | Q(status="failed", created_at__gte=since)
    sends = list(
        in_business(scoped(Message.objects.filter(direction="out"), user, lead_path="lead"))
        .alias(since=in_flight)
        .filter(stuck_or_failed)
        .values("status", "error_code")
        .annotate(n=Count("pk"))
        .order_by("-n", "status", "error_code")
    )
    failed_events = in_business(scoped(InboundEvent.objects.filter(status="failed"), user)).defer("body", "headers")
    rejections = list(
        in_business(scoped(RejectedDelivery.objects.filter(day__gte=since.date()), user))
        .values("provider", "source__key")
        .annotate(n=Sum("count"), last=Max("last_at"))
        .order_by("-n")
    )
    waiting = in_business(
        scoped(
            ApprovalRequest.objects.filter(status="pending", created_at__lt=now - APPROVAL_WAIT),
            user,
            lead_path="lead",
        )
    ).select_related("lead")
    return {
        "form": form,
        "counts": counts,
        "items": items,
        "blocked": blocked,
        "sends": sends,
        "failed_events": failed_events.select_related("source").order_by("-received_at", "-pk"),
        "rejections": rejections,
        "waiting": waiting.order_by("created_at", "pk"),
        "since": since,
        "qa_kinds": QA_KINDS,
    }


def _exception_rows(data: dict[str, Any]) -> Iterator[list[Any]]:
    # Plain tuples from a server-side cursor, 2,000 at a time: memory stays
    # bounded and no model instance is built per row (90,000 items streamed
    # in about a second instead of 11).
    yield ["section", "kind", "subject", "lead", "owner", "detail", "at", "count", "status"]
    items = data["items"].values_list(
        "kind", "subject", "lead__public_id", "owner__user__username", "detail", "detected_at", "status"
    )
    for kind, subject, lead, owner, detail, at, status in items.iterator(chunk_size=2000):
        yield ["exception", kind, subject, lead or "", owner or "", detail, at, 1, status]
    for row in data["blocked"]:
        yield ["blocked_send", row["block_reason"], "", "", "", "", "", row["n"], ""]
    for row in data["sends"]:
        yield ["stuck_or_failed_send", row["status"], "", "", "", row["error_code"], "", row["n"], row["status"]]
    events = data["failed_events"].values_list("provider", "kind", "public_id", "error", "received_at", "status")
    for provider, kind, public_id, error, at, status in events.iterator(chunk_size=2000):
        yield ["failed_event", f"{provider}:{kind}", public_id, "", "", error[:300], at, 1, status]
    for row in data["rejections"]:
        yield [
            "rejected_signature",
            row["provider"],
            row["source__key"] or "",
            "",
            "",
            "",
            row["last"],
            row["n"],
            "",
        ]
    for a in data["waiting"]:
        yield [
            "approval_waiting",
            a.kind,
            a.public_id,
            a.lead.public_id if a.lead else "",
            "",
            a.summary,
            a.created_at,
            1,
            a.status,
        ]


def _csv_times(row: list[Any]) -> list[Any]:
    # The CSV's times stay ISO 8601 in UTC, as they always were.
    return [value.isoformat() if isinstance(value, datetime) else value for value in row]


class _Echo:
    def write(self, value: str) -> str:
        return value


@staff_member_required
def exceptions_page(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """The manager's exception queue: Pipeline QA and routing items, blocked
    sends, stuck and failed sends, failed inbound events, rejected signatures,
    approvals waiting."""
    _require_reports(request)
    data = _exception_data(request)
    export = request.GET.get("format")
    if export in ("csv", "xlsx") and not can_anywhere(request.user, "csv.export"):
        raise PermissionDenied("you may not export")
    if export == "csv":
        writer = SafeCsvWriter(_Echo())
        lines = (writer.writerow(_csv_times(row)) for row in _exception_rows(data))
        streamed = StreamingHttpResponse(lines, content_type="text/csv; charset=utf-8")
        streamed["Content-Disposition"] = 'attachment; filename="exceptions.csv"'
        return streamed
    if export == "xlsx":
        rows = _exception_rows(data)  # read as written: the sheet streams to disk, row by row
        sheet = HttpResponse(xlsx_bytes("Exceptions", next(rows), rows), content_type=XLSX_TYPE)
        sheet["Content-Disposition"] = 'attachment; filename="exceptions.xlsx"'
        return sheet
    page = Paginator(data["items"], PAGE_SIZE).get_page(request.GET.get("page"))
    in_words = exception_rows_in_words(list(page))
    query = request.GET.copy()
    query["format"] = "csv"
    query.pop("page", None)
    xlsx = query.copy()
    xlsx["format"] = "xlsx"
    counts = [{**c, "label": kind_words(c["kind"]).label} for c in data["counts"]]
    total_open, failed_total = sum(c["n"] for c in data["counts"]), data["failed_events"].count()
    return render(
        request,
        "leadops/reports/exceptions.html",
        {
            **data,
            "title": "Exception report",
            # A queue is read as it stands now: no earlier period to compare with.
            "figures": [
                figure("open", "Open exceptions", total_open),
                figure("failed_events", "Failed inbound events", failed_total),
            ],
            "chart": bar_chart(
                [(c["label"], float(c["n"]), f"{c['n']:,}") for c in counts],
                chart_id="exceptions-chart",
                title="Exceptions by kind",
                color="#ba2121",
            ),
            "stuck_minutes": int(STUCK_SEND.total_seconds() // 60),
            "page": page,
            "rows": in_words,
            "counts": counts,
            "failed_total": failed_total,
            "failed_events": list(data["failed_events"][:20]),
            "waiting": list(data["waiting"][:50]),
            "csv_query": query.urlencode(),
            "xlsx_query": xlsx.urlencode(),
            "total_open": total_open,
        },
    )


# ------------------------------------------------------------------ funnel


def _funnel_cells(row: Any) -> dict[str, Any]:
    shares = dict(row.conversions)
    return {
        "key": row.key,
        "cells": [(row.counts[key], percent(shares[key]) if key in shares else "") for key, _ in STAGES],
        "close": percent(row.close_rate),
    }


@staff_member_required
def funnel_page(request: HttpRequest) -> HttpResponse:
    _require_reports(request)
    businesses = list(visible_businesses(request.user))
    form, filters = _filters(request, businesses)
    context: dict[str, Any] = {"title": "Funnel", "form": form, "stages": STAGES}
    if filters is None:
        return render(request, "leadops/reports/funnel.html", context, status=400)
    funnel = funnel_report(
        _scoped_leads(request, filters),
        since=filters.since,
        until=filters.until,
        period=filters.period,
        by=filters.by,
        tz=filters.tz,
    )
    export = request.GET.get("format")
    if export in ("csv", "xlsx"):
        return _funnel_export(request, funnel, export)
    # The period before, of the same length, counted by the same function, so
    # a headline's change compares like with like.
    length = filters.until - filters.since
    previous = funnel_report(
        _scoped_leads(request, filters),
        since=filters.since - length,
        until=filters.since,
        period=filters.period,
        by=filters.by,
        tz=filters.tz,
    )
    total = funnel.total
    conversions = dict(total.conversions)
    bars = [
        (
            label,
            float(total.counts[key]),
            f"{total.counts[key]}" + (f" · {percent(conversions[key])}" if key in conversions else ""),
        )
        for key, label in STAGES
    ]
    speed = [
        (row.key, row.median_seconds or 0.0, f"{seconds(row.median_seconds)} (p90 {seconds(row.p90_seconds)})")
        for row in funnel.speed_by_source
    ]
    context.update(
        funnel=funnel,
        filters=filters,
        chart=bar_chart(bars, chart_id="funnel-chart", title="Leads reaching each stage"),
        speed_chart=bar_chart(speed, chart_id="speed-chart", title="Median speed to lead by source", color="#79aec8")
        if speed
        else None,
        rates={
            "show": percent(funnel.rates.show_rate),
            "close": percent(total.close_rate),
            "recovery": percent(funnel.rates.recovery_rate),
        },
        table=[_funnel_cells(row) for row in [*funnel.by_key, total]],
        figures=funnel_figures(total.counts, previous.total.counts, before_words(length)),
        exports={kind: _with_format(request, kind) for kind in ("csv", "xlsx")},
    )
    return render(request, "leadops/reports/funnel.html", context)


# The funnel's headline stages, with the daily brief's words for them.
FUNNEL_HEADLINES = (("leads", "New leads"), ("booked", "Booked"), ("won", "Won"), ("paid", "Paid"))


def funnel_figures(counts: dict[str, int], previous: dict[str, int], against: str) -> list[Figure]:
    """The headline stages from the funnel's own totals (the table's last
    row), each against the previous period's."""
    return [figure(key, label, counts[key], (previous[key], against)) for key, label in FUNNEL_HEADLINES]


def _with_format(request: HttpRequest, kind: str) -> str:
    query = request.GET.copy()
    query["format"] = kind
    return query.urlencode()


def _funnel_table(funnel: Any) -> list[list[Any]]:
    """The funnel's table: one row per key (and period, when grouped by one)
    and the total, each stage's count and the close rate (a fraction)."""
    lines: list[list[Any]] = [["key", "period", *(key for key, _ in STAGES), "close_rate"]]
    for row in [*funnel.by_key, funnel.total]:
        rate = row.close_rate
        lines.append([row.key, row.period or "", *(row.counts[key] for key, _ in STAGES), "" if rate is None else rate])
    return lines


def _funnel_export(request: HttpRequest, funnel: Any, kind: str) -> HttpResponse:
    if not can_anywhere(request.user, "csv.export"):
        raise PermissionDenied("you may not export")
    header, *rows = _funnel_table(funnel)
    if kind == "xlsx":
        response = HttpResponse(xlsx_bytes("Funnel", header, rows), content_type=XLSX_TYPE)
    else:
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        SafeCsvWriter(response).writerows([header, *(_csv_times(row) for row in rows)])
    response["Content-Disposition"] = f'attachment; filename="funnel-by-{funnel.by}.{kind}"'
    return response


# ------------------------------------------------------------------- trace


@staff_member_required
def trace_page(request: HttpRequest, public_id: str) -> HttpResponse:
    # The trace answers "was it paid?": it reads as much as the money does.
    lead = lead_for_trace(lead_list_visible(request.user, "payment.view"), public_id)
    if lead is None:
        raise Http404("no such lead")
    trace = lead_trace(lead, tz=timezone.get_current_timezone())
    answers = [
        {"a": a, "links": [(e, evidence_link(e)) for e in a.evidence], "is_break": a.key == trace.first_break}
        for a in trace.questions
    ]
    return render(
        request,
        "leadops/reports/trace.html",
        {"title": f"Trace — {lead.public_id}", "lead": lead, "trace": trace, "answers": answers},
    )


# -------------------------------------------------------------- leak audit


@staff_member_required
def leaks_page(request: HttpRequest) -> HttpResponse:
    _require_reports(request)
    businesses = list(visible_businesses(request.user))
    form, filters = _filters(request, businesses)
    context: dict[str, Any] = {"title": "Leak audit", "form": form, "questions": QUESTIONS}
    if filters is None:
        return render(request, "leadops/reports/leaks.html", context, status=400)
    audit = leak_audit(
        _scoped_leads(request, filters), since=filters.since, until=filters.until, period=filters.period, tz=filters.tz
    )
    length = filters.until - filters.since
    previous = leak_audit(
        _scoped_leads(request, filters), since=filters.since - length, until=filters.since, period=filters.period
    )
    bars = [(key, float(audit.totals[key]), str(audit.totals[key])) for key in KEYS]
    bars.append(("no break", float(audit.totals[""]), str(audit.totals[""])))
    context.update(
        audit=audit,
        filters=filters,
        keys=KEYS,
        rows=[{"row": r, "cells": [r.breaks.get(k, 0) for k in KEYS]} for r in audit.rows],
        figures=leak_figures(audit, previous, before_words(length)),
        chart=bar_chart(bars, chart_id="leak-chart", title="First break, all leads", color="#ba2121"),
    )
    return render(request, "leadops/reports/leaks.html", context)


def leak_figures(audit: LeakAudit, previous: LeakAudit, against: str) -> list[Figure]:
    """The audit's totals row as headlines: how many leads, how many stop
    answering somewhere, and that as a share (its change in points)."""

    def broken(a: LeakAudit) -> int:
        return a.leads - a.totals[""]

    def share(a: LeakAudit) -> float | None:
        return broken(a) / a.leads if a.leads else None

    return [
        figure("leads", "Leads", audit.leads, (previous.leads, against)),
        figure("broken", "With a break", broken(audit), (broken(previous), against), lower_is_better=True),
        rate_figure("share", "Share with a break", share(audit), share(previous), against, lower_is_better=True),
    ]
