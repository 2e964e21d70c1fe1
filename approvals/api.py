"""`/api/v1/approvals/`: the human gate's queue, and its decisions (its OpenAPI schema: /api/schema/).

Reads follow `crm.selectors.scoped` (a setter sees the requests on their own
leads; another business's requests are a 404). Deciding is the services' rule:
a setter or the proposer gets 403, a payload key the kind does not let a
decision change 400, a request no longer pending (or whose draft already left
the queue) 409. Approving with an edited payload is a new proposal by the
editor: 202, the request still pending, for another person to approve.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field, extend_schema_view
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from approvals.kinds import DRAFT_MAX_LENGTH
from approvals.models import ApprovalRequest
from approvals.services import (
    ApprovalConflict,
    ApprovalError,
    ApprovalForbidden,
    ApprovalInvalid,
    approval_approve,
    approval_reject,
)
from crm.api.common import ErrorSerializer, ReadViewSet
from crm.selectors import scoped


class ApprovalSerializer(serializers.ModelSerializer):
    id = serializers.CharField(source="public_id", read_only=True)
    lead = serializers.CharField(source="lead.public_id", read_only=True, allow_null=True)
    decided_by = serializers.CharField(source="decided_by.username", read_only=True, allow_null=True)
    payload = serializers.JSONField(read_only=True, help_text="What approval does: the draft, the merge…")
    original_payload = serializers.JSONField(
        read_only=True, allow_null=True, help_text="The first proposer's payload, once a person edited it"
    )

    class Meta:
        model = ApprovalRequest
        fields = [
            "id",
            "kind",
            "status",
            "proposed_by",
            "decided_by",
            "lead",
            "summary",
            "payload",
            "original_payload",
            "decision_note",
            "created_at",
            "expires_at",
            "decided_at",
        ]
        read_only_fields = fields


class ApprovalFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=ApprovalRequest.Status.choices, required=False, allow_blank=True)
    kind = serializers.ChoiceField(choices=ApprovalRequest.Kind.choices, required=False, allow_blank=True)


class ApprovalRejectSerializer(serializers.Serializer):
    note = serializers.CharField(required=False, allow_blank=True, default="", help_text="Why, for the receipt")


class ApprovalPayloadEditSerializer(serializers.Serializer):
    """What a decision may change in the payload; the request's kind says which fields apply.
    Other keys of the payload may be sent back, unchanged."""

    body = serializers.CharField(
        required=False, max_length=DRAFT_MAX_LENGTH, help_text="message_draft, out_of_playbook: the reworded text"
    )


@extend_schema_field(ApprovalPayloadEditSerializer)
class ApprovalPayloadEditField(serializers.DictField):
    """An edited payload; its schema names the keys a kind lets a person change."""


class ApprovalApproveSerializer(ApprovalRejectSerializer):
    payload = ApprovalPayloadEditField(
        required=False,
        help_text=(
            "An edit: only the fields the request's kind allows (a draft's `body`; nothing for the other kinds). "
            "Other payload keys may be sent back only unchanged; a pinned record (`message`, `estimate`, "
            "`point`) never changes. A changed payload is not approved: it becomes the caller's proposal "
            "(202, still pending) for another person to approve."
        ),
    )


_ERRORS = {401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer}
# 415: a body whose Content-Type no parser reads (or none at all).
_DECISION_ERRORS = {**_ERRORS, 400: ErrorSerializer, 409: ErrorSerializer, 415: ErrorSerializer}
_EDITED = OpenApiResponse(
    ApprovalSerializer, description="The edit is saved as the caller's proposal; the request waits for another person"
)


@extend_schema_view(
    list=extend_schema(
        summary="Approval requests the user may see, newest first",
        parameters=[ApprovalFilterSerializer],
        responses={200: ApprovalSerializer(many=True), 400: ErrorSerializer, **_ERRORS},
    ),
    retrieve=extend_schema(summary="One approval request", responses={200: ApprovalSerializer, **_ERRORS}),
)
class ApprovalViewSet(ReadViewSet[ApprovalRequest]):
    """The approval queue; managers and owners decide, never the proposer."""

    queryset = ApprovalRequest.objects.none()
    serializer_class = ApprovalSerializer
    filter_serializer_class = ApprovalFilterSerializer

    def get_queryset(self) -> QuerySet[ApprovalRequest]:
        requests = ApprovalRequest.objects.select_related("lead", "decided_by")
        return scoped(requests, self.request.user, lead_path="lead")

    def filter_list(self, queryset: QuerySet[ApprovalRequest], **filters: Any) -> QuerySet[ApprovalRequest]:
        return queryset.filter(**filters).order_by("-created_at", "-pk")

    @extend_schema(
        summary="Approve a pending request as proposed, or propose an edit of it (202)",
        request=ApprovalApproveSerializer,
        responses={200: ApprovalSerializer, 202: _EDITED, **_DECISION_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, id: str | None = None) -> Response:
        data = self._decision_data(ApprovalApproveSerializer)
        target = self.get_object()
        # A form post without `payload` parses as an empty dict: that is "no
        # edit", never "approve an empty payload".
        edited = data.get("payload") or None
        return self._decide(
            lambda: approval_approve(target, user=request.user, note=data["note"], edited_payload=edited)
        )

    @extend_schema(
        summary="Reject a pending request",
        request=ApprovalRejectSerializer,
        responses={200: ApprovalSerializer, **_DECISION_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, id: str | None = None) -> Response:
        data = self._decision_data(ApprovalRejectSerializer)
        target = self.get_object()
        return self._decide(lambda: approval_reject(target, user=request.user, note=data["note"]))

    def _decision_data(self, serializer_class: type[serializers.Serializer]) -> dict[str, Any]:
        body = serializer_class(data=self.request.data)
        body.is_valid(raise_exception=True)
        return dict(body.validated_data)

    def _decide(self, decide: Any) -> Response:
        try:
            decided = decide()
        except ApprovalForbidden as exc:
            return _error(status.HTTP_403_FORBIDDEN, "forbidden", str(exc))
        except ApprovalConflict as exc:
            return _error(status.HTTP_409_CONFLICT, "conflict", str(exc))
        except ApprovalInvalid as exc:
            return _error(status.HTTP_400_BAD_REQUEST, "bad_request", exc.detail)
        except ApprovalError as exc:
            return _error(status.HTTP_400_BAD_REQUEST, "bad_request", str(exc))
        # Still pending after "approve": the caller edited it, so it is their proposal now.
        code = status.HTTP_202_ACCEPTED if decided.status == ApprovalRequest.Status.PENDING else status.HTTP_200_OK
        return Response(ApprovalSerializer(decided).data, status=code)


def _error(code: int, error: str, detail: Any) -> Response:
    return Response({"error": error, "detail": detail}, status=code)
