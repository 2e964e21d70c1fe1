"""The read API (its OpenAPI schema: /api/schema/): serializers and read-only viewsets.

Every record is addressed by its public id and every reference to a record
is that record's public id; users appear as usernames. What a user may see
comes from `crm.selectors`; list filters from `crm.api_filters`. Querysets
load everything a page renders up front, so a list costs the same number of
queries for 2 rows as for 50.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.db.models import Model, QuerySet
from django.http import Http404
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

from crm.api_filters import consent_summary, contact_list_visible, lead_list_filter
from crm.models import (
    ConsentEvent,
    ConsentStatus,
    Contact,
    ContactPointKind,
    Enrollment,
    InboundEvent,
    Lead,
    LeadException,
    LeadTouch,
    Message,
    Provider,
    Receipt,
    Stage,
    Task,
)
from crm.selectors import lead_list_visible, scoped

# ---------------------------------------------------------------- serializers


def public_id_parameter(source: str, **kwargs: Any) -> serializers.CharField:
    return serializers.CharField(source=source, read_only=True, **kwargs)


def _username(source: str) -> serializers.CharField:
    # `owner` is a TeamMember; clients know people by their username.
    return serializers.CharField(source=f"{source}.user.username", read_only=True, allow_null=True)


class ConsentValueField(serializers.ChoiceField):
    """`granted`, `revoked` or `unknown`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=ConsentStatus.choices, read_only=True, **kwargs)


class ConsentValueFieldExtension(OpenApiSerializerFieldExtension):
    """One `ConsentStatusEnum` component for the three channels, instead of
    three same-valued enums named after the fields (which the schema
    generator warns about)."""

    target_class = ConsentValueField

    def get_name(self) -> str:
        return "ConsentStatusEnum"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"type": "string", "enum": list(ConsentStatus.values)}


class ConsentSerializer(serializers.Serializer):
    sms = ConsentValueField()
    voice = ConsentValueField()
    email = ConsentValueField()


class ConsentEventSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")

    class Meta:
        model = ConsentEvent
        fields = ["id", "channel", "action", "basis", "evidence", "actor", "at"]
        read_only_fields = fields


class ContactSerializer(serializers.ModelSerializer):
    """A person: phones (E.164), emails (lower-cased) and consent per channel."""

    # Reads `points` and `points__consent_states`: prefetch both.
    id = public_id_parameter("public_id")
    name = serializers.CharField(read_only=True)
    phones = serializers.SerializerMethodField()
    emails = serializers.SerializerMethodField()
    consent = serializers.SerializerMethodField()

    class Meta:
        model = Contact
        fields = ["id", "name", "phones", "emails", "consent"]
        read_only_fields = fields

    def get_phones(self, contact: Contact) -> list[str]:
        return [p.value for p in contact.points.all() if p.kind == ContactPointKind.PHONE]

    def get_emails(self, contact: Contact) -> list[str]:
        return [p.value for p in contact.points.all() if p.kind == ContactPointKind.EMAIL]

    @extend_schema_field(ConsentSerializer)
    def get_consent(self, contact: Contact) -> dict[str, str]:
        return consent_summary(list(contact.points.all()))


class ContactDetailSerializer(ContactSerializer):
    """A person, plus every consent event over their points, oldest first."""

    # Reads `points__consent_events` as well: prefetch it.
    consent_events = serializers.SerializerMethodField()

    class Meta(ContactSerializer.Meta):
        fields = [*ContactSerializer.Meta.fields, "consent_events"]
        read_only_fields = fields

    @extend_schema_field(ConsentEventSerializer(many=True))
    def get_consent_events(self, contact: Contact) -> list[dict[str, Any]]:
        events = [event for point in contact.points.all() for event in point.consent_events.all()]
        events.sort(key=lambda event: (event.at, event.pk))
        return ConsentEventSerializer(events, many=True).data  # type: ignore[return-value]


class LeadTouchSerializer(serializers.ModelSerializer):
    utm = serializers.DictField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = LeadTouch
        fields = [
            "channel",
            "provider",
            "received_at",
            "campaign_id",
            "adgroup_id",
            "ad_id",
            "form_id",
            "gclid",
            "fbclid",
            "utm",
        ]
        read_only_fields = fields


class LeadSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    business = public_id_parameter("business.public_id")
    owner = _username("owner")
    exceptions = serializers.ListField(child=serializers.ChoiceField(choices=LeadException.choices), read_only=True)
    contact = ContactSerializer(read_only=True)
    touches = LeadTouchSerializer(many=True, read_only=True)

    class Meta:
        model = Lead
        fields = [
            "id",
            "business",
            "stage",
            "owner",
            "next_action",
            "next_action_due_at",
            "sla_due_at",
            "hold",
            "exceptions",
            "created_at",
            "contact",
            "touches",
        ]
        read_only_fields = fields


class ReceiptSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")

    class Meta:
        model = Receipt
        fields = ["id", "at", "actor", "action", "reason", "before", "after"]
        read_only_fields = fields


class MessageSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    lead = public_id_parameter("lead.public_id", allow_null=True)
    # Declared so the schema shows "" (not blocked) as a value.
    block_reason = serializers.ChoiceField(choices=Message.BlockReason.choices, allow_blank=True, read_only=True)

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
        ]
        read_only_fields = fields


class InboundEventSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    business = public_id_parameter("business.public_id", allow_null=True)

    class Meta:
        model = InboundEvent
        fields = ["id", "business", "provider", "external_id", "status", "error", "received_at"]
        read_only_fields = fields


class TaskSerializer(serializers.ModelSerializer):
    id = public_id_parameter("public_id")
    lead = public_id_parameter("lead.public_id", allow_null=True)
    owner = _username("owner")

    class Meta:
        model = Task
        fields = ["id", "lead", "owner", "kind", "title", "due_at", "status"]
        read_only_fields = fields


# ------------------------------------------------------- list query parameters
# An empty value (`?phone=&stage=`) means "any", as if the parameter were absent.


class LeadFilterSerializer(serializers.Serializer):
    phone = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="A phone in any format, e.g. (212) 555-0147; matched on E.164 in the lead's region",
    )
    email = serializers.CharField(required=False, allow_blank=True, help_text="An email address, case-insensitive")
    stage = serializers.ChoiceField(choices=Stage.choices, required=False, allow_blank=True)
    owner = serializers.CharField(required=False, allow_blank=True, help_text="The owner's username")
    business = serializers.CharField(required=False, allow_blank=True, help_text="The business's slug or public id")


class MessageFilterSerializer(serializers.Serializer):
    lead = serializers.CharField(required=False, allow_blank=True, help_text="The lead's public id")


class InboundEventFilterSerializer(serializers.Serializer):
    provider = serializers.ChoiceField(choices=Provider.choices, required=False, allow_blank=True)
    status = serializers.ChoiceField(choices=InboundEvent.Status.choices, required=False, allow_blank=True)


class TaskFilterSerializer(serializers.Serializer):
    owner = serializers.CharField(required=False, allow_blank=True, help_text="The owner's username")
    status = serializers.ChoiceField(choices=Task.Status.choices, required=False, allow_blank=True)


class ErrorSerializer(serializers.Serializer):
    """Every API error: a stable code and a human-readable detail."""

    error = serializers.CharField(help_text="not_authenticated, forbidden, not_found, bad_request…")
    detail = serializers.JSONField(help_text="A message, or per-field messages for a bad query parameter")


AUTH_ERRORS = {401: ErrorSerializer, 403: ErrorSerializer}


def list_schema(summary: str, serializer: type[serializers.Serializer], filters: Any = None) -> Any:
    # A `page` past the last one, or not a number, is the paginator's 404.
    responses = {200: serializer(many=True), 404: ErrorSerializer, **AUTH_ERRORS}
    if filters is None:
        return extend_schema(summary=summary, responses=responses)
    return extend_schema(summary=summary, parameters=[filters], responses={**responses, 400: ErrorSerializer})


def detail_schema(summary: str, serializer: type[serializers.Serializer]) -> Any:
    return extend_schema(summary=summary, responses={200: serializer, 404: ErrorSerializer, **AUTH_ERRORS})


# ------------------------------------------------------------------ viewsets


M = TypeVar("M", bound=Model)


class ReadViewSet(viewsets.ReadOnlyModelViewSet[M]):
    # Lookup by public id (`<id>` in the URL). List filters are read from the
    # query string through `filter_serializer_class` (a bad value is a 400) and
    # applied to lists only, so a detail URL ignores the query string.
    lookup_field = "public_id"
    lookup_url_kwarg = "id"
    filter_serializer_class: type[serializers.Serializer] | None = None

    def list_filters(self) -> dict[str, Any]:
        if self.filter_serializer_class is None:
            return {}
        params = self.filter_serializer_class(data=self.request.query_params)
        params.is_valid(raise_exception=True)
        return {key: value for key, value in params.validated_data.items() if value not in ("", None)}

    def filter_queryset(self, queryset: QuerySet[M]) -> QuerySet[M]:
        if self.action != "list":
            return queryset
        return self.filter_list(queryset, **self.list_filters())

    def filter_list(self, queryset: QuerySet[M], **filters: Any) -> QuerySet[M]:
        return queryset


