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

from crm.permissions import can


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


class FieldsByPermission(serializers.Serializer):
    """Fields a role may not read are left out of the answer, record by
    record: `field_permissions` names, per field, the permission its
    reader needs in the record's business (`business_id` of the record).
    Seeing a lead is not seeing everything about it: a technician reads the
    lead of their visit, never its click ids or its consent evidence."""

    field_permissions: dict[str, str] = {}

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)
        request = self.context.get("request")
        if request is None or not self.field_permissions:
            return data
        for name, permission in self.field_permissions.items():
            if name in data and not can(request.user, permission, instance.business_id):
                del data[name]
        return data


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


def fields_by_permission_optional(result: dict[str, Any], generator: Any, **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular's last step: a field some roles never get is not
    required in the schema (`FieldsByPermission`), so a client, and a
    schema check, expects it may be absent."""
    pending: list[type[Any]] = list(FieldsByPermission.__subclasses__())
    components = result.get("components", {}).get("schemas", {})
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        component = components.get(cls.__name__.removesuffix("Serializer"))
        if component and "required" in component:
            component["required"] = [name for name in component["required"] if name not in cls.field_permissions]
    return result


def throttled_documented(result: dict[str, Any], generator: Any, **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular's last step: every API view is throttled
    (leadops.api), so every operation may answer 429 in the error shape,
    with Retry-After; a client built from the schema expects it."""
    answer = {
        "description": "Too many requests: wait the seconds in Retry-After.",
        "headers": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait."}},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    for item in result.get("paths", {}).values():
        for method, operation in item.items():
            if method in ("get", "post", "put", "patch", "delete"):
                operation.setdefault("responses", {}).setdefault("429", answer)
    return result
