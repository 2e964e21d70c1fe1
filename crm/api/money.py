"""The money records in the read API: appointments, estimates, jobs,
invoices, payments and refunds.

Each its own record with its own times; money as a string decimal beside its
currency. Records follow their lead's visibility (`crm.selectors.scoped`); a
payment no lead explains yet is seen by the business's owners and managers
only.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_view
from rest_framework import serializers

from crm.api.common import ReadViewSet, detail_schema, list_schema, public_id_parameter
from crm.models import Appointment, Estimate, Invoice, Job, Payment, Refund
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
