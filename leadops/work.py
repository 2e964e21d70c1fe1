"""A setter's "My next actions": their open tasks by due time, overdue first,
each completed with its outcome and either the next action or a closing
outcome (the Task Creator's rule, enforced in crm.services.next_action)."""

from __future__ import annotations

from datetime import datetime

from django import forms
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.db.models import Case, IntegerField, QuerySet, Value, When
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from crm.localtime import zone_label
from crm.models import Task
from crm.permissions import can
from crm.selectors import scope_for
from crm.services.next_action import NextActionError, task_complete

CLOSE_CHOICES = [
    ("", "— keep the lead open —"),
    ("won", "won"),
    ("lost", "lost"),
    ("disqualified", "disqualified"),
    ("unresponsive", "unresponsive"),
]


class CompleteForm(forms.Form):
    outcome = forms.CharField(max_length=300, help_text="What happened")
    reached = forms.BooleanField(required=False, label="I reached the lead (counts for speed to lead)")
    next_title = forms.CharField(max_length=300, required=False, label="Next action")
    next_due = forms.DateTimeField(
        required=False,
        label="Next action due (your time zone)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"],
    )
    close_as = forms.ChoiceField(choices=CLOSE_CHOICES, required=False, label="Or close the lead as")
    lost_reason = forms.CharField(max_length=300, required=False)


def _my_tasks(request: HttpRequest) -> QuerySet[Task]:
    now = timezone.now()
    return (
        Task.objects.filter(owner_id__in=scope_for(request.user).member_ids, status=Task.Status.OPEN)
        .select_related("lead__contact", "lead__business", "business")
        .annotate(overdue=Case(When(due_at__lt=now, then=Value(0)), default=Value(1), output_field=IntegerField()))
        .order_by("overdue", "due_at", "pk")
    )


@staff_member_required
def my_next_actions(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    tasks = list(_my_tasks(request))
    counts = {
        "open": len(tasks),
        "overdue": sum(1 for t in tasks if t.due_at < now),
        "today": sum(1 for t in tasks if now <= t.due_at and t.due_at.date() == now.date()),
    }
    return render(
        request, "leadops/next_actions.html", {"tasks": tasks, "counts": counts, "now": now, "title": "My next actions"}
    )


@staff_member_required
def task_complete_view(request: HttpRequest, public_id: str) -> HttpResponse:
    task = _my_tasks(request).filter(public_id=public_id).first()
    if task is None:
        raise Http404("no such open task of yours")
    if not can(request.user, "task.complete", task.business_id):
        raise PermissionDenied("your role in this business may not complete tasks")
    form = CompleteForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        # Read in the viewer's zone (the one the page names), made aware by the form.
        due: datetime | None = data["next_due"]
        try:
            task_complete(
                task,
                actor=request.user.get_username(),
                outcome=data["outcome"],
                next_title=data["next_title"],
                next_due_at=due,
                terminal_stage=data["close_as"],
                lost_reason=data["lost_reason"],
                reached=data["reached"],
            )
        except NextActionError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Done: {task.title}")
            return redirect("my-next-actions")
    return render(
        request,
        "leadops/task_complete.html",
        {"task": task, "form": form, "zone": zone_label(), "title": f"Complete: {task.title}"},
    )
