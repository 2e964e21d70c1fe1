"""`/reports/revenue/`: revenue by source, campaign, ad or owner (the
report itself is `crm.attribution`). `revenue_for` validates a query and
computes it, for this endpoint and for the revenue page alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from crm.api.common import AUTH_ERRORS, ErrorSerializer
from crm.attribution import (
    BY_CHOICES,
    REPEAT_CHOICES,
    TOUCH_CHOICES,
    RevenueReport,
    revenue_reports,
    revenue_reports_and_before,
)
from crm.models import Business
from crm.permissions import business_ids_where


class RevenueQuerySerializer(serializers.Serializer):
    business = serializers.CharField(
        required=False, allow_blank=True, help_text="A business slug or public id; empty: all the user's businesses"
    )
    by = serializers.ChoiceField(choices=BY_CHOICES, required=False, allow_blank=True, help_text="Default: source")
    touch = serializers.ChoiceField(
        choices=TOUCH_CHOICES,
        required=False,
        allow_blank=True,
        help_text="Attribute each lead by its first (default) or latest touch",
    )
    since = serializers.CharField(
        required=False, allow_blank=True, help_text="A date (local to the business) or an ISO time"
    )
    until = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="A date includes that whole local day; an ISO time is an exclusive end",
    )
    currency = serializers.CharField(
        required=False, allow_blank=True, max_length=3, help_text="Default: the currency of the businesses"
    )
    repeat = serializers.ChoiceField(
        choices=REPEAT_CHOICES,
        required=False,
        allow_blank=True,
        help_text="Repeat customers (a contact who paid for an earlier job): counted apart under "
        "'(repeat customer)' (exclude, the default) or credited to their touch (include)",
    )


class RevenueRowSerializer(serializers.Serializer):
    key = serializers.CharField()
    leads = serializers.IntegerField()
    contacted = serializers.IntegerField()
    booked = serializers.IntegerField()
    held = serializers.IntegerField()
    estimates = serializers.IntegerField()
    estimates_amount = serializers.DecimalField(max_digits=14, decimal_places=2)
    won = serializers.IntegerField()
    jobs_completed = serializers.IntegerField()
    invoiced = serializers.DecimalField(max_digits=14, decimal_places=2)
    collected = serializers.DecimalField(max_digits=14, decimal_places=2)
    refunded = serializers.DecimalField(max_digits=14, decimal_places=2)
    net = serializers.DecimalField(max_digits=14, decimal_places=2)
    repeat_leads = serializers.IntegerField(help_text="Leads of repeat customers among this row's")
    collected_by_click = serializers.DecimalField(
        max_digits=14, decimal_places=2, help_text="Payments of the leads whose click fell in the period, whenever paid"
    )
    refunded_by_click = serializers.DecimalField(
        max_digits=14, decimal_places=2, help_text="Refunds of those payments, whenever made"
    )
    net_by_click = serializers.DecimalField(max_digits=14, decimal_places=2)


class RevenueReportSerializer(serializers.Serializer):
    businesses = serializers.ListField(child=serializers.CharField())
    by = serializers.CharField()
    touch = serializers.CharField()
    repeat = serializers.CharField()
    currency = serializers.CharField()
    since = serializers.DateTimeField(allow_null=True)
    until = serializers.DateTimeField(allow_null=True)
    rows = RevenueRowSerializer(many=True)
    totals = RevenueRowSerializer()


def report_businesses(user: Any, business: str = "") -> list[Business]:
    """The businesses whose revenue `user` may read: owners and managers of a
    business (and operators). A setter reads no revenue report."""
    allowed = business_ids_where(user, "money.view")
    qs = Business.objects.all() if allowed is None else Business.objects.filter(pk__in=allowed)
    if business:
        qs = qs.filter(Q(slug=business.strip()) | Q(public_id=business.strip()))
    return list(qs.order_by("slug"))


def report_time(value: str, zone: ZoneInfo, *, end: bool = False) -> datetime | None:
    """A report bound: a date is the start of that local day (for `until`,
    the start of the next, so the day is included); an ISO time is taken as
    given (UTC when it names no zone)."""
    value = (value or "").strip()
    if not value:
        return None
    day: date | None = parse_date(value) if len(value) == 10 else None
    if day is not None:
        start = datetime.combine(day + timedelta(days=1) if end else day, time.min, tzinfo=zone)
        return start
    try:
        moment = parse_datetime(value)
    except ValueError:
        moment = None
    if moment is None:
        raise ValueError(f"{value!r} is neither a date (YYYY-MM-DD) nor an ISO time")
    return moment if timezone.is_aware(moment) else moment.replace(tzinfo=ZoneInfo("UTC"))


def revenue_for(user: Any, params: dict[str, Any]) -> tuple[RevenueReport, list[Business]]:
    """Validate the query (`ValidationError` for a bad value, `PermissionDenied`
    for a business the user may not read) and compute the report."""
    report, _, _, businesses = revenue_with(user, params)
    return report, businesses


def revenue_with(
    user: Any, params: dict[str, Any], *, also: Sequence[str] = (), before: bool = False
) -> tuple[RevenueReport, list[RevenueReport], dict[str, RevenueReport], list[Business]]:
    """`revenue_for`, and the same report grouped each way of `also` when the
    query is by first touch (the revenue page's spend section wants it by
    campaign and by source), and with `before` every grouping again for the
    period of equal length just before (empty for an open-ended period):
    one query for all, as keying the leads is most of the work. A report by
    latest touch comes without `also`."""
    query = RevenueQuerySerializer(data=params)
    query.is_valid(raise_exception=True)
    data = query.validated_data
    businesses = report_businesses(user, data.get("business") or "")
    if not businesses:
        if data.get("business"):
            raise PermissionDenied(f"no business {data['business']!r} whose revenue you may read")
        raise PermissionDenied("revenue reports are for owners and managers")
    # One business: its days. Several: the reader's (UTC for the API, which
    # speaks UTC; the viewer's on the revenue page).
    zone = ZoneInfo(businesses[0].timezone) if len(businesses) == 1 else timezone.get_current_timezone()
    try:
        since = report_time(data.get("since") or "", zone)
        until = report_time(data.get("until") or "", zone, end=True)
    except ValueError as exc:
        raise ValidationError({"since/until": [str(exc)]}) from exc
    if since and until and until <= since:
        raise ValidationError({"until": ["must be after since"]})
    currency = (data.get("currency") or "").upper()
    if not currency:
        currencies = sorted({b.currency for b in businesses})
        if len(currencies) > 1:
            raise ValidationError({"currency": [f"these businesses keep {', '.join(currencies)}: name one"]})
        currency = currencies[0]
    by, touch = data.get("by") or "source", data.get("touch") or "first"
    asked: dict[str, Any] = {
        "currency": currency,
        "bys": [by, *also] if touch == "first" else [by],
        "touch": touch,
        "repeat": data.get("repeat") or "exclude",
    }
    ids = [b.pk for b in businesses]
    earlier: dict[str, RevenueReport] = {}
    if before and since is not None and until is not None:
        reports, earlier = revenue_reports_and_before(ids, since=since, until=until, **asked)
    else:
        reports = revenue_reports(ids, since=since, until=until, **asked)
    return reports.pop(by), list(reports.values()), earlier, businesses


def report_json(report: RevenueReport, businesses: list[Business]) -> dict[str, Any]:
    return RevenueReportSerializer(
        {
            "businesses": [b.slug for b in businesses],
            "by": report.by,
            "touch": report.touch,
            "repeat": report.repeat,
            "currency": report.currency,
            "since": report.since,
            "until": report.until,
            "rows": [row.as_dict() for row in report.rows],
            "totals": report.totals.as_dict(),
        }
    ).data


class RevenueReportView(APIView):
    """Revenue by source, campaign, ad or owner: counts and money, each from
    its own records at its own time; collected is payments, net is payments
    minus refunds; a booking or an estimate is never money. Money also by the
    date of its lead's click (`*_by_click`), and repeat customers apart unless
    `repeat=include`."""

    @extend_schema(
        summary="Revenue attribution by source, campaign, ad or owner",
        parameters=[RevenueQuerySerializer],
        responses={200: RevenueReportSerializer, 400: ErrorSerializer, **AUTH_ERRORS},
    )
    def get(self, request: Request) -> Response:
        report, businesses = revenue_for(request.user, request.query_params.dict())
        return Response(report_json(report, businesses))
