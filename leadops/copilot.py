"""The Human Setter Copilot: one page per lead with what a setter needs to
reply well — source, consent per channel, the conversation, owner and next
action — and a suggested reply from the approved playbook that the setter can
edit and send through the same gate as everything else.

A thin view: reads through crm selectors, drafts with the assistant, sends
with the gate; an edited reply the claims guard flags waits for a manager.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from agents.outbound.gate import message_send
from agents.playbook.assistant import draft_acknowledgement, draft_check, draft_reply
from crm.models import Channel, ConsentState, Lead, Message
from crm.permissions import can
from crm.selectors import lead_list_visible, lead_timeline


class ReplyForm(forms.Form):
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), max_length=1600)
    template_key = forms.CharField(required=False, widget=forms.HiddenInput)


def _lead(request: HttpRequest, public_id: str) -> Lead:
    # The conversation is the sales side's: a technician's lead is a 404 here.
    lead = (
        lead_list_visible(request.user, "message.view")
        .select_related("business", "contact", "owner", "service_line")
        .filter(public_id=public_id)
        .first()
    )
    if lead is None:
        raise Http404("no such lead")
    return lead


def _consent(lead: Lead) -> dict[str, str]:
    states = ConsentState.objects.filter(contact_point__contact=lead.contact).values_list("channel", "status")
    summary = {channel: "unknown" for channel in Channel.values}
    for channel, status in states:
        if summary.get(channel) != "revoked":
            summary[channel] = status
    return summary


@staff_member_required
def lead_copilot(request: HttpRequest, public_id: str) -> HttpResponse:
    lead = _lead(request, public_id)
    conversation = list(Message.objects.filter(lead=lead).order_by("created_at", "pk"))
    last_in = next((m for m in reversed(conversation) if m.direction == "in"), None)
    draft = draft_reply(lead, last_in.body) if last_in else draft_acknowledgement(lead)
    may_send = can(request.user, "message.send", lead.business_id)
    if request.method == "POST":
        if not may_send:
            raise PermissionDenied("you may not send messages for this business")
        form = ReplyForm(request.POST)
        if form.is_valid():
            body = form.cleaned_data["body"]
            unchanged = body.strip() == (draft.body or "").strip() and draft.unmodified_approved
            checked = draft if unchanged else draft_check(body, template_key=form.cleaned_data["template_key"] or None)
            message = message_send(
                lead=lead,
                channel="sms",
                body=body,
                actor=request.user.get_username(),
                idempotency_key=f"copilot:{lead.public_id}:{request.user.pk}:{timezone.now().timestamp()}",
                automated=False,
                template_key=form.cleaned_data["template_key"],
                needs_approval=checked.needs_person,
                requested_by=request.user,
            )
            level = messages.SUCCESS if message.status in ("dry_run", "queued") else messages.WARNING
            note = f" ({message.block_reason})" if message.block_reason else ""
            messages.add_message(request, level, f"Reply {message.public_id}: {message.status}{note}.")
            return redirect("lead-copilot", public_id=lead.public_id)
    else:
        form = ReplyForm(initial={"body": draft.body or "", "template_key": draft.template_key or ""})
    context: dict[str, Any] = {
        "lead": lead,
        "consent": _consent(lead),
        "conversation": conversation,
        "touches": [e for e in lead_timeline(lead) if e.kind == "touch"],
        "draft": draft,
        "form": form,
        "title": f"Copilot — {lead.contact.name or lead.public_id}",
    }
    return render(request, "leadops/copilot.html", context)
