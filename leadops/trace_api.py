"""`GET /api/v1/leads/<id>/trace/`: the lead trace as JSON.

Routed in `leadops/urls.py` ahead of the crm API (the trace is agents code,
which crm may not import), with the same authentication, scoping and error
shape as every other endpoint.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.reporting.trace import KEYS, lead_for_trace, lead_trace
from crm.api.common import ErrorSerializer
from crm.selectors import lead_list_visible


class TraceKeyField(serializers.ChoiceField):
    """One of the seven question keys."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(choices=[(k, k) for k in KEYS], **kwargs)  # type: ignore[arg-type]


class TraceKeyFieldExtension(OpenApiSerializerFieldExtension):
    """One `TraceKeyEnum` component for `key` and `first_break`, rather than
    two same-valued enums named after the fields."""

    target_class = TraceKeyField

    def get_name(self) -> str:
        return "TraceKeyEnum"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"type": "string", "enum": list(KEYS)}


class TraceAnswerSerializer(serializers.Serializer):
    key = TraceKeyField(read_only=True)
    question = serializers.CharField(read_only=True)
    answer = serializers.CharField(read_only=True)
    ok = serializers.BooleanField(read_only=True)
    evidence = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="Public ids of the records behind the answer"
    )


class TraceSerializer(serializers.Serializer):
    lead = serializers.CharField(read_only=True, help_text="The lead's public id")
    questions = TraceAnswerSerializer(
        many=True, read_only=True, help_text="Always seven, in this order: " + ", ".join(KEYS)
    )
    first_break = TraceKeyField(
        read_only=True, allow_null=True, help_text="The first question the record cannot answer, or null"
    )


class LeadTraceView(APIView):
    """The seven questions of a lead's trace, each answered with its evidence."""

    @extend_schema(
        summary="The lead's trace: seven questions and the first break",
        operation_id="leads_trace_retrieve",
        tags=["leads"],
        responses={200: TraceSerializer, 401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, id: str) -> Response:
        lead = lead_for_trace(lead_list_visible(request.user, "payment.view"), id)
        if lead is None:
            raise NotFound("No Lead matches the given query.")
        return Response(TraceSerializer(lead_trace(lead).as_dict()).data)
