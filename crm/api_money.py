"""The money records and the revenue report in the read API (its OpenAPI schema: /api/schema/).

Appointments, estimates, jobs, invoices, payments and refunds: each its own
record with its own times; money as a string decimal beside its currency.
Records follow their lead's visibility (`crm.selectors.scoped`); a payment
no lead explains yet is seen by the business's owners and managers only.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from crm.api import AUTH_ERRORS, ErrorSerializer, ReadViewSet, detail_schema, list_schema, public_id_parameter
from crm.models import Appointment, Business, Estimate, Invoice, Job, Payment, Refund
from crm.permissions import business_ids_where
from crm.reports import BY_CHOICES, TOUCH_CHOICES, RevenueReport, revenue_report
from crm.selectors import scoped


def _money() -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=12, decimal_places=2, read_only=True, coerce_to_string=True)


class AppointmentSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    lead = public_id_parameter("lead.public_id")
    assigned_to = serializers.CharField(source="assigned_to.user.username", read_only=True, allow_null=True)

    class Meta:
        model = Appointment
        fields = ["id", "lead", "status", "starts_at", "ends_at", "assigned_to", "outcome_at", "created_at"]
        read_only_fields = fields


class EstimateSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    lead = public_id_parameter("lead.public_id")
    amount = _money()

    class Meta:
        model = Estimate
        fields = ["id", "lead", "status", "amount", "currency", "sent_at", "decided_at", "expires_at", "created_at"]
        read_only_fields = fields


class JobSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    lead = public_id_parameter("lead.public_id")
    estimate = public_id_parameter("estimate.public_id", allow_null=True)

    class Meta:
        model = Job
        fields = ["id", "lead", "estimate", "status", "scheduled_for", "completed_at", "created_at"]
        read_only_fields = fields


class InvoiceSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    lead = public_id_parameter("lead.public_id")
    job = public_id_parameter("job.public_id", allow_null=True)
    amount = _money()

    class Meta:
        model = Invoice
        fields = ["id", "lead", "job", "number", "status", "amount", "currency", "issued_at", "due_at", "created_at"]
        read_only_fields = fields


class PaymentSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    lead = public_id_parameter("lead.public_id", allow_null=True)
    invoice = public_id_parameter("invoice.public_id", allow_null=True)
    job = public_id_parameter("job.public_id", allow_null=True)
    amount = _money()

    class Meta:
        model = Payment
        fields = [
            "id",
            "lead",
            "invoice",
            "job",
            "amount",
            "currency",
            "provider",
            "external_id",
            "match_status",
            "match_candidates",
            "received_at",
            "created_at",
        ]
        read_only_fields = fields


class RefundSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    lead = public_id_parameter("payment.lead.public_id", allow_null=True)
    payment = public_id_parameter("payment.public_id")
    amount = _money()

    class Meta:
        model = Refund
        fields = ["id", "lead", "payment", "amount", "currency", "provider", "external_id", "reason", "refunded_at"]
        read_only_fields = fields


class LeadRecordFilterSerializer(serializers.Serializer):
    lead = serializers.CharField(required=False, allow_blank=True, help_text="The lead's public id")


def _records_viewset(
    model: type[Any],
    serializer: type[serializers.ModelSerializer],
    *,
    lead_path: str,
    related: list[str],
    order: list[str],
    label: str,
) -> type[ReadViewSet[Any]]:
    def get_queryset(self: ReadViewSet[Any]) -> QuerySet[Any]:
        return scoped(model.objects.select_related(*related), self.request.user, lead_path=lead_path)

    def filter_list(self: ReadViewSet[Any], queryset: QuerySet[Any], **filters: Any) -> QuerySet[Any]:
        if "lead" in filters:
            queryset = queryset.filter(**{f"{lead_path}__public_id": filters["lead"]})
        return queryset.order_by(*order)

    attrs = {
        "__doc__": f"{label}, following their lead's visibility.",
        "__module__": __name__,
        "queryset": model.objects.none(),
        "serializer_class": serializer,
        "filter_serializer_class": LeadRecordFilterSerializer,
        "get_queryset": get_queryset,
        "filter_list": filter_list,
    }
    viewset = type(f"{model.__name__}ViewSet", (ReadViewSet,), attrs)
    return extend_schema_view(
        list=list_schema(label, serializer, LeadRecordFilterSerializer),
        retrieve=detail_schema(f"One {model._meta.verbose_name}", serializer),
    )(viewset)


AppointmentViewSet = _records_viewset(
    Appointment,
    AppointmentSerializer,
    lead_path="lead",
    related=["lead", "assigned_to__user"],
    order=["starts_at", "pk"],
    label="Appointments",
)
EstimateViewSet = _records_viewset(
    Estimate, EstimateSerializer, lead_path="lead", related=["lead"], order=["created_at", "pk"], label="Estimates"
)
JobViewSet = _records_viewset(
    Job, JobSerializer, lead_path="lead", related=["lead", "estimate"], order=["created_at", "pk"], label="Jobs"
)
InvoiceViewSet = _records_viewset(
    Invoice, InvoiceSerializer, lead_path="lead", related=["lead", "job"], order=["created_at", "pk"], label="Invoices"
)
PaymentViewSet = _records_viewset(
    Payment,
    PaymentSerializer,
    lead_path="lead",
    related=["lead", "invoice", "job"],
    order=["received_at", "pk"],
    label="Payments (provider, external id and match status)",
)
RefundViewSet = _records_viewset(
    Refund,
    RefundSerializer,
    lead_path="payment__lead",
    related=["payment__lead"],
    order=["refunded_at", "pk"],
    label="Refunds, each linked to its payment",
)


# ---------------------------------------------------------------- the report


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


class RevenueReportSerializer(serializers.Serializer):
    businesses = serializers.ListField(child=serializers.CharField())
    by = serializers.CharField()
    touch = serializers.CharField()
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
    report = revenue_report(
        [b.pk for b in businesses],
        currency=currency,
        by=data.get("by") or "source",
        touch=data.get("touch") or "first",
        since=since,
        until=until,
    )
    return report, businesses


def report_json(report: RevenueReport, businesses: list[Business]) -> dict[str, Any]:
    return RevenueReportSerializer(
        {
            "businesses": [b.slug for b in businesses],
            "by": report.by,
            "touch": report.touch,
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
    minus refunds; a booking or an estimate is never money."""

    @extend_schema(
        summary="Revenue attribution by source, campaign, ad or owner",
        parameters=[RevenueQuerySerializer],
        responses={200: RevenueReportSerializer, 400: ErrorSerializer, **AUTH_ERRORS},
    )
    def get(self, request: Request) -> Response:
        report, businesses = revenue_for(request.user, request.query_params.dict())
        return Response(report_json(report, businesses))
