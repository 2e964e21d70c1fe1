"""Approvals in the workspace: the list of what waits for a decision, and
the three decisions a manager or owner makes inside the lead's thread —
approve, edit and approve, reject with a note.

The views parse, ask `crm.permissions` (`approval.decide`: a setter gets
403), call one service of `approvals.services` and answer as every
workspace action does: without JavaScript a redirect and a flash message,
with htmx the decision panel again and the `workspace-changed` and
`workspace-flash` events. A refusal by the service (the proposer deciding
their own words, a colleague deciding first) is said in words and writes
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from approvals.kinds import DRAFT_MAX_LENGTH
from approvals.models import ApprovalRequest
from approvals.selectors import approvals_pending_count
from approvals.services import (
    ApprovalConflict,
    ApprovalError,
    ApprovalForbidden,
    ApprovalInvalid,
    ApprovalNotPending,
    SelfApproval,
    SentSinceUnseen,
    approval_approve,
    approval_reject,
)
from crm.inbox import unread_conversations
from crm.permissions import can_anywhere
from leadops.workspace.held import approval_for_decider, approvals_list, held_one
from leadops.workspace.selectors import Viewer
from leadops.workspace.templatetags.workspace import verdict
from leadops.workspace.views import workspace

PENDING = ApprovalRequest.Status.PENDING


class SeenForm(forms.Form):
    # The messages that went out after the held reply which the approver was
    # shown: one sent since then is not approved over unseen.
    seen = forms.CharField(required=False, widget=forms.HiddenInput)

    def seen_ids(self) -> list[str]:
        return [part for part in self.cleaned_data["seen"].split(",") if part.strip()]


class ApproveForm(SeenForm):
    pass


class EditForm(SeenForm):
    body = forms.CharField(max_length=DRAFT_MAX_LENGTH, strip=True, error_messages={"required": "write the text"})
    note = forms.CharField(required=False, max_length=1000)


class RejectForm(SeenForm):
    note = forms.CharField(
        max_length=1000, strip=True, error_messages={"required": "say why: the proposer reads it in their thread"}
    )


def _decider(request: HttpRequest) -> None:
    if not can_anywhere(request.user, "approval.decide"):
        raise PermissionDenied("approvals are decided by the business's managers and owners")


@workspace
@require_GET
def approvals(request: HttpRequest, viewer: Viewer) -> HttpResponse:
    """What waits for the viewer's decision, the longest waiting first."""
    _decider(request)
    rows = approvals_list(request.user)
    context = {"rows": rows, "title": "Approvals", "unread": unread_conversations(request.user), "viewer": viewer}
    return render(request, "workspace/approvals.html", context)