@extend_schema_view(
    list=list_schema("Leads the user may see", LeadSerializer, LeadFilterSerializer),
    retrieve=detail_schema("One lead with its contact and source touches", LeadSerializer),
)
class LeadViewSet(ReadViewSet[Lead]):
    """Leads: owners and managers see their whole business, a setter the leads they own."""

    queryset = Lead.objects.none()
    serializer_class = LeadSerializer
    filter_serializer_class = LeadFilterSerializer

    def get_queryset(self) -> QuerySet[Lead]:
        if self.action == "receipts":
            # The audit trail is the conversation's history: the sales side's.
            return lead_list_visible(self.request.user, "receipt.view")
        leads = lead_list_visible(self.request.user)
        return leads.select_related("business", "owner__user", "contact").prefetch_related(
            "touches", "contact__points__consent_states"
        )

    def filter_list(self, queryset: QuerySet[Lead], **filters: Any) -> QuerySet[Lead]:
        return lead_list_filter(queryset, **filters).order_by("-created_at", "-pk")

    @extend_schema(
        summary="The lead's audit trail, oldest first",
        responses={200: ReceiptSerializer(many=True), 404: ErrorSerializer, **AUTH_ERRORS},
    )
    @action(detail=True, methods=["get"], serializer_class=ReceiptSerializer)
    def receipts(self, request: Request, id: str | None = None, format: str | None = None) -> Response:
        lead = self.get_object()
        # The viewset's generic type is Lead; this page is of its receipts.
        receipts: QuerySet[Any] = Receipt.objects.filter(lead=lead).order_by("at", "id")
        page = self.paginate_queryset(receipts)
        return self.get_paginated_response(ReceiptSerializer(page, many=True).data)


MERGED = OpenApiResponse(
    description="Merged into another contact (one person): `Location` is that contact's URL. Permanent."
)


@extend_schema_view(
    list=list_schema("Contacts the user may see (not those merged into another)", ContactSerializer),
    retrieve=extend_schema(
        summary="One contact with its consent ledger",
        responses={200: ContactDetailSerializer, 301: MERGED, 404: ErrorSerializer, **AUTH_ERRORS},
    ),
)
class ContactViewSet(ReadViewSet[Contact]):
    """Contacts of the user's businesses; a setter sees the people behind their own leads."""

    queryset = Contact.objects.none()
    serializer_class = ContactSerializer

    def get_serializer_class(self) -> type[serializers.BaseSerializer[Any]]:
        return ContactDetailSerializer if self.action == "retrieve" else ContactSerializer

    def get_queryset(self) -> QuerySet[Contact]:
        contacts = contact_list_visible(self.request.user).prefetch_related("points__consent_states")
        if self.action == "retrieve":
            contacts = contacts.prefetch_related("points__consent_events")
        else:
            # A merged contact is a former record of a person listed once, as the contact it became.
            contacts = contacts.filter(merged_into__isnull=True)
        return contacts.order_by("-created_at", "-pk")

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # A merged contact's URL answers with where the person is now (a
        # merge is never undone: 301), to a user who may see that contact,
        # whether or not they could see the merged record (a setter cannot:
        # it has no leads left); anyone else gets the 404 an unknown id gets.
        try:
            contact = self.get_object()
        except Http404:
            found = Contact.objects.filter(public_id=kwargs["id"], merged_into__isnull=False).first()
            if found is None:
                raise
            contact = found
        if contact.merged_into_id is None:
            return Response(self.get_serializer(contact).data)
        keep = self.get_queryset().filter(pk=contact.merged_into_id).values_list("public_id", flat=True).first()
        if keep is None:
            raise NotFound()
        location = reverse("contact-detail", kwargs={"id": keep}, request=request)
        return Response(status=status.HTTP_301_MOVED_PERMANENTLY, headers={"Location": location})


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


class EnrollmentFilterSerializer(serializers.Serializer):
    lead = serializers.CharField(required=False, allow_blank=True, help_text="The lead's public id")


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
