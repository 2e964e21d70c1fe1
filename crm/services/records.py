"""Creating the system-of-record rows people and later roles build on.

Identity resolution (matching a delivery to an existing contact) arrives
with capture; these functions create what they are told to, normalized, with
a receipt each.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from crm.models import (
    Appointment,
    Business,
    Call,
    Contact,
    ContactPoint,
    ContactPointKind,
    Estimate,
    EventType,
    InboundEvent,
    Invoice,
    Job,
    Lead,
    LeadTouch,
    Message,
    Payment,
    Refund,
    ServiceLine,
    Source,
    Task,
    TeamMember,
)
from crm.phones import email_normalize, phone_to_e164
from crm.selectors import rows_in_hand
from crm.services.outbox import event_emit
from crm.services.receipts import receipt_write
from crm.services.sync import sync_changes_booked


@transaction.atomic
def contact_create(
    *,
    business: Business,
    actor: str,
    first_name: str = "",
    last_name: str = "",
    phones: Iterable[str] = (),
    emails: Iterable[str] = (),
    postal_code: str = "",
    notes: str = "",
) -> Contact:
    """Create a contact with normalized contact points. A phone that cannot be
    parsed is kept as typed and marked invalid, never dropped."""
    contact = Contact.objects.create(
        business=business, first_name=first_name, last_name=last_name, postal_code=postal_code, notes=notes
    )
    for raw in phones:
        e164 = phone_to_e164(raw, business.region)
        ContactPoint.objects.create(
            business=business,
            contact=contact,
            kind=ContactPointKind.PHONE,
            value=e164 or raw.strip(),
            raw_value=raw,
            is_valid=e164 is not None,
        )
    for raw in emails:
        ContactPoint.objects.create(
            business=business, contact=contact, kind=ContactPointKind.EMAIL, value=email_normalize(raw), raw_value=raw
        )
    receipt_write(
        business=business,
        subject=contact.public_id,
        actor=actor,
        action="contact.created",
        after={"name": contact.name, "phones": list(phones), "emails": list(emails)},
    )
    return contact


@transaction.atomic
def lead_open(
    *,
    contact: Contact,
    actor: str,
    service_line: ServiceLine | None = None,
    request_text: str = "",
    source: Source | None = None,
    inbound_event: InboundEvent | None = None,
    touch: dict[str, Any] | None = None,
    received_at: datetime | None = None,
) -> Lead:
    """Open a lead for a contact's need, with its first source touch."""
    lead = Lead.objects.create(
        business=contact.business, contact=contact, service_line=service_line, request_text=request_text
    )
    first = touch_add(lead=lead, source=source, inbound_event=inbound_event, received_at=received_at, **(touch or {}))
    # A lead made just now has exactly this touch: what reads its touches
    # next in the same unit of work (fit, the SLA clock) reads it from here.
    rows_in_hand(lead, "touches", [first])
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=lead.public_id,
        actor=actor,
        action="lead.created",
        after={"stage": lead.stage, "contact": contact.public_id, "source": source.key if source else None},
    )
    event_emit(
        business=lead.business_id,
        lead=lead,
        type=EventType.LEAD_CREATED,
        subject=lead.public_id,
        data={
            "lead": lead.public_id,
            "contact": contact.public_id,
            "stage": lead.stage,
            "service_line": service_line.slug if service_line else None,
            "source": source.key if source else None,
            "provider": first.provider,
            "channel": first.channel,
            "campaign_id": first.campaign_id,
            "received_at": first.received_at,
        },
    )
    return lead


def touch_add(
    *,
    lead: Lead,
    source: Source | None = None,
    inbound_event: InboundEvent | None = None,
    received_at: datetime | None = None,
    **fields: Any,
) -> LeadTouch:
    provider = fields.pop("provider", source.provider if source else "manual")
    fields.setdefault("channel", "manual")
    return LeadTouch.objects.create(
        business=lead.business,
        lead=lead,
        source=source,
        inbound_event=inbound_event,
        provider=provider,
        received_at=received_at or timezone.now(),
        **fields,
    )


