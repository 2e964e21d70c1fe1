"""The workspace's pages and actions.

Each view parses the request, asks crm.permissions, calls one selector or
service and renders. Every action is a POST form that works without
JavaScript (it answers with a redirect and a flash message); sent by htmx
it answers 204 with two events instead, `workspace-changed` (the live
regions poll at once) and `workspace-flash` (what happened, in words). A
refusal by a service is said back and writes nothing.

The live fragments are conditional: the client sends the version it shows
(`v`, or `n` for the unread badge) and gets 204 while nothing changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from agents.followup.hold import automation_hold
from agents.playbook.copilot import reply_send
from agents.routing.assign import lead_reassign
from crm.inbox import InboxQuery, unread_conversations
from crm.models import Lead, Message
from crm.permissions import can, can_anywhere
from crm.services.conversations import conversation_read, conversation_settle, note_add
from crm.services.lead_sync import LeadSyncError
from crm.services.next_action import NextActionError, next_action_set
from crm.services.reached import call_log, lead_reached
from leadops.workspace.forms import (
    INBOX_CHANNELS,
    INBOX_INTENTS,
    INBOX_SORTS,
    INBOX_STAGES,
    CallForm,
    HoldForm,
    InboxFilterForm,
    NextActionForm,
    NoteForm,
    ReasonForm,
    ReassignForm,
    ReplyForm,
)
from leadops.workspace.selectors import (
    Composer,
    Viewer,
    composer_read,
    inbox_read,
    inbox_version,
    lead_for_thread,
    source_choices,
    thread_read,
    thread_version,
    viewer_for,
    who_choices,
    who_for,
)
from leadops.workspace.templatetags.workspace import when

View = Callable[..., HttpResponse]
REFUSED = (LeadSyncError, NextActionError, ValueError)


def workspace(view: View) -> View:
    """A workspace page: a signed-in user whose role reads conversations
    somewhere (the sales side). The view gets the viewer."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not can_anywhere(request.user, "message.view"):
            raise PermissionDenied("the workspace is for the roles that read conversations")
        return view(request, viewer_for(request.user), *args, **kwargs)

    signed_in = login_required(wrapped)

    @wraps(view)
    def entry(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.htmx and not request.user.is_authenticated:  # type: ignore[attr-defined]
            # A poll or a form whose session ended: the whole page goes to the
            # login (and back to that page after it), not the login into a fragment.
            page = request.headers.get("HX-Current-URL") or request.get_full_path()
            return HttpResponse(status=204, headers={"HX-Redirect": redirect_to_login(page).url})
        return signed_in(request, *args, **kwargs)

    return entry


def home(request: HttpRequest) -> HttpResponse:
    """Each role's own page: the inbox for the sales side, and for a
    technician (who reads no conversation) their visits with each brief."""
    if request.user.is_authenticated and not can_anywhere(request.user, "message.view"):
        return redirect("admin:crm_appointment_changelist")
    return redirect("workspace:inbox")


# ------------------------------------------------------------------ the inbox


def _inbox_query(request: HttpRequest, viewer: Viewer) -> tuple[InboxQuery, int, dict[str, Any]]:
    form = InboxFilterForm(request.GET, who=who_choices(viewer), sources=source_choices(request.user))
    query, page = form.query()
    query = replace(query, who=who_for(request.user, viewer, query.who))
    return query, page, {"who_choices": who_choices(viewer), "form": form}


def _query_string(query: InboxQuery, page: int = 1, **extra: Any) -> str:
    fields = {
        "who": query.who,
        "needs_reply": "on" if query.needs_reply else "",
        "channel": query.channel,
        "stage": query.stage,
        "source": query.source,
        "intent": query.intent,
        "sort": query.sort,
        "q": query.q,
        "page": page if page > 1 else "",
        **extra,
    }
    return urlencode({k: v for k, v in fields.items() if v not in ("", None)})


def _inbox_context(
    request: HttpRequest, viewer: Viewer, query: InboxQuery, page: int, *, now: datetime, version: str | None = None
) -> dict[str, Any]:
    screen = inbox_read(request.user, query, page=page, now=now, region=viewer.region, version=version)
    found, asked = screen.page, _query_string(query, page)
    return {
        "screen": screen,
        "query": query,
        "here": reverse("workspace:inbox") + (f"?{asked}" if asked else ""),
        "live_url": reverse("workspace:inbox-live") + "?" + _query_string(query, page, v=screen.version),
        "previous_url": "?" + _query_string(query, found.page - 1) if found.page > 1 else "",
        "next_url": "?" + _query_string(query, found.page + 1) if found.has_next else "",
        "unread": screen.unread,
        "viewer": viewer,
    }


@workspace
@require_GET
def inbox(request: HttpRequest, viewer: Viewer) -> HttpResponse:
    query, page, extra = _inbox_query(request, viewer)
    context = _inbox_context(request, viewer, query, page, now=timezone.now())
    context.update(
        extra,
        title="Inbox",
        sources=extra["form"].fields["source"].choices,
        channels=INBOX_CHANNELS,
        stages=INBOX_STAGES,
        intents=INBOX_INTENTS,
        sorts=INBOX_SORTS,
    )
    return render(request, "workspace/inbox.html", context)


@workspace
@require_GET
def inbox_live(request: HttpRequest, viewer: Viewer) -> HttpResponse:
    """The inbox's rows again, or 204 while the version shown is current."""
    now = timezone.now()
    version = inbox_version(request.user, now=now)
    if request.GET.get("v") == version:
        return HttpResponse(status=204)
    query, page, _extra = _inbox_query(request, viewer)
    context = _inbox_context(request, viewer, query, page, now=now, version=version)
    return render(request, "workspace/_inbox_list.html", context)


@workspace
@require_GET
def unread(request: HttpRequest, viewer: Viewer) -> HttpResponse:
    """The top bar's unread badge again, or 204 while its number is current
    (the number is the version: it is all the badge shows)."""
    count = unread_conversations(request.user)
    if request.GET.get("n") == str(count):
        return HttpResponse(status=204)
    return render(request, "workspace/_unread_badge.html", {"unread": count})


# ------------------------------------------------------------------ the thread


def _lead(request: HttpRequest, public_id: str) -> Lead:
    lead = lead_for_thread(request.user, public_id)
    if lead is None:
        raise Http404("no such lead")
    return lead


def _composer_context(
    request: HttpRequest,
    lead: Lead,
    composer: Composer,
    *,
    sent: Message | None = None,
    form: ReplyForm | None = None,
) -> dict[str, Any]:
    offer = composer.offer
    if form is None:
        asked = request.GET.get("template")
        picked = offer.suggested if asked == "suggested" else None
        picked = picked or next((d for d in offer.templates if asked and d.template_key == asked), None)
        start = picked or (offer.suggested if composer.prefill and sent is None else None)
        form = ReplyForm(
            initial={"body": start.body if start else "", "template_key": (start.template_key or "") if start else ""},
            channels=offer.channels,
        )
    return {
        "lead": lead,
        "composer": composer,
        "form": form,
        "sent": sent,
        "focus": request.GET.get("reply") == "1" or request.GET.get("template") is not None,
        "may_send": can(request.user, "message.send", lead.business_id),
    }


@workspace
@require_GET
def thread(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    lead = _lead(request, public_id)
    conversation_read(request.user, lead)
    now = timezone.now()
    version = thread_version(request.user, lead, now=now)
    read = thread_read(request.user, lead, now=now, tz=timezone.get_current_timezone())
    sent_id = request.GET.get("sent")
    sent = next((i.message for i in read.items if i.message and i.message.public_id == sent_id), None)
    context = _composer_context(request, lead, read.composer, sent=sent)
    context.update(
        thread=read,
        version=version,
        title=lead.contact.name or lead.public_id,
        unread=unread_conversations(request.user),
        viewer=viewer,
        next_action_form=NextActionForm(initial={"title": lead.next_action, "due_at": lead.next_action_due_at}),
        call_form=CallForm(),
        note_form=NoteForm(),
        reassign_form=ReassignForm(business_id=lead.business_id, initial={"owner": lead.owner_id}),
    )
    return render(request, "workspace/thread.html", context)


@workspace
@require_GET
def thread_live(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    """The thread's live part again, or 204 while the version shown is current."""
    lead = _lead(request, public_id)
    now = timezone.now()
    version = thread_version(request.user, lead, now=now)
    if request.GET.get("v") == version:
        return HttpResponse(status=204)
    # The person's new message is on the screen: it is read.
    conversation_read(request.user, lead)
    read = thread_read(request.user, lead, now=now, tz=timezone.get_current_timezone())
    return render(request, "workspace/_thread_live.html", {"thread": read, "lead": lead, "version": version})


# ------------------------------------------------------------------ actions


def _thread_url(lead: Lead) -> str:
    return reverse("workspace:thread", args=[lead.public_id])


def _answer(request: HttpRequest, lead: Lead, level: str, text: str, *, back: str = "") -> HttpResponse:
    if request.htmx:  # type: ignore[attr-defined]
        events = {"workspace-changed": True, "workspace-flash": {"level": level, "text": text}}
        return HttpResponse(status=204, headers={"HX-Trigger": json.dumps(events)})
    messages.add_message(request, messages.SUCCESS if level == "success" else messages.ERROR, text)
    return redirect(back or _thread_url(lead))


def _act(
    request: HttpRequest,
    lead: Lead,
    permission: str,
    form: forms.Form,
    apply: Callable[[dict[str, Any]], str],
    *,
    back: str = "",
) -> HttpResponse:
    """Check the permission and the form, run the service, say what happened."""
    if not can(request.user, permission, lead.business_id):
        raise PermissionDenied("your role in this business may not do this")
    if not form.is_valid():
        problems = "; ".join(f"{name}: {_said(errors)}" for name, errors in form.errors.items())
        return _answer(request, lead, "error", f"Not done — {problems}", back=back)
    try:
        text = apply(form.cleaned_data)
    except REFUSED as exc:
        return _answer(request, lead, "error", f"Not done: {exc}", back=back)
    return _answer(request, lead, "success", text, back=back)


def _said(errors: Any) -> str:
    return " ".join(str(e) for e in errors)


def _actor(request: HttpRequest) -> str:
    return str(request.user.get_username())


def _back(request: HttpRequest) -> str:
    """Where a form asked to return (the inbox with its filters), if it is ours."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return target
    return ""


@workspace
@require_POST
def send(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    """Send the composer's reply through the gate and show its verdict."""
    lead = _lead(request, public_id)
    if not can(request.user, "message.send", lead.business_id):
        raise PermissionDenied("your role in this business may not send messages")
    form = ReplyForm(request.POST)
    if not form.is_valid():
        if request.htmx:  # type: ignore[attr-defined]
            return render(
                request, "workspace/_composer.html", _composer_context(request, lead, composer_read(lead), form=form)
            )
        messages.error(request, "Not sent: " + "; ".join(_said(e) for e in form.errors.values()))
        return redirect(_thread_url(lead) + "#composer")
    try:
        message = reply_send(lead, user=request.user, **form.cleaned_data)
    except ValueError as exc:
        messages.error(request, f"Not sent: {exc}")
        return redirect(_thread_url(lead) + "#composer")
    if request.htmx:  # type: ignore[attr-defined]
        context = _composer_context(request, lead, composer_read(lead), sent=message)
        response = render(request, "workspace/_composer.html", context)
        response["HX-Trigger"] = json.dumps({"workspace-changed": True})
        return response
    return redirect(_thread_url(lead) + "?" + urlencode({"sent": message.public_id}) + "#composer")


@workspace
@require_POST
def done(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    """Mark the conversation done: what the person wrote needs no answer."""
    lead = _lead(request, public_id)
    name = lead.contact.name or lead.public_id

    def apply(data: dict[str, Any]) -> str:
        reason = data["reason"] or "marked done in the workspace"
        settled = conversation_settle(lead, actor=_actor(request), reason=reason)
        return f"{name}: marked done." if settled else f"{name}: nothing was waiting."

    return _act(request, lead, "conversation.settle", ReasonForm(request.POST), apply, back=_back(request))


@workspace
@require_POST
def next_action(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    lead = _lead(request, public_id)

    def apply(data: dict[str, Any]) -> str:
        task = next_action_set(
            lead, data["title"], data["due_at"], actor=_actor(request), reason="set in the workspace"
        )
        return f"Next action: {task.title}, due {when(task.due_at)}."

    return _act(request, lead, "lead.change", NextActionForm(request.POST), apply)


@workspace
@require_POST
def reached(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    lead = _lead(request, public_id)

    def apply(data: dict[str, Any]) -> str:
        first = lead_reached(lead, actor=_actor(request), how=data["reason"] or "marked reached in the workspace")
        return "Reached: first contact recorded." if first else "Reached (the first contact was recorded before)."

    return _act(request, lead, "lead.change", ReasonForm(request.POST), apply)


@workspace
@require_POST
def hold(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    lead = _lead(request, public_id)

    def apply(data: dict[str, Any]) -> str:
        holding = data["hold"]
        reason = data["reason"] or ("held from the workspace" if holding else "released from the workspace")
        automation_hold(lead, hold=holding, actor=_actor(request), reason=reason)
        if holding:
            return "On hold: automation stopped, and every send waits until someone releases it."
        return "Released: sends go through the gate again, and a stopped path resumes."

    return _act(request, lead, "lead.change", HoldForm(request.POST), apply)


@workspace
@require_POST
def call(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    lead = _lead(request, public_id)

    def apply(data: dict[str, Any]) -> str:
        logged = call_log(
            lead,
            actor=_actor(request),
            outcome=data["outcome"],
            direction=data["direction"],
            minutes=data["minutes"],
            note=data["note"],
        )
        return f"Call logged ({logged.public_id})."

    return _act(request, lead, "call.add", CallForm(request.POST), apply)


@workspace
@require_POST
def note(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    lead = _lead(request, public_id)

    def apply(data: dict[str, Any]) -> str:
        note_add(lead, author=_actor(request), body=data["body"])
        return "Note added."

    return _act(request, lead, "note.add", NoteForm(request.POST), apply)


@workspace
@require_POST
def reassign(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    lead = _lead(request, public_id)

    def apply(data: dict[str, Any]) -> str:
        owner = data["owner"]
        lead_reassign(lead, owner, actor=_actor(request), reason=data["reason"] or "reassigned in the workspace")
        return f"Reassigned to {owner}."

    return _act(request, lead, "lead.reassign", ReassignForm(request.POST, business_id=lead.business_id), apply)
