"""Jobs completed and invoices issued: their own records and events."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from agents.orchestrator import orchestrate_pending
from agents.revenue.jobs import JobError, invoice_issue, job_complete
from crm.models import Receipt, Stage, Task, Timer
from crm.services.records import job_record
from tests.factories import lead_create
from tests.helpers.revenue import held_lead, walk

pytestmark = pytest.mark.django_db


def test_completing_a_job_once_is_one_receipt_and_one_event(business, manager):
    lead = held_lead(business, manager)
    job = job_record(lead=lead, actor="mia")
    job_complete(job, actor="tom")
    job_complete(job, actor="tom")  # a double click
    job.refresh_from_db()
    assert job.status == "completed" and job.completed_at is not None
    assert Receipt.objects.filter(subject=job.public_id, action="job.completed").count() == 1
    assert Timer.objects.filter(kind="orchestrate", payload__event="job.completed").count() == 1


def test_a_completed_job_wins_the_lead_and_asks_for_its_invoice(business, manager):
    lead = held_lead(business, manager)
    job = job_record(lead=lead, actor="mia")
    job_complete(job, actor="tom")
    orchestrate_pending()
    lead.refresh_from_db()
    assert lead.stage == Stage.WON
    task = Task.objects.get(lead=lead, kind="invoice")
    assert (task.status, task.owner, job.public_id in task.title) == ("open", manager, True)
    invoice = invoice_issue(lead=lead, amount=Decimal("880.00"), currency="usd", actor="mia", job=job)
    task.refresh_from_db()
    assert (task.status, task.outcome) == ("done", f"invoiced: {invoice.public_id}")
    assert (invoice.status, invoice.amount, invoice.currency) == ("issued", Decimal("880.00"), "USD")
    collect = Task.objects.get(lead=lead, kind="payment")
    assert collect.status == "open" and invoice.public_id in collect.title


def test_a_job_completed_on_an_invoiced_lead_needs_no_invoice_task(business, manager):
    lead = held_lead(business, manager)
    job = job_record(lead=lead, actor="mia")
    invoice_issue(lead=lead, amount=Decimal("10.00"), currency="USD", actor="mia", job=job)
    job_complete(job, actor="tom")
    orchestrate_pending()
    assert not Task.objects.filter(lead=lead, kind="invoice").exists()


def test_a_job_completed_while_the_lead_is_only_booked_stops_for_a_person(business, manager):
    lead = walk(lead_create(business), Stage.CONTACTED, Stage.BOOKED)
    job_complete(job_record(lead=lead, actor="mia"), actor="tom")
    orchestrate_pending()
    lead.refresh_from_db()
    assert lead.stage == Stage.BOOKED
    exception = Task.objects.get(lead=lead, kind="exception")
    assert "set the lead's outcome" in exception.title and exception.owner == manager


def test_a_canceled_job_cannot_be_completed(business):
    lead = lead_create(business)
    job = job_record(lead=lead, actor="mia", status="canceled")
    with pytest.raises(JobError, match="canceled"):
        job_complete(job, actor="tom")


def test_an_invoice_is_money_for_a_positive_amount(business):
    lead = lead_create(business)
    with pytest.raises(JobError):
        invoice_issue(lead=lead, amount=Decimal("0.00"), currency="USD", actor="mia")
    with pytest.raises(JobError):
        invoice_issue(lead=lead, amount=Decimal("1.005"), currency="USD", actor="mia")
    other = lead_create(business, phone="+13125550199")
    with pytest.raises(JobError, match="not a job of"):
        invoice_issue(
            lead=lead, amount=Decimal("1.00"), currency="USD", actor="mia", job=job_record(lead=other, actor="m")
        )
    due = timezone.now()
    invoice = invoice_issue(lead=lead, amount=Decimal("1.00"), currency="USD", actor="mia", due_at=due)
    assert invoice.due_at == due
