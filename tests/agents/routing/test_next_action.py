"""Task Creator: one open next action per active lead; completing needs the next or an end."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from crm.models import Task
from crm.services import lead_sync
from crm.services.next_action import NextActionError, next_action_set, task_complete
from crm.services.records import task_create
from tests.factories import lead_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def owned(business, setter):
    return lead_sync.lead_assign(lead_create(business), setter, actor="t", reason="t")


def test_setting_a_next_action_replaces_the_open_one(owned, setter) -> None:
    now = timezone.now()
    first = next_action_set(owned, "Call", now, actor="t", reason="t")
    second = next_action_set(owned, "Text", now + timedelta(hours=1), actor="t", reason="t")
    first.refresh_from_db()
    assert (first.status, first.outcome) == ("canceled", "replaced")
    assert second.owner == setter and owned.tasks.filter(kind="next_action", status="open").get() == second
    owned.refresh_from_db()
    assert owned.next_action == "Text" and owned.next_action_due_at == second.due_at


def test_the_database_refuses_a_second_open_next_action(owned) -> None:
    next_action_set(owned, "Call", timezone.now(), actor="t", reason="t")
    with pytest.raises(ValidationError, match="crm_task_one_open_next_action"):
        task_create(lead=owned, title="Another", due_at=timezone.now(), actor="t")
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.create(business=owned.business, lead=owned, title="Raw", due_at=timezone.now())


def test_completing_a_next_action_requires_the_next_or_a_closing_outcome(owned) -> None:
    task = next_action_set(owned, "Call", timezone.now(), actor="t", reason="t")
    with pytest.raises(NextActionError, match="set the next action"):
        task_complete(task, actor="sam", outcome="called")
    with pytest.raises(NextActionError, match="needs the reason"):
        task_complete(task, actor="sam", outcome="called", terminal_stage="lost")
    with pytest.raises(NextActionError, match="not a closing outcome"):
        task_complete(task, actor="sam", outcome="called", terminal_stage="booked")
    task.refresh_from_db()
    assert task.status == "open", "a refused completion writes nothing"
    assert (
        task_complete(task, actor="sam", outcome="went elsewhere", terminal_stage="lost", lost_reason="price") is None
    )
    owned.refresh_from_db()
    assert (owned.stage, owned.lost_reason, owned.next_action) == ("lost", "price", "")
    assert not Task.objects.filter(lead=owned, status="open").exists()


def test_other_tasks_complete_with_just_an_outcome(owned) -> None:
    call_back = task_create(lead=owned, title="Call back", due_at=timezone.now(), actor="t", kind="call_back")
    assert task_complete(call_back, actor="sam", outcome="left a voicemail") is None
    call_back.refresh_from_db()
    assert call_back.status == "done"
    with pytest.raises(NextActionError, match="already done"):
        task_complete(call_back, actor="sam", outcome="again")
