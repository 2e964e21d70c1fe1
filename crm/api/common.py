"""What every endpoint of the read API shares: the read viewset, the error
shape, the schema helpers, and the fields for a public id and a username.

Other apps' endpoints (approvals, leadops) build on these too, so an error
reads the same wherever it comes from.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.db.models import Model, QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets


def public_id_parameter(source: str, **kwargs: Any) -> serializers.CharField:
    return serializers.CharField(source=source, read_only=True, **kwargs)


def username_field(source: str) -> serializers.CharField:
    # `owner` is a TeamMember; clients know people by their username.
    return serializers.CharField(source=f"{source}.user.username", read_only=True, allow_null=True)


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
