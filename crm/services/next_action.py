"""Task Creator: every active lead has exactly one open next action, with an
owner and a due time (invariant 3, backed by the partial unique constraint
`crm_task_one_open_next_action`).

Setting a new next action replaces the open one in the same transaction;
completing one requires either the next one or a terminal outcome, so a lead
never falls out of the list by being worked.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from crm.models import CLOSED_STAGES, Lead, Stage, Task, TeamMember
from crm.services import lead_sync
from crm.services.reached import lead_reached
from crm.services.receipts import receipt_write
from crm.services.records import task_create

TERMINAL_STAGES = tuple(CLOSED_STAGES)


class NextActionError(Exception):
    """A completion the Task Creator refuses: nothing is written."""


@transaction.atomic
def next_action_set(
    lead: Lead, title: str, due_at: datetime, *, actor: str, reason: str, owner: TeamMember | None = None
) -> Task:
    """Make `title` the lead's one open next action (replacing any other)."""
    lead = lead_sync.lead_for_update(lead)
    current = _open_next_action(lead)
    owner = owner or lead.owner
    if (
        current is not None
        and current.title == title
        and current.due_at == due_at
        and current.owner_id == (owner.pk if owner else None)
    ):
        return current
    if current is not None:
        Task.objects.filter(pk=current.pk).update(
            status=Task.Status.CANCELED, outcome="replaced", completed_at=timezone.now(), completed_by=actor
        )
    return _next_action_create(lead, title, due_at, actor=actor, reason=reason, owner=owner)


@transaction.atomic
def next_action_update(
    task: Task, title: str, due_at: datetime, *, actor: str, reason: str, owner: TeamMember | None = None
) -> Task:
    """Change the lead's open next action in place: what it asks, by when,
    and (given `owner`) who does it. The same task, so what is linked to it
    stays (the missed calls a call back counts); a `task.updated` receipt
    with before and after, and the lead's copy of it. For a next action that
    grows rather than ends: a person calling again before anyone called back.
    Raises NextActionError unless `task` is an open next action. Joins the
    caller's transaction; locks the lead, then the task.
    """
    if task.lead_id is None:
        raise NextActionError(f"{task.public_id} is about no lead")
    lead = lead_sync.lead_for_update(task.lead_id)
    task = Task.objects.select_for_update(of=("self",)).select_related("owner__user").get(pk=task.pk)
    if task.kind != Task.Kind.NEXT_ACTION or task.status != Task.Status.OPEN:
        raise NextActionError(f"{task.public_id} is not the lead's open next action")
    title, owner = title[:300], owner or task.owner
    if (task.title, task.due_at, task.owner_id) == (title, due_at, owner.pk if owner else None):
        return task
    before = {"title": task.title, "due_at": task.due_at, "owner": _username(task.owner)}
    Task.objects.filter(pk=task.pk).update(title=title, due_at=due_at, owner=owner)
    task.title, task.due_at, task.owner = title, due_at, owner
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=task.public_id,
        actor=actor,
        action="task.updated",
        reason=reason,
        before=before,
        after={"title": title, "due_at": due_at, "owner": _username(owner)},
    )
    if (lead.next_action, lead.next_action_due_at) != (title, due_at):
        lead_sync.lead_set_next_action(lead, title, due_at, actor=actor, reason=reason)
    return task


def _username(member: TeamMember | None) -> str | None:
    return member.user.get_username() if member else None


def _next_action_create(
    lead: Lead, title: str, due_at: datetime, *, actor: str, reason: str, owner: TeamMember | None
) -> Task:
    """The new open next action and the lead's copy of it (the lead locked, none open)."""
    task = task_create(
        lead=lead, title=title, due_at=due_at, actor=actor, owner=owner or lead.owner, reason=reason, checked=True
    )
    lead_sync.lead_set_next_action(lead, title, due_at, actor=actor, reason=reason)
    return task


def _open_next_action(lead: Lead) -> Task | None:
    return lead.tasks.filter(kind="next_action", status=Task.Status.OPEN).first()


def next_action_ensure(
    lead: Lead, title: str, due_at: datetime, *, actor: str, reason: str, owner: TeamMember | None = None
) -> Task | None:
    """Create a next action only where the open lead has none."""
    if not lead.is_open:
        return None
    if lead_sync.lead_is_current(lead):
        # The unit of work holds the lead's row: the answer read here stays
        # true, and next_action_set would read it again.
        if _open_next_action(lead) is not None:
            return None
        return _next_action_create(lead, title, due_at, actor=actor, reason=reason, owner=owner)
    if lead.tasks.filter(kind="next_action", status=Task.Status.OPEN).exists():
        return None
    return next_action_set(lead, title, due_at, actor=actor, reason=reason, owner=owner)


@transaction.atomic
def task_complete(
    task: Task,
    *,
    actor: str,
    outcome: str,
    next_title: str = "",
    next_due_at: datetime | None = None,
    terminal_stage: str = "",
    lost_reason: str = "",
    reached: bool = False,
    now: datetime | None = None,
) -> Task | None:
    """Complete a task with its outcome.

    For a lead's next action, the caller must name the next one (title and
    due time) or a terminal stage; the new next action (if any) is returned.
    `reached` records that a person got hold of the lead (speed to lead).
    """
    now = now or timezone.now()
    task = (
        Task.objects.select_for_update(of=("self",))
        .select_related("lead__business", "lead__owner__user")
        .get(pk=task.pk)
    )
    if task.status != Task.Status.OPEN:
        raise NextActionError(f"{task.public_id} is already {task.status}")
    if not outcome.strip():
        raise NextActionError("say what happened (the outcome)")
    lead = task.lead
    needs_next = task.kind == "next_action" and lead is not None and lead.is_open
    if needs_next and not terminal_stage and not (next_title.strip() and next_due_at):
        raise NextActionError("set the next action and its due time, or close the lead with an outcome")
    if terminal_stage and terminal_stage not in TERMINAL_STAGES:
        raise NextActionError(f"{terminal_stage} is not a closing outcome")
    if terminal_stage == Stage.LOST and not lost_reason.strip():
        raise NextActionError("a lost lead needs the reason")
    Task.objects.filter(pk=task.pk).update(
        status=Task.Status.DONE, outcome=outcome[:300], completed_at=now, completed_by=actor
    )
    if lead is None:
        return None
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=task.public_id,
        actor=actor,
        action="task.completed",
        reason=outcome,
        before={"status": "open"},
        after={"status": "done", "outcome": outcome},
    )
    if reached:
        lead_reached(lead, actor=actor, how=f"task {task.public_id}: {outcome}", reason=outcome, at=now)
    if terminal_stage:
        lead_sync.lead_close(lead, terminal_stage, actor=actor, reason=outcome, lost_reason=lost_reason)
        return None
    if next_title.strip() and next_due_at:
        return next_action_set(lead, next_title.strip(), next_due_at, actor=actor, reason=outcome)
    return None