@transaction.atomic
def task_create(
    *,
    lead: Lead | None,
    title: str,
    due_at: datetime,
    actor: str,
    kind: str = "next_action",
    owner: TeamMember | None = None,
    reason: str = "",
    checked: bool = False,
    business: Business | None = None,
) -> Task:
    """A human action with a due time, owned by `owner` or else the lead's owner.
    `checked`: the caller holds the lead's lock and made sure it has no open
    task the constraints would refuse (the database still refuses one).
    A task about no lead (a booking from nobody known) names its `business`."""
    if lead is None and business is None:
        raise ValueError("a task without a lead needs its business")
    business = lead.business if lead is not None else business
    assert business is not None
    owner = owner or (lead.owner if lead is not None else None)
    task = Task(business=business, lead=lead, owner=owner, kind=kind, title=title, due_at=due_at)
    # The business, lead and owner are rows in hand (a foreign-key lookup
    # each would cost a query) and the public id is fresh. The constraints
    # stay validated: the one-open-next-action constraint is checked first
    # for a clear message.
    task.clean_fields(exclude=["business", "lead", "owner"])
    task.clean()
    if not checked:
        task.validate_constraints()
    task.save()
    receipt_write(
        business=business,
        lead=lead,
        subject=task.public_id,
        actor=actor,
        action="task.created",
        reason=reason,
        after={"title": title, "kind": kind, "due_at": due_at, "owner": owner.user.get_username() if owner else None},
    )
    return task


def task_ensure(
    *,
    lead: Lead,
    title: str,
    due_at: datetime,
    actor: str,
    kind: str,
    owner: TeamMember | None = None,
    reason: str = "",
    any_title: bool = False,
) -> Task:
    """The lead's open task of `kind` with `title` (with `any_title`, of
    `kind` at all), else a new one: a rule that asks a person for something
    asks once, however often it is noticed."""
    open_tasks = lead.tasks.filter(kind=kind, status=Task.Status.OPEN)
    existing = (open_tasks if any_title else open_tasks.filter(title=title)).first()
    if existing is not None:
        return existing
    return task_create(lead=lead, title=title, due_at=due_at, actor=actor, kind=kind, owner=owner, reason=reason)


def tasks_close(lead: Lead | None, tasks: QuerySet[Task], *, actor: str, outcome: str) -> int:
    """Mark open tasks done with their outcome (the work they asked for
    happened: the invoice was paid), once each (compare-and-set) and with a
    receipt each; returns how many."""
    closed = 0
    for task in tasks.filter(status=Task.Status.OPEN).select_related("business"):
        if Task.objects.filter(pk=task.pk, status=Task.Status.OPEN).update(
            status=Task.Status.DONE, outcome=outcome[:300], completed_at=timezone.now(), completed_by=actor
        ):
            closed += 1
            _task_ended(task, lead, actor=actor, action="task.completed", status="done", outcome=outcome)
    return closed


def tasks_cancel(
    lead: Lead, *, kinds: Iterable[str], outcome: str, actor: str, now: datetime | None = None
) -> list[Task]:
    """Cancel the lead's open tasks of `kinds` (its work moved on: the lead
    closed, the visit was booked), a receipt each; returns them."""
    now = now or timezone.now()
    open_tasks = list(lead.tasks.filter(kind__in=list(kinds), status=Task.Status.OPEN).order_by("pk"))
    for task in open_tasks:
        task.business = lead.business  # a row in hand: no query per receipt
    if not open_tasks:
        return []
    Task.objects.filter(pk__in=[t.pk for t in open_tasks], status=Task.Status.OPEN).update(
        status=Task.Status.CANCELED, outcome=outcome[:300], completed_at=now, completed_by=actor
    )
    for task in open_tasks:
        task.status, task.outcome, task.completed_at, task.completed_by = Task.Status.CANCELED, outcome, now, actor
        _task_ended(task, lead, actor=actor, action="task.canceled", status="canceled", outcome=outcome)
    return open_tasks


def _task_ended(task: Task, lead: Lead | None, *, actor: str, action: str, status: str, outcome: str) -> None:
    receipt_write(
        business=task.business,
        lead=lead,
        subject=task.public_id,
        actor=actor,
        action=action,
        reason=outcome,
        before={"status": "open"},
        after={"status": status, "outcome": outcome},
    )


def _record(model: Any, *, lead: Lead, actor: str, action: str, **fields: Any) -> Any:
    obj = model.objects.create(business=lead.business, lead=lead, **fields)
    after = {k: v for k, v in fields.items() if not hasattr(v, "pk")}
    receipt_write(business=lead.business, lead=lead, subject=obj.public_id, actor=actor, action=action, after=after)
    return obj


