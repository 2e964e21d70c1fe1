from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from approvals.models import ApprovalRequest
from crm.selectors import scoped


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(admin.ModelAdmin):
    """The human gate's queue. Decisions arrive with the consent issue; until
    then requests are visible, never editable by hand."""

    list_display = [
        "public_id",
        "kind",
        "status",
        "summary",
        "lead",
        "proposed_by",
        "decided_by",
        "created_at",
        "business",
    ]
    list_select_related = ["lead", "decided_by", "business"]
    list_filter = ["status", "kind"]
    search_fields = ["public_id", "lead__public_id", "summary"]
    readonly_fields = [f.name for f in ApprovalRequest._meta.fields if f.name != "id"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scoped(super().get_queryset(request), request.user, lead_path="lead")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
