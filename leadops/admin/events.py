"""The inbound events' admin: raw deliveries, their errors and attempts,
dead letters, and the replay action. Here rather than in crm's admin
because replaying runs agents' processing roles, and only leadops may
import both."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from agents.capture.processing import event_replay
from crm import models as m
from crm.admin import BusinessFilter, ReadOnlyAdmin
from crm.permissions import business_ids_where, can_anywhere


class DeadLetterFilter(admin.SimpleListFilter):
    """Failed events the sweep will try again (a retry time) apart from dead
    letters: attempts spent, waiting for a person to fix the cause and replay."""

    title = "retries"
    parameter_name = "retries"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("dead", "dead letter (no retry left)"), ("waiting", "failed, retry scheduled")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        failed = queryset.filter(status=m.InboundEvent.Status.FAILED)
        if self.value() == "dead":
            return failed.filter(retry_at__isnull=True)
        if self.value() == "waiting":
            return failed.filter(retry_at__isnull=False)
        return queryset


@admin.register(m.InboundEvent)
class InboundEventAdmin(ReadOnlyAdmin):
    lead_path = None
    list_display = [
        "public_id",
        "provider",
        "kind",
        "external_id",
        "status",
        "error_short",
        "is_test",
        "attempts",
        "retry_at",
        "received_at",
        "business",
    ]
    list_select_related = ["business"]
    list_filter = ["status", DeadLetterFilter, "provider", "kind", "is_test", BusinessFilter]
    search_fields = ["public_id", "external_id"]
    fields = (
        "public_id",
        "provider",
        "kind",
        "external_id",
        "status",
        "error",
        "attempts",
        "attempt_limit",
        "retry_at",
        "source",
        "business",
        "signature_ok",
        "is_test",
        "received_at",
        "claimed_at",
        "processed_at",
        "headers",
        "body_text",
    )
    readonly_fields = fields
    actions = ["replay"]
    show_full_result_count = False

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return can_anywhere(request.user, "event.replay")

    @admin.display(description="error")
    def error_short(self, event: m.InboundEvent) -> str:
        return event.error[:80]

    @admin.action(description="Replay the selected failed events", permissions=["replay"])
    def replay(self, request: HttpRequest, queryset: QuerySet[m.InboundEvent]) -> None:
        outcomes: dict[str, int] = {}
        allowed = business_ids_where(request.user, "event.replay")
        failed = queryset.filter(status=m.InboundEvent.Status.FAILED)
        for event in failed if allowed is None else failed.filter(business_id__in=allowed):
            outcome = event_replay(event)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        summary = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "nothing (only failed events replay)"
        level = messages.WARNING if "failed" in outcomes or not outcomes else messages.SUCCESS
        self.message_user(request, f"Replayed: {summary}.", level)

    @admin.display(description="raw body")
    def body_text(self, event: m.InboundEvent) -> str:
        text = bytes(event.body).decode("utf-8", errors="replace")
        if event.source_id and event.source and event.source.secret:
            # Google echoes the source's secret (`google_key`) in the body: the
            # stored bytes stay verbatim, the page never shows the secret.
            text = text.replace(event.source.secret, "[secret redacted]")
        return format_html("<pre>{}</pre>", text)
