"""Conversions in the admin: each business's uploads to Google Ads and Meta
by status, with what was (or would be) sent, every attempt and the
platform's diagnostics, and the replay action; the accounts, their settings
and where each credential comes from (never its value). Here rather than in
crm's admin because the page names the platform rules agents applies."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from crm import models as m
from crm.admin import AttemptsInline, BusinessFilter, RecordAdmin, actor_of
from crm.permissions import business_ids_where, can_anywhere
from crm.services.conversions import account_secret_sources, conversion_upload_replay

ATTEMPT_FIELDS = ("number", "at", "outcome", "code", "message", "duration_ms", "response")
UPLOAD_FIELDS = (
    "public_id",
    "business",
    "account",
    "platform",
    "kind",
    "lead",
    "status",
    "key",
    "action",
    "occurred_at",
    "value_amount",
    "currency",
    "attempts",
    "errors",
    "error_limit",
    "next_attempt_at",
    "window_ends_at",
    "sent_at",
    "last_code",
    "last_error",
    "event",
    "restates",
    "touch",
    "created_at",
    "payload_pretty",
    "response_pretty",
)


def _pretty(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False, default=str))


class ConversionAttemptInline(AttemptsInline):
    model = m.ConversionAttempt
    fields = ATTEMPT_FIELDS
    readonly_fields = ATTEMPT_FIELDS
    view_permission = "conversionupload.view"


@admin.register(m.ConversionUpload)
class ConversionUploadAdmin(RecordAdmin):
    """The uploads page: filter by business and status; a row's page shows
    the request and every answer."""

    lead_path = None
    list_display = [
        "public_id",
        "created_at",
        "platform",
        "kind",
        "lead",
        "status",
        "value_amount",
        "attempts",
        "last_code",
        "last_error",
        "next_attempt_at",
        "business",
    ]
    list_select_related = ["lead", "business"]
    list_filter = [BusinessFilter, "status", "platform", "kind"]
    search_fields = ["public_id", "lead__public_id", "key"]
    fields = UPLOAD_FIELDS
    readonly_fields = list(UPLOAD_FIELDS)
    inlines = [ConversionAttemptInline]
    actions = ["replay"]
    show_full_result_count = False

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return can_anywhere(request.user, "conversion.replay")

    @admin.display(description="payload (what is, or in dry run would be, sent)")
    def payload_pretty(self, upload: m.ConversionUpload) -> str:
        return _pretty(upload.payload)

    @admin.display(description="the platform's last answer")
    def response_pretty(self, upload: m.ConversionUpload) -> str:
        return _pretty(upload.response)

    @admin.action(description="Replay the selected uploads (failed, skipped, sent or dry run)", permissions=["replay"])
    def replay(self, request: HttpRequest, queryset: QuerySet[m.ConversionUpload]) -> None:
        allowed = business_ids_where(request.user, "conversion.replay")
        chosen = queryset if allowed is None else queryset.filter(business_id__in=allowed)
        done = sum(
            conversion_upload_replay(u, actor=actor_of(request)) for u in chosen.select_related("business", "lead")
        )
        left = queryset.count() - done
        note = f"; {left} still waiting or in flight (left as they are)" if left else ""
        self.message_user(request, f"{done} uploads replayed{note}.", messages.SUCCESS)


@admin.register(m.ConversionAccount)
class ConversionAccountAdmin(RecordAdmin):
    """Set in the business file (`conversions:`); shown here, credentials by
    where they come from only."""

    lead_path = None
    list_display = ["public_id", "business", "platform", "is_active", "mapped", "updated_at"]
    list_select_related = ["business"]
    list_filter = [BusinessFilter, "platform", "is_active"]
    fields = ("public_id", "business", "platform", "is_active", "config_pretty", "credentials", "updated_at")
    readonly_fields = list(fields)

    @admin.display(description="moments sent")
    def mapped(self, account: m.ConversionAccount) -> str:
        names = account.config.get("actions") or account.config.get("events") or {}
        return ", ".join(sorted(names))

    @admin.display(description="settings")
    def config_pretty(self, account: m.ConversionAccount) -> str:
        return _pretty(account.config)

    @admin.display(description="credentials (write-only: where each comes from)")
    def credentials(self, account: m.ConversionAccount) -> str:
        sources = account_secret_sources(account)
        return format_html("<br>".join(["{}: {}"] * len(sources)), *[x for pair in sources.items() for x in pair])
