"""Leads and the people behind them: `/leads/` (with each lead's source
touches, and its audit trail at `/leads/<id>/receipts/`) and `/contacts/`
(phones, emails, consent per channel and its ledger)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

from crm.api.common import (
    AUTH_ERRORS,
    ErrorSerializer,
    FieldsByPermission,
    ReadViewSet,
    detail_schema,
    list_schema,
    public_id_parameter,
    username_field,
)
from crm.api.filters import consent_summary, contact_list_visible, lead_list_filter
from crm.models import (
    ConsentEvent,
    ConsentStatus,
    Contact,
    ContactPointKind,
    Lead,
    LeadException,
    LeadTouch,
    Receipt,
    Stage,
)
from crm.selectors import lead_list_visible

# ---------------------------------------------------------------- serializers


class ConsentValueField(serializers.ChoiceField):
    """`granted`, `revoked` or `unknown`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=ConsentStatus.choices, read_only=True, **kwargs)


class ConsentValueFieldExtension(OpenApiSerializerFieldExtension):
    """One `ConsentStatusEnum` component for every channel, instead of
    same-valued enums named after the fields (which the schema generator
    warns about)."""

    target_class = ConsentValueField

    def get_name(self) -> str:
        return "ConsentStatusEnum"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"type": "string", "enum": list(ConsentStatus.values)}


class ConsentSerializer(serializers.Serializer):
    sms = ConsentValueField()
    voice = ConsentValueField()
    email = ConsentValueField()
    # Revoked when the person said stop by DM; never granted by a form (Meta's
    # 24-hour window, not a grant, lets a DM go out).
    instagram = ConsentValueField()
    # The same for a marketplace thread: the person's STOP written there.
    thumbtack = ConsentValueField()
    yelp = ConsentValueField()


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


class ContactDetailSerializer(FieldsByPermission, ContactSerializer):
    """A person, plus every consent event over their points, oldest first
    (the evidence: address, browser, page; for roles with consentevent.view)."""

    field_permissions = {"consent_events": "consentevent.view"}
    # Reads `points__consent_events` as well: prefetch it.
    consent_events = serializers.SerializerMethodField(
        help_text="Absent for a role without consentevent.view (a technician)."
    )

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


class LeadSerializer(FieldsByPermission, serializers.ModelSerializer):
    # The touches carry the click ids (gclid, fbclid) and the campaign: the sales side's.
    field_permissions = {"touches": "leadtouch.view"}
    id = public_id_parameter("public_id")
    business = public_id_parameter("business.public_id")
    owner = username_field("owner")
    exceptions = serializers.ListField(child=serializers.ChoiceField(choices=LeadException.choices), read_only=True)
    contact = ContactSerializer(read_only=True)
    touches = LeadTouchSerializer(
        many=True, read_only=True, help_text="Absent for a role without leadtouch.view (a technician)."
    )

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


# ------------------------------------------------------------------ viewsets


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