@workspace
@require_GET
def approval(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    """One request's address: its panel in the lead's thread (the back
    office's page for a request about no lead)."""
    _decider(request)
    found = _approval(request, public_id)
    if found.lead is None:
        return redirect("admin:approvals_approvalrequest_change", found.pk)
    return redirect(_panel_url(found))


def _approval(request: HttpRequest, public_id: str) -> ApprovalRequest:
    found = approval_for_decider(request.user, public_id)
    if found is None:
        raise Http404("no such approval request")
    return found


def _panel_url(approval: ApprovalRequest) -> str:
    assert approval.lead is not None
    return reverse("workspace:thread", args=[approval.lead.public_id]) + f"#decide-{approval.public_id}"


def _decide(
    request: HttpRequest,
    public_id: str,
    form: SeenForm,
    apply: Callable[[ApprovalRequest, dict[str, Any], list[str]], str],
) -> HttpResponse:
    """Check who asks, parse the form, run the decision, say what happened."""
    _decider(request)
    found = _approval(request, public_id)
    if not form.is_valid():
        problems = "; ".join(" ".join(str(e) for e in errors) for errors in form.errors.values())
        return _answer(request, found, "error", f"Not done: {problems}.")
    try:
        text = apply(found, form.cleaned_data, form.seen_ids())
    except ApprovalError as exc:
        return _answer(request, found, "error", f"Not done: {refusal_words(exc, found)}")
    return _answer(request, found, "success", text)


def _answer(request: HttpRequest, approval: ApprovalRequest, level: str, text: str) -> HttpResponse:
    if request.htmx:  # type: ignore[attr-defined]
        context = {
            "h": held_one(request.user, approval),
            "said": {"level": level, "text": text},
            # The top bar's count, swapped out of band: one fewer waits now.
            "badge": approvals_pending_count(request.user),
        }
        response = render(request, "workspace/_decide.html", context)
        events = {"workspace-changed": True, "workspace-flash": {"level": level, "text": text}}
        response["HX-Trigger"] = json.dumps(events)
        return response
    messages.add_message(request, messages.SUCCESS if level == "success" else messages.ERROR, text)
    back = request.POST.get("next", "")
    if back and url_has_allowed_host_and_scheme(back, {request.get_host()}, request.is_secure()):
        return redirect(back)
    if approval.lead is None:
        return redirect("workspace:approvals")
    return redirect(_panel_url(approval) if level != "success" else _result_url(approval))


def _result_url(approval: ApprovalRequest) -> str:
    """After a decision: the held message in the conversation, where its outcome shows."""
    assert approval.lead is not None
    anchor = approval.message.public_id if approval.message is not None else "conversation"
    return reverse("workspace:thread", args=[approval.lead.public_id]) + f"#{anchor}"


@workspace
@require_POST
def approve(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    def apply(approval: ApprovalRequest, data: dict[str, Any], seen: list[str]) -> str:
        decided = approval_approve(approval, user=request.user, seen=seen)
        return _approved_words(decided)

    return _decide(request, public_id, ApproveForm(request.POST), apply)


@workspace
@require_POST
def edit(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    """Approve with the words as edited. Unchanged, it is an approval; changed,
    the editor wrote them, so they become the editor's proposal and another
    manager or owner approves them (nobody approves their own words)."""

    def apply(approval: ApprovalRequest, data: dict[str, Any], seen: list[str]) -> str:
        body = data["body"].replace("\r\n", "\n")
        edited = {"body": body} if body.strip() != str(approval.payload.get("body", "")).strip() else None
        decided = approval_approve(approval, user=request.user, note=data["note"], edited_payload=edited, seen=seen)
        if decided.status == PENDING:
            return "Your edit is saved as your proposal: another manager or owner approves it before it goes."
        return _approved_words(decided)

    return _decide(request, public_id, EditForm(request.POST), apply)


@workspace
@require_POST
def reject(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    def apply(approval: ApprovalRequest, data: dict[str, Any], seen: list[str]) -> str:
        approval_reject(approval, user=request.user, note=data["note"])
        if approval.message is not None:
            return "Rejected: the reply is not sent, and whoever proposed it reads your note in their thread."
        return "Rejected, with your note."

    return _decide(request, public_id, RejectForm(request.POST), apply)


def _approved_words(approval: ApprovalRequest) -> str:
    message = approval.message
    if message is None:
        return "Approved."
    message.refresh_from_db()
    said = verdict(message)
    outcome = said["label"] + (f" — {said['reason']}" if said["reason"] else "")
    return f"Approved: the reply went through the send gate ({outcome})."


def refusal_words(exc: ApprovalError, approval: ApprovalRequest) -> str:
    """Why a decision was refused, as a person says it (the services name
    records by id, for the API and the receipts)."""
    if isinstance(exc, SelfApproval):
        return "you proposed these words (or reworded them last), so another manager or owner decides them."
    if isinstance(exc, ApprovalForbidden):
        return "only the business's managers and owners decide approvals."
    if isinstance(exc, ApprovalNotPending):
        approval.refresh_from_db()
        if approval.status == PENDING or approval.status == ApprovalRequest.Status.EXPIRED:
            return "too late: nobody decided in time and the approval expired."
        who = f" by {approval.decided_by.get_username()}" if approval.decided_by else ""
        return f"someone was first: it was already {approval.get_status_display().lower()}{who}."
    if isinstance(exc, SentSinceUnseen):
        return str(exc)
    if isinstance(exc, ApprovalConflict):
        if approval.message is not None:
            approval.message.refresh_from_db()
            said = verdict(approval.message)["label"].lower()
            return f"the reply no longer waits for approval ({said}): nothing to approve; reject it to clear it."
        return "what it concerns has moved on: there is nothing to approve; reject it to clear it."
    if isinstance(exc, ApprovalInvalid):
        return str(exc).replace("payload.body: ", "the text: ")
    return str(exc)
