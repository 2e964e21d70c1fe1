"""The human gate's queue in the admin.

Scoped like every list (`crm.selectors.scoped`); records are never edited by
hand: the bulk actions and the decision form on the change page call
`approvals.services`, which decides who may decide and writes the receipt.
A reworded draft is the editor's proposal: the form saves it and another
person approves it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince

from approvals.kinds import approval_editable_fields
from approvals.models import ApprovalRequest
from approvals.services import ApprovalError, approval_approve, approval_edit, approval_reject
from crm.admin import ScopedAdmin, admin_bulk


class AgeFilter(admin.SimpleListFilter):
    """How long a request has been waiting since it was proposed."""

    title = "age"
    parameter_name = "age"
    # value: (older than, at most); None is open-ended.
    RANGES: dict[str, tuple[timedelta, timedelta | None]] = {
        "lt1h": (timedelta(0), timedelta(hours=1)),
        "1h-24h": (timedelta(hours=1), timedelta(hours=24)),
        "gt24h": (timedelta(hours=24), None),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("lt1h", "under 1 hour"), ("1h-24h", "1–24 hours"), ("gt24h", "over 24 hours")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value not in self.RANGES:
            return queryset
        now = timezone.now()
        older_than, at_most = self.RANGES[value]
        queryset = queryset.filter(created_at__lte=now - older_than)
        return queryset.filter(created_at__gt=now - at_most) if at_most is not None else queryset


class DecisionForm(forms.Form):
    """Approve, reject, or reword the draft (when the kind lets a decision edit
    its `body`; elsewhere a body is what the contact wrote) for another person."""

    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 6, "cols": 80}), required=False, label="Draft")
    note = forms.CharField(widget=forms.Textarea(attrs={"rows": 2, "cols": 80}), required=False)
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("edit", "Propose this edit"), ("reject", "Reject")])

    def __init__(self, *args: Any, approval: ApprovalRequest, **kwargs: Any) -> None:
        self.approval = approval
        super().__init__(*args, **kwargs)
        editable = "body" in approval_editable_fields(approval.kind)
        if not editable or not isinstance(approval.payload.get("body"), str):
            del self.fields["body"]
        else:
            self.fields["body"].initial = approval.payload["body"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "body" in self.fields and data.get("decision") in ("approve", "edit") and not data.get("body"):
            raise forms.ValidationError("The draft cannot be empty: reject it instead.")
        if data.get("decision") == "edit" and self._edit_of(data) is None:
            raise forms.ValidationError("Nothing was edited: approve or reject the request as proposed.")
        return data

    def _edit_of(self, data: dict[str, Any]) -> dict[str, Any] | None:
        if "body" not in self.fields:
            return None
        body = str(data.get("body", "")).replace("\r\n", "\n")
        if body.strip() == self.approval.payload["body"].strip():
            return None
        return {"body": body}

    def edited_payload(self) -> dict[str, Any] | None:
        """The edited draft (`{"body": …}`), or None when the draft is unchanged.

        Browsers send a textarea's line breaks as CRLF; the form strips the ends."""
        return self._edit_of(self.cleaned_data)


