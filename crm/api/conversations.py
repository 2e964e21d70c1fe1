"""What happens with a lead after it arrives: `/messages/` in and out (with
their delivery status and why a send was blocked), people's `/tasks/`, and
the follow-up paths a lead is on (`/enrollments/`)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_view
from rest_framework import serializers

from crm.api.common import ReadViewSet, detail_schema, list_schema, public_id_parameter, username_field
from crm.models import INTENTS, Enrollment, Message, Task
from crm.selectors import scoped

# ---------------------------------------------------------------- serializers


class MessageSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    lead = public_id_parameter("lead.public_id", allow_null=True)
    # Declared so the schema shows "" (not blocked) as a value.
    block_reason = serializers.ChoiceField(choices=Message.BlockReason.choices, allow_blank=True, read_only=True)
    intent = serializers.ChoiceField(
        choices=[(i, i) for i in INTENTS],
        allow_blank=True,
        read_only=True,
        help_text="What an inbound message asks for (empty for outbound messages)",
    )
    intent_confidence = serializers.FloatField(
        read_only=True, allow_null=True, help_text="How sure the reader of the intent was, 0 to 1 (null: not read)"
    )
    intent_source = serializers.ChoiceField(
        choices=[("reader", "reader"), ("rules", "rules"), ("model", "model")],
        allow_blank=True,
        read_only=True,
        help_text="Who read the intent: the trained reader (what every message is read with), the hand-written "
        "rules (messages read before the reader), or the language model when one is configured",
    )

    class Meta:
        model = Message
        fields = [
            "id",
            "lead",
            "direction",
            "channel",
            "status",
            "block_reason",
            "body",
            "from_number",
            "to",
            "provider_sid",
            "created_at",
            "intent",
            "intent_confidence",
            "intent_source",
        ]
        read_only_fields = fields


class TaskSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    lead = public_id_parameter("lead.public_id", allow_null=True)
    owner = username_field("owner")

    class Meta:
        model = Task
        fields = ["id", "lead", "owner", "kind", "title", "due_at", "status"]
        read_only_fields = fields


class EnrollmentSerializer(serializers.ModelSerializer):
    """A lead's place in a follow-up path (`sequence` is the path's public id,
    `sequence_key` its key in the business file)."""

    id = public_id_parameter("public_id")
    lead = public_id_parameter("lead.public_id")
    sequence = public_id_parameter("sequence.public_id")
    sequence_key = public_id_parameter("sequence.key")
    stop_reason = serializers.CharField(
        read_only=True,
        help_text="Why the path ended: reply, booking, won, opt_out, complaint, hold, disqualified, "
        "stage_left, goal, completed (or declined, expired, paid for an estimate's follow-up); empty while it runs",
    )

    class Meta:
        model = Enrollment
        fields = ["id", "lead", "sequence", "sequence_key", "status", "stop_reason", "next_step_due_at"]
        read_only_fields = fields


# ------------------------------------------------------- list query parameters
# An empty value (`?owner=&status=`) means "any", as if the parameter were absent.


class MessageFilterSerializer(serializers.Serializer):
    lead = serializers.CharField(required=False, allow_blank=True, help_text="The lead's public id")


class TaskFilterSerializer(serializers.Serializer):
    owner = serializers.CharField(required=False, allow_blank=True, help_text="The owner's username")
    status = serializers.ChoiceField(choices=Task.Status.choices, required=False, allow_blank=True)


class EnrollmentFilterSerializer(serializers.Serializer):
    lead = serializers.CharField(required=False, allow_blank=True, help_text="The lead's public id")


# ------------------------------------------------------------------ viewsets


@extend_schema_view(
    list=list_schema("Messages in and out", MessageSerializer, MessageFilterSerializer),
    retrieve=detail_schema("One message", MessageSerializer),
)
class MessageViewSet(ReadViewSet[Message]):
    """Messages in and out, with their delivery status and why a send was blocked."""

    queryset = Message.objects.none()
    serializer_class = MessageSerializer
    filter_serializer_class = MessageFilterSerializer

    def get_queryset(self) -> QuerySet[Message]:
        return scoped(Message.objects.select_related("lead"), self.request.user, lead_path="lead")

    def filter_list(self, queryset: QuerySet[Message], **filters: Any) -> QuerySet[Message]:
        if "lead" in filters:
            queryset = queryset.filter(lead__public_id=filters["lead"])
        return queryset.order_by("created_at", "pk")


@extend_schema_view(
    list=list_schema("Tasks", TaskSerializer, TaskFilterSerializer),
    retrieve=detail_schema("One task", TaskSerializer),
)
class TaskViewSet(ReadViewSet[Task]):
    """Human to-dos with an owner and a due time, following their lead's visibility."""

    queryset = Task.objects.none()
    serializer_class = TaskSerializer
    filter_serializer_class = TaskFilterSerializer

    def get_queryset(self) -> QuerySet[Task]:
        return scoped(Task.objects.select_related("lead", "owner__user"), self.request.user, lead_path="lead")

    def filter_list(self, queryset: QuerySet[Task], **filters: Any) -> QuerySet[Task]:
        if "owner" in filters:
            queryset = queryset.filter(owner__user__username=filters["owner"])
        if "status" in filters:
            queryset = queryset.filter(status=filters["status"])
        return queryset.order_by("due_at", "pk")


@extend_schema_view(
    list=list_schema("Follow-up enrollments", EnrollmentSerializer, EnrollmentFilterSerializer),
    retrieve=detail_schema("One enrollment", EnrollmentSerializer),
)
class EnrollmentViewSet(ReadViewSet[Enrollment]):
    """Which follow-up paths a lead is on, waiting for, or ended (and why)."""

    queryset = Enrollment.objects.none()
    serializer_class = EnrollmentSerializer
    filter_serializer_class = EnrollmentFilterSerializer

    def get_queryset(self) -> QuerySet[Enrollment]:
        return scoped(Enrollment.objects.select_related("lead", "sequence"), self.request.user, lead_path="lead")

    def filter_list(self, queryset: QuerySet[Enrollment], **filters: Any) -> QuerySet[Enrollment]:
        if "lead" in filters:
            queryset = queryset.filter(lead__public_id=filters["lead"])
        return queryset.order_by("created_at", "pk")
