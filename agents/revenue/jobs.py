"""Jobs and invoices as their own events: a job is completed, an invoice is
issued. Each writes a receipt; a completed job is the lead's orchestrator event
"job.completed" (its step, `job_completed_step`, is below), and an issued
invoice opens the task that asks someone to collect it."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.events import MissingInformation, lead_event
from agents.revenue.payments import COLLECT_TASK_KIND, PaymentError, money_check
from crm.models import Invoice, Job, Lead, Stage, Task
from crm.selectors import business_manager
from crm.services import lead_sync
from crm.services.receipts import receipt_write
from crm.services.records import invoice_record, task_create, tasks_close

ACTOR = "agent:revenue"
INVOICE_TASK_KIND = Task.Kind.INVOICE
# When an issued invoice names no due date, collection is due this much later.
DEFAULT_PAYMENT_TERMS = timedelta(days=14)
# A completed job should be invoiced within a day.
INVOICE_DUE = timedelta(days=1)


class JobError(Exception):
    """A job or invoice change refused: nothing written."""


@transaction.atomic
def job_complete(job: Job, *, actor: str, completed_at: datetime | None = None) -> Job:
    """Mark a scheduled or in-progress job completed, once (compare-and-set:
    a double click writes one receipt and one event)."""
    at = completed_at or timezone.now()
    updated = Job.objects.filter(pk=job.pk, status__in=[Job.Status.SCHEDULED, Job.Status.IN_PROGRESS]).update(
        status=Job.Status.COMPLETED, completed_at=at
    )
    job.refresh_from_db()
    if not updated:
        if job.status == Job.Status.COMPLETED:
            return job
        raise JobError(f"{job.public_id} is {job.status}: only a scheduled or in-progress job can be completed")
    lead = Lead.objects.select_related("business").get(pk=job.lead_id)
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=job.public_id,
        actor=actor,
        action="job.completed",
        before={"status": "scheduled"},
        after={"status": "completed", "completed_at": at},
    )
    lead_event(lead, "job.completed", key=job.public_id, data={"job": job.public_id}, actor=actor)
    return job


@transaction.atomic
def invoice_issue(
    *,
    lead: Lead,
    amount: Decimal,
    currency: str,
    actor: str,
    job: Job | None = None,
    number: str = "",
    due_at: datetime | None = None,
    issued_at: datetime | None = None,
) -> Invoice:
    """Issue an invoice for the lead (and job), with a receipt and the open
    task to collect it, owned by the lead's owner (else the manager)."""
    try:
        money_check(amount, currency)
    except PaymentError as exc:
        raise JobError(str(exc)) from exc
    if amount <= 0:
        raise JobError("an invoice is for a positive amount")
    if job is not None and job.lead_id != lead.pk:
        raise JobError(f"{job.public_id} is not a job of {lead.public_id}")
    now = issued_at or timezone.now()
    due = due_at or now + DEFAULT_PAYMENT_TERMS
    invoice = invoice_record(
        lead=lead,
        amount=amount,
        currency=currency.upper(),
        actor=actor,
        job=job,
        number=number,
        status=Invoice.Status.ISSUED,
        issued_at=now,
        due_at=due,
    )
    if job is not None:
        _close_invoice_tasks(lead, job, f"invoiced: {invoice.public_id}", actor=actor)
    owner = lead.owner if lead.owner and lead.owner.is_active else business_manager(lead.business_id)
    task_create(
        lead=lead,
        title=f"Collect {amount} {invoice.currency} for invoice {invoice.public_id}",
        due_at=due,
        actor=actor,
        kind=COLLECT_TASK_KIND,
        owner=owner,
        reason=f"invoice {invoice.public_id} issued",
    )
    return invoice


def job_completed_step(lead: Lead, data: dict[str, Any]) -> str:
    """ "job.completed": the work is done, so the lead is won if not yet, and a
    job without an invoice gets a task to invoice it. A stage that cannot
    move to won stops for a person."""
    job = Job.objects.filter(public_id=data.get("job"), lead=lead).first()
    if job is None:
        return "skipped: the job is not on this lead any more"
    outcome = []
    if job.invoices.exclude(status=Invoice.Status.VOID).exists():
        outcome.append("invoiced")
    else:
        title = _invoice_task_title(job)
        if not lead.tasks.filter(kind=INVOICE_TASK_KIND, title=title).exists():
            owner = lead.owner if lead.owner and lead.owner.is_active else business_manager(lead.business_id)
            task_create(
                lead=lead,
                title=title,
                due_at=timezone.now() + INVOICE_DUE,
                actor=ACTOR,
                kind=INVOICE_TASK_KIND,
                owner=owner,
                reason=f"job {job.public_id} completed without an invoice",
            )
        outcome.append("invoice task open")
    if lead.stage != Stage.WON:
        if not lead_sync.transition_allowed(lead.stage, Stage.WON):
            raise MissingInformation(
                f"Job {job.public_id} completed: set the lead's outcome",
                f"the job is done while the lead is {lead.stage}, which cannot move to won",
            )
        lead_sync.lead_transition(lead, Stage.WON, actor=ACTOR, reason=f"job {job.public_id} completed")
        outcome.append("won")
    return "; ".join(outcome)


def _invoice_task_title(job: Job) -> str:
    return f"Invoice the completed job {job.public_id}"


def _close_invoice_tasks(lead: Lead, job: Job, outcome: str, *, actor: str) -> None:
    tasks_close(
        lead, lead.tasks.filter(kind=INVOICE_TASK_KIND, title=_invoice_task_title(job)), actor=actor, outcome=outcome
    )