def _decide_selected(decision: str) -> Callable[..., None]:
    decide = approval_approve if decision == "approve" else approval_reject
    done_word = "Approved" if decision == "approve" else "Rejected"

    def action(modeladmin: ApprovalRequestAdmin, request: HttpRequest, queryset: QuerySet[ApprovalRequest]) -> None:
        def apply(approval: ApprovalRequest) -> object:
            return decide(approval, user=request.user, note=f"{done_word.lower()} in bulk from the admin queue")

        admin_bulk(
            modeladmin,
            request,
            queryset.order_by("created_at", "pk"),
            apply,
            ApprovalError,
            f"{done_word} {{n}} request(s).",
        )

    action.__name__ = f"{decision}_selected"
    return admin.action(description=f"{decision.capitalize()} selected", permissions=["change"])(action)


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ScopedAdmin):
    """The approval queue: filter, decide in bulk, or open one to edit and decide."""

    list_display = [
        "public_id",
        "kind",
        "status",
        "summary",
        "lead",
        "proposed_by",
        "decided_by",
        "waiting",
        "created_at",
        "business",
    ]
    list_select_related = ["lead", "decided_by", "business"]
    list_filter = ["status", "kind", AgeFilter]
    search_fields = ["public_id", "lead__public_id", "summary"]
    actions = [_decide_selected("approve"), _decide_selected("reject")]
    change_form_template = "admin/approvals/approvalrequest/change_form.html"
    fields = (
        "public_id",
        "business",
        "lead",
        "message",
        "estimate",
        "contact_point",
        "kind",
        "status",
        "summary",
        "payload_text",
        "original_payload_text",
        "proposed_by",
        "proposed_by_user",
        "decided_by",
        "decided_at",
        "decision_note",
        "expires_at",
        "created_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="waiting")
    def waiting(self, approval: ApprovalRequest) -> str:
        if approval.status != ApprovalRequest.Status.PENDING:
            return "—"
        return timesince(approval.created_at)

    @admin.display(description="payload")
    def payload_text(self, approval: ApprovalRequest) -> str:
        return format_html("<pre>{}</pre>", json.dumps(approval.payload, indent=2, ensure_ascii=False))

    @admin.display(description="original payload (before the edit)")
    def original_payload_text(self, approval: ApprovalRequest) -> str:
        if approval.original_payload is None:
            return "—"
        return format_html("<pre>{}</pre>", json.dumps(approval.original_payload, indent=2, ensure_ascii=False))

    def get_urls(self) -> list[Any]:
        return [
            path(
                "<path:object_id>/decide/",
                self.admin_site.admin_view(self.decide_view),
                name="approvals_approvalrequest_decide",
            ),
            *super().get_urls(),
        ]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        approval = self.get_object(request, object_id)
        extra = dict(
            extra_context or {}, show_save=False, show_save_and_continue=False, show_save_and_add_another=False
        )
        if approval is not None:
            can_decide = approval.status == ApprovalRequest.Status.PENDING and self.has_change_permission(
                request, approval
            )
            extra.update(can_decide=can_decide, decision_form=DecisionForm(approval=approval))
        return super().change_view(request, object_id, form_url, extra)

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        approval = self.get_object(request, object_id)  # scoped; a malformed id is None too
        if approval is None:
            raise Http404("no such approval request")
        back = HttpResponseRedirect(reverse("admin:approvals_approvalrequest_change", args=[approval.pk]))
        if request.method != "POST":
            return back
        if not self.has_change_permission(request, approval):
            raise PermissionDenied("your role in this business may not decide requests")
        form = DecisionForm(request.POST, approval=approval)
        if not form.is_valid():
            self.message_user(request, f"Not decided: {form.errors.as_text()}", messages.ERROR)
            return back
        note, decision, edited = form.cleaned_data["note"], form.cleaned_data["decision"], form.edited_payload()
        try:
            if decision == "reject":
                approval_reject(approval, user=request.user, note=note)
            elif decision == "edit" and edited is not None:
                approval_edit(approval, user=request.user, payload=edited, note=note)
            else:
                # A reworded draft sent with "Approve" is a proposal all the same.
                approval_approve(approval, user=request.user, note=note, edited_payload=edited)
        except ApprovalError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return back
        if approval.status == ApprovalRequest.Status.PENDING:
            self.message_user(
                request,
                f"Your edit of {approval.public_id} is saved as your proposal, with a receipt: "
                "another manager or owner approves it.",
                messages.WARNING,
            )
        else:
            self.message_user(
                request, f"{approval.status.capitalize()} {approval.public_id}, with a receipt.", messages.SUCCESS
            )
        return back
