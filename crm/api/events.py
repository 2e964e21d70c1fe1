"""`/inbound-events/`: the raw provider deliveries and how processing went
(never their bodies or headers)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_view
from rest_framework import serializers

from crm.api.common import ReadViewSet, detail_schema, list_schema, public_id_parameter
from crm.models import InboundEvent, Provider
from crm.selectors import scoped


class InboundEventSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    business = public_id_parameter("business.public_id", allow_null=True)

    class Meta:
        model = InboundEvent
        fields = ["id", "business", "provider", "external_id", "status", "error", "received_at"]
        read_only_fields = fields


class InboundEventFilterSerializer(serializers.Serializer):
    # An empty value means "any", as if the parameter were absent.
    provider = serializers.ChoiceField(choices=Provider.choices, required=False, allow_blank=True)
    status = serializers.ChoiceField(choices=InboundEvent.Status.choices, required=False, allow_blank=True)


@extend_schema_view(
    list=list_schema("Raw provider deliveries", InboundEventSerializer, InboundEventFilterSerializer),
    retrieve=detail_schema("One provider delivery", InboundEventSerializer),
)
class InboundEventViewSet(ReadViewSet[InboundEvent]):
    """Raw provider deliveries and how processing went; owners and managers only."""

    # Scoped without a lead path: a setter sees none, and an event whose
    # business is not known yet is seen by operators (superusers) only.
    queryset = InboundEvent.objects.none()
    serializer_class = InboundEventSerializer
    filter_serializer_class = InboundEventFilterSerializer

    def get_queryset(self) -> QuerySet[InboundEvent]:
        events = InboundEvent.objects.select_related("business").defer("body", "headers")
        return scoped(events, self.request.user)

    def filter_list(self, queryset: QuerySet[InboundEvent], **filters: Any) -> QuerySet[InboundEvent]:
        return queryset.filter(**filters).order_by("-received_at", "-pk")
