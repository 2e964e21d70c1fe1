"""The task service: a person is asked once for one thing, and every task
that closes or is canceled says so in a receipt. Task kinds are a closed set."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from crm.models import Business, Receipt, Task
from crm.services.records import task_create, task_ensure, tasks_cancel, tasks_close
from tests.factories import lead_create

pytestmark = pytest.mark.django_db


def test_ensuring_a_task_twice_asks_once_and_any_title_matches_the_kind(business: Business) -> None:
    lead = lead_create(business, phone="+12125550147")
    due = timezone.now() + timedelta(hours=1)

    first = task_ensure(lead=lead, title="Call back", due_at=due, actor="t", kind=Task.Kind.CALL_BACK)
    again = task_ensure(lead=lead, title="Call back", due_at=due, actor="t", kind=Task.Kind.CALL_BACK)
    other_title = task_ensure(lead=lead, title="Ring them", due_at=due, actor="t", kind="call_back", any_title=True)

    assert first.pk == again.pk == other_title.pk
    assert Receipt.objects.filter(subject=first.public_id, action="task.created").count() == 1


def test_closing_and_canceling_write_a_receipt_per_task_and_touch_only_open_ones(business: Business) -> None:
    lead = lead_create(business, phone="+12125550147")
    due = timezone.now()
    invoice = task_create(lead=lead, title="Invoice the job", due_at=due, actor="t", kind=Task.Kind.INVOICE)
    collect = task_create(lead=lead, title="Collect", due_at=due, actor="t", kind=Task.Kind.PAYMENT)

    assert tasks_close(lead, lead.tasks.filter(kind="invoice"), actor="t", outcome="invoiced") == 1
    assert tasks_close(lead, lead.tasks.filter(kind="invoice"), actor="t", outcome="again") == 0
    assert [t.pk for t in tasks_cancel(lead, kinds=["payment", "invoice"], outcome="lead closed", actor="t")] == [
        collect.pk
    ]

    invoice.refresh_from_db()
    collect.refresh_from_db()
    assert (invoice.status, collect.status) == ("done", "canceled")
    assert Receipt.objects.filter(subject=invoice.public_id, action="task.completed").count() == 1
    assert Receipt.objects.filter(subject=collect.public_id, action="task.canceled").count() == 1


def test_a_task_of_a_kind_nobody_handles_is_refused(business: Business) -> None:
    lead = lead_create(business, phone="+12125550147")

    with pytest.raises(ValidationError, match="kind"):
        task_create(lead=lead, title="?", due_at=timezone.now(), actor="t", kind="call")
