"""Writing estimates and visit outcomes over the API: the way a person's tool
(a quoting app, a technician's phone, `simulate`) records what happened.

- `POST /api/v1/estimates/`: record an estimate for a lead, and send it when
  `send` is true (through `agents.followup.estimates.estimate_send`, so an
  estimate above the service line's high value waits for another person's
  approval).
- `POST /api/v1/estimates/<id>/accept/` · `/decline/`: the customer's decision.
- `POST /api/v1/appointments/<id>/held/`: the visit happened (the lead moves to
  `appointment_held`, and its next state is asked for).

Estimates have no provider webhook, so these are the only way in besides the
admin. The estimate routes are served here, ahead of the crm API (these call
agents roles, which crm may not import): `EstimateViewSet` is crm's read
viewset plus the writes, so `GET /api/v1/estimates/` is unchanged. The user
must see the lead (`crm.selectors` scoping, as for every read); anything else
is a 404, never a hint that the record exists. Every refusal is the API's
`{"error", "detail"}`: 400 for a bad body, 409 for a record whose state does
not allow it (a decided estimate, a visit not started yet).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.booking.services import appointment_mark_held
from agents.booking.slots import BookingError
from agents.followup.estimates import EstimateError, estimate_accept, estimate_decline, estimate_send
from crm.api.common import ErrorSerializer
from crm.api.money import AppointmentSerializer, EstimateSerializer
from crm.api.money import EstimateViewSet as EstimateReadViewSet
from crm.models import Appointment, Estimate
from crm.permissions import can
from crm.selectors import lead_list_visible, scoped
from crm.services.records import estimate_record

_ERRORS = {400: ErrorSerializer, 401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer}
_STATE_ERRORS = {**_ERRORS, 409: ErrorSerializer}
# The writes that read a body: 415 for a Content-Type no parser reads (or none).
_BODY_ERRORS = {**_STATE_ERRORS, 415: ErrorSerializer}


class EstimateCreateSerializer(serializers.Serializer):
    lead = serializers.CharField(help_text="The lead's public id (a lead the user may see)")
    amount = serializers.DecimalField(
        max_digits=12, decimal_places=2, min_value=Decimal("0.01"), help_text='A string decimal, e.g. "4200.00"'
    )
    currency = serializers.CharField(
        required=False, help_text="ISO 4217; the business's own currency (the default), as its high-value limit is"
    )
    description = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, default=None, help_text="When the offer lapses (ISO time, in the future)"
    )
    send = serializers.BooleanField(
        required=False, default=False, help_text="Send it now (above the service line's high value: ask approval)"
    )

    def validate_expires_at(self, value: Any) -> Any:
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("must be in the future")
        return value


class EstimateDeclineSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=300)


def _error(code: int, error: str, detail: Any) -> Response:
    return Response({"error": error, "detail": detail}, status=code)


def _require(request: Request, permission: str, business_id: int) -> None:
    """403 unless the user's role in this business may do `permission`."""
    if not can(request.user, permission, business_id):
        raise PermissionDenied(f"your role in this business may not do {permission}")


def _actor(request: Request) -> str:
    return str(request.user.get_username())


class EstimateViewSet(EstimateReadViewSet):  # type: ignore[valid-type,misc]
    """Estimates: crm's reads, plus recording, sending and the customer's decision."""

    @extend_schema(
        summary="Record an estimate for a lead, and send it when `send` is true",
        request=EstimateCreateSerializer,
        responses={201: EstimateSerializer, **_BODY_ERRORS},
    )
    def create(self, request: Request) -> Response:
        body = EstimateCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        lead = lead_list_visible(request.user).select_related("business").filter(public_id=data["lead"]).first()
        if lead is None:
            return _error(status.HTTP_400_BAD_REQUEST, "bad_request", {"lead": [f"no lead {data['lead']!r}"]})
        _require(request, "estimate.create", lead.business_id)
        currency = str(data.get("currency") or lead.business.currency).upper()
        if currency != lead.business.currency:
            # The high-value limit is in the business's currency: an amount in
            # another one could not be compared with it, and is never converted.
            detail = {"currency": [f"{lead.business.slug} works in {lead.business.currency}, not {currency}"]}
            return _error(status.HTTP_400_BAD_REQUEST, "bad_request", detail)
        if not lead.is_open:
            return _error(status.HTTP_409_CONFLICT, "conflict", f"{lead.public_id} is {lead.stage}")
        actor = _actor(request)
        with transaction.atomic():  # recorded and sent (or asked for approval) together, or not at all
            estimate = estimate_record(
                lead=lead,
                amount=data["amount"],
                currency=currency,
                actor=actor,
                description=data["description"],
                expires_at=data["expires_at"],
            )
            if data["send"]:
                estimate = estimate_send(estimate, actor=actor, user=request.user)
        return Response(EstimateSerializer(self._reloaded(estimate)).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Send a draft estimate (above the high value: ask another person's approval first)",
        request=None,
        responses={200: EstimateSerializer, **_STATE_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def send(self, request: Request, id: str | None = None) -> Response:
        estimate = self.get_object()
        _require(request, "estimate.send", estimate.business_id)
        return self._decide(lambda: estimate_send(estimate, actor=_actor(request), user=request.user))

    @extend_schema(
        summary="The customer accepted the estimate (the lead is won)",
        request=None,
        responses={200: EstimateSerializer, **_STATE_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def accept(self, request: Request, id: str | None = None) -> Response:
        estimate = self.get_object()
        _require(request, "estimate.accept", estimate.business_id)
        return self._decide(lambda: estimate_accept(estimate, actor=_actor(request)))

    @extend_schema(
        summary="The customer declined the estimate (the lead is lost unless another estimate is open)",
        request=EstimateDeclineSerializer,
        responses={200: EstimateSerializer, **_BODY_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def decline(self, request: Request, id: str | None = None) -> Response:
        body = EstimateDeclineSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        estimate = self.get_object()
        _require(request, "estimate.decline", estimate.business_id)
        reason = str(body.validated_data["reason"]).strip()
        return self._decide(lambda: estimate_decline(estimate, actor=_actor(request), reason=reason))

    def _decide(self, decide: Any) -> Response:
        try:
            estimate = decide()
        except EstimateError as exc:
            return _error(status.HTTP_409_CONFLICT, "conflict", str(exc))
        return Response(EstimateSerializer(self._reloaded(estimate)).data)

    @staticmethod
    def _reloaded(estimate: Estimate) -> Estimate:
        return Estimate.objects.select_related("lead").get(pk=estimate.pk)


class AppointmentHeldView(APIView):
    """The visit happened: the appointment is held and the lead's next state is asked for."""

    def _appointments(self) -> QuerySet[Appointment]:
        return scoped(Appointment.objects.select_related("lead"), self.request.user, lead_path="lead")

    @extend_schema(
        summary="Mark a visit held (it must have started)",
        operation_id="v1_appointments_held_create",
        tags=["appointments"],
        request=None,
        responses={200: AppointmentSerializer, **_STATE_ERRORS},
    )
    def post(self, request: Request, id: str) -> Response:
        appointment = self._appointments().filter(public_id=id).first()
        if appointment is None:
            raise NotFound("No Appointment matches the given query.")
        _require(request, "appointment.outcome", appointment.business_id)
        try:
            held = appointment_mark_held(appointment, actor=_actor(request))
        except BookingError as exc:
            return _error(status.HTTP_409_CONFLICT, "conflict", str(exc))
        reloaded = Appointment.objects.select_related("lead", "assigned_to__user").get(pk=held.pk)
        return Response(AppointmentSerializer(reloaded).data)