@transaction.atomic
def appointment_record(*, lead: Lead, starts_at: datetime, ends_at: datetime, actor: str, **fields: Any) -> Appointment:
    """A booked visit (a reschedule books a new one, `rescheduled_from` the
    old), with its receipt and its `appointment.booked` event."""
    appointment: Appointment = _record(
        Appointment, lead=lead, actor=actor, action="appointment.booked", starts_at=starts_at, ends_at=ends_at, **fields
    )
    event_emit(
        business=lead.business_id,
        lead=lead,
        type=EventType.APPOINTMENT_BOOKED,
        subject=appointment.public_id,
        data={
            "lead": lead.public_id,
            "appointment": appointment.public_id,
            "status": appointment.status,
            "starts_at": starts_at,
            "ends_at": ends_at,
            "rescheduled_from": appointment.rescheduled_from.public_id if appointment.rescheduled_from else None,
            "provider": appointment.provider or None,
        },
    )
    # The contractor's own systems (Jobber…) hear of it by a row of this transaction.
    sync_changes_booked(appointment)
    return appointment


@transaction.atomic
def call_record(*, lead: Lead, actor: str, direction: str, status: str, started_at: datetime, **fields: Any) -> Call:
    """A call a person logged by hand (not one the phone system reported),
    with its receipt naming who logged it."""
    fields.setdefault("contact", lead.contact)
    return _record(
        Call,
        lead=lead,
        actor=actor,
        action="call.logged",
        direction=direction,
        status=status,
        started_at=started_at,
        **fields,
    )


@transaction.atomic
def estimate_record(*, lead: Lead, amount: Decimal, currency: str, actor: str, **fields: Any) -> Estimate:
    return _record(
        Estimate, lead=lead, actor=actor, action="estimate.recorded", amount=amount, currency=currency, **fields
    )


@transaction.atomic
def job_record(*, lead: Lead, actor: str, **fields: Any) -> Job:
    return _record(Job, lead=lead, actor=actor, action="job.recorded", **fields)


@transaction.atomic
def invoice_record(*, lead: Lead, amount: Decimal, currency: str, actor: str, **fields: Any) -> Invoice:
    return _record(
        Invoice, lead=lead, actor=actor, action="invoice.recorded", amount=amount, currency=currency, **fields
    )


@transaction.atomic
def payment_record(
    *, lead: Lead, amount: Decimal, currency: str, actor: str, received_at: datetime, **fields: Any
) -> Payment:
    fields.setdefault("contact", lead.contact)
    fields.setdefault("match_status", Payment.MatchStatus.MATCHED)
    payment: Payment = _record(
        Payment,
        lead=lead,
        actor=actor,
        action="payment.recorded",
        amount=amount,
        currency=currency,
        received_at=received_at,
        **fields,
    )
    payment_announce(payment, EventType.PAYMENT_RECORDED)
    return payment


def message_received_announce(message: Message) -> None:
    """An inbound message's outbox event: which lead, which channel, when;
    never who sent it or what it says."""
    event_emit(
        business=message.business_id,
        lead=message.lead,
        type=EventType.MESSAGE_RECEIVED,
        subject=message.public_id,
        data={
            "lead": message.lead.public_id if message.lead else None,
            "message": message.public_id,
            "channel": message.channel,
            "received_at": message.created_at,
        },
    )


def payment_announce(payment: Payment, event_type: str) -> None:
    """A payment's outbox event (`payment.recorded` when it is recorded,
    `payment.matched` when a later match links it to its lead)."""
    event_emit(
        business=payment.business_id,
        lead=payment.lead,
        type=event_type,
        subject=payment.public_id,
        data={
            "payment": payment.public_id,
            "lead": payment.lead.public_id if payment.lead else None,
            "amount": payment.amount,
            "currency": payment.currency,
            "provider": payment.provider,
            "received_at": payment.received_at,
            "match_status": payment.match_status,
            "invoice": payment.invoice.public_id if payment.invoice else None,
            "job": payment.job.public_id if payment.job else None,
        },
    )


@transaction.atomic
def refund_record(*, payment: Payment, amount: Decimal, actor: str, refunded_at: datetime, **fields: Any) -> Refund:
    refund = Refund.objects.create(
        business=payment.business,
        payment=payment,
        amount=amount,
        currency=payment.currency,
        refunded_at=refunded_at,
        **fields,
    )
    receipt_write(
        business=payment.business,
        lead=payment.lead,
        subject=refund.public_id,
        actor=actor,
        action="refund.recorded",
        after={"amount": amount, "currency": payment.currency, "payment": payment.public_id},
    )
    event_emit(
        business=payment.business_id,
        lead=payment.lead,
        type=EventType.REFUND_RECORDED,
        subject=refund.public_id,
        data={
            "refund": refund.public_id,
            "payment": payment.public_id,
            "lead": payment.lead.public_id if payment.lead else None,
            "amount": amount,
            "currency": payment.currency,
            "refunded_at": refunded_at,
        },
    )
    return refund
