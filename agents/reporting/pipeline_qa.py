"""Pipeline QA: the periodic check that nothing in the pipeline has quietly
stopped. Each condition it finds becomes one open `ExceptionItem` owned by the
business's manager; when the condition clears, the item is resolved by QA
itself on the next run.

| kind | subject | condition |
|---|---|---|
| `no_owner` | lead | open, not a test, older than the routing grace, no owner |
| `no_next_action` | lead | open, owned, older than the grace, no next action |
| `invalid_stage` | lead | the stage says something its records do not (booked without an appointment…) |
| `stale_stage` | lead | open and unchanged longer than its stage allows (STALE_DAYS) |
| `sla_breached` | lead | open, SLA breached, and still no first human contact |
| `stuck_enrollment` | enrollment | active, but its step is overdue by an hour, has no due time, or its lead is closed |
| `undelivered_message` | message | outbound, undelivered/failed/unknown in the last week, on an open lead, not delivered since |
| `unmatched_payment` | payment | unmatched or ambiguous |
| `appointment_no_outcome` | appointment | scheduled or confirmed, ended more than two hours ago |
| `job_not_invoiced` | job | completed more than a day ago, with no (non-void) invoice |

Every check is one set-based query; opening and resolving are bulk writes.
The partial unique constraint `crm_exceptionitem_one_open_per_subject` (not
luck) keeps one open item per kind and subject when two runs overlap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from crm.models import (
    CLOSED_STAGES,
    Appointment,
    Business,
    Enrollment,
    Estimate,
    ExceptionItem,
    Invoice,
    Job,
    Lead,
    Message,
    Payment,
    Stage,
    TeamMember,
)
from crm.selectors import business_manager
from crm.services.receipts import receipt_write

ACTOR = "agent:pipeline_qa"
# Routing runs right after capture, in the background: a lead younger than
# this may simply not have been routed yet.
GRACE = timedelta(minutes=15)
STALE_DAYS = {
    Stage.NEW: 1,
    Stage.ASSIGNED: 2,
    Stage.CONTACTED: 7,
    Stage.ENGAGED: 7,
    Stage.QUALIFIED: 7,
    Stage.NO_SHOW: 3,
    Stage.APPOINTMENT_HELD: 7,
    Stage.ESTIMATE_SENT: 14,
}
STUCK_AFTER = timedelta(hours=1)
UNDELIVERED_WINDOW = timedelta(days=7)
OUTCOME_GRACE = timedelta(hours=2)
INVOICE_GRACE = timedelta(days=1)
FAILED_SENDS = (Message.Status.UNDELIVERED, Message.Status.FAILED, Message.Status.UNKNOWN)

# (business_id, subject) -> (lead_id, detail)
Found = dict[tuple[int, str], tuple[int | None, str]]


def _open_leads() -> QuerySet[Lead]:
    return Lead.objects.exclude(stage__in=CLOSED_STAGES).filter(is_test=False)


def _leads(qs: QuerySet[Lead], detail: Callable[[dict[str, Any]], str], *fields: str) -> Found:
    return {
        (r["business_id"], r["public_id"]): (r["pk"], detail(r))
        for r in qs.values("pk", "business_id", "public_id", *fields)
    }


def _no_owner(now: datetime) -> Found:
    qs = _open_leads().filter(owner__isnull=True, created_at__lt=now - GRACE)
    return _leads(
        qs, lambda r: f"no owner{': ' + r['routing_reason'] if r['routing_reason'] else ''}", "routing_reason"
    )


def _no_next_action(now: datetime) -> Found:
    qs = _open_leads().filter(owner__isnull=False, next_action="", created_at__lt=now - GRACE)
    return _leads(qs, lambda r: f"stage {r['stage']}, owned, but no next action", "stage")


def _invalid_stage(now: datetime) -> Found:
    lead = OuterRef("pk")
    appt = Appointment.objects.filter(lead_id=lead)
    upcoming = appt.filter(status__in=[Appointment.Status.SCHEDULED, Appointment.Status.CONFIRMED])
    held = appt.filter(status=Appointment.Status.HELD)
    sent = Estimate.objects.filter(lead_id=lead, status__in=["sent", "accepted", "declined", "expired"])
    sold = (
        Exists(Estimate.objects.filter(lead_id=lead, status="accepted"))
        | Exists(Job.objects.filter(lead_id=lead))
        | Exists(Payment.objects.filter(lead_id=lead))
    )
    reasons = {
        Stage.BOOKED: ("booked, but no scheduled appointment", ~Exists(upcoming) & ~Exists(held)),
        Stage.APPOINTMENT_HELD: ("appointment held, but no appointment was held", ~Exists(held)),
        Stage.ESTIMATE_SENT: ("estimate sent, but no estimate was sent", ~Exists(sent)),
        Stage.WON: ("won, but no accepted estimate, job or payment", ~sold),
    }
    found: Found = {}
    for stage, (text, missing) in reasons.items():
        qs = Lead.objects.filter(stage=stage, is_test=False).filter(missing)
        found.update(
            {(r["business_id"], r["public_id"]): (r["pk"], text) for r in qs.values("pk", "business_id", "public_id")}
        )
    return found


def _stale_stage(now: datetime) -> Found:
    stale = Q()
    for stage, days in STALE_DAYS.items():
        stale |= Q(stage=stage, updated_at__lt=now - timedelta(days=days))
    qs = _open_leads().filter(stale)
    return _leads(qs, lambda r: f"{r['stage']} and unchanged since {r['updated_at']:%Y-%m-%d}", "stage", "updated_at")


def _sla_breached(now: datetime) -> Found:
    qs = _open_leads().filter(sla_breached_at__isnull=False, first_response_at__isnull=True)
    return _leads(
        qs, lambda r: f"first response due was missed at {r['sla_breached_at']:%Y-%m-%d %H:%M} UTC", "sla_breached_at"
    )


def _stuck_enrollment(now: datetime) -> Found:
    qs = Enrollment.objects.filter(status=Enrollment.Status.ACTIVE).filter(
        Q(next_step_due_at__lt=now - STUCK_AFTER) | Q(next_step_due_at__isnull=True) | Q(lead__stage__in=CLOSED_STAGES)
    )
    found: Found = {}
    for r in qs.values("business_id", "public_id", "lead_id", "next_step_due_at", "lead__stage", "sequence__key"):
        if r["lead__stage"] in CLOSED_STAGES:
            why = f"still active on a {r['lead__stage']} lead"
        elif r["next_step_due_at"] is None:
            why = "active with no next step due"
        else:
            why = f"step overdue since {r['next_step_due_at']:%Y-%m-%d %H:%M} UTC"
        found[(r["business_id"], r["public_id"])] = (r["lead_id"], f"{r['sequence__key']}: {why}")
    return found


def _undelivered(now: datetime) -> Found:
    delivered_since = Message.objects.filter(
        lead_id=OuterRef("lead_id"),
        channel=OuterRef("channel"),
        direction="out",
        status=Message.Status.DELIVERED,
        created_at__gt=OuterRef("created_at"),
    )
    qs = (
        Message.objects.filter(direction="out", status__in=FAILED_SENDS, created_at__gte=now - UNDELIVERED_WINDOW)
        .filter(lead__isnull=False)
        .exclude(lead__stage__in=CLOSED_STAGES)
        .exclude(Exists(delivered_since))
    )
    return {
        (r["business_id"], r["public_id"]): (r["lead_id"], f"{r['channel']} {r['status']} {r['error_code']}".strip())
        for r in qs.values("business_id", "public_id", "lead_id", "channel", "status", "error_code")
    }


def _unmatched_payment(now: datetime) -> Found:
    qs = Payment.objects.filter(match_status__in=[Payment.MatchStatus.UNMATCHED, Payment.MatchStatus.AMBIGUOUS])
    return {
        (r["business_id"], r["public_id"]): (
            r["lead_id"],
            f"{r['match_status']}: {r['amount']} {r['currency']} from {r['provider']} on {r['received_at']:%Y-%m-%d}",
        )
        for r in qs.values(
            "business_id", "public_id", "lead_id", "match_status", "amount", "currency", "provider", "received_at"
        )
    }


def _appointment_no_outcome(now: datetime) -> Found:
    qs = Appointment.objects.filter(
        status__in=[Appointment.Status.SCHEDULED, Appointment.Status.CONFIRMED], ends_at__lt=now - OUTCOME_GRACE
    )
    return {
        (r["business_id"], r["public_id"]): (
            r["lead_id"],
            f"ended {r['ends_at']:%Y-%m-%d %H:%M} UTC, still {r['status']}",
        )
        for r in qs.values("business_id", "public_id", "lead_id", "ends_at", "status")
    }


def _job_not_invoiced(now: datetime) -> Found:
    invoiced = Invoice.objects.filter(job_id=OuterRef("pk")).exclude(status=Invoice.Status.VOID)
    qs = Job.objects.filter(status=Job.Status.COMPLETED, completed_at__lt=now - INVOICE_GRACE).exclude(Exists(invoiced))
    return {
        (r["business_id"], r["public_id"]): (r["lead_id"], f"completed {r['completed_at']:%Y-%m-%d}, no invoice")
        for r in qs.values("business_id", "public_id", "lead_id", "completed_at")
    }


CHECKS: dict[str, Callable[[datetime], Found]] = {
    "no_owner": _no_owner,
    "no_next_action": _no_next_action,
    "invalid_stage": _invalid_stage,
    "stale_stage": _stale_stage,
    "sla_breached": _sla_breached,
    "stuck_enrollment": _stuck_enrollment,
    "undelivered_message": _undelivered,
    "unmatched_payment": _unmatched_payment,
    "appointment_no_outcome": _appointment_no_outcome,
    "job_not_invoiced": _job_not_invoiced,
}
QA_KINDS = list(CHECKS)


@dataclass
class QaRun:
    opened: dict[str, int] = field(default_factory=dict)
    resolved: dict[str, int] = field(default_factory=dict)
    open_total: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"opened": self.opened, "resolved": self.resolved, "open": self.open_total}


def pipeline_qa_run(*, now: datetime | None = None, kinds: list[str] | None = None) -> QaRun:
    """Run every check (or `kinds`): open an item for each new finding, resolve
    the open QA items whose condition has cleared. Safe to run concurrently:
    a second opener of the same item is absorbed by the partial unique
    constraint, and a resolve is a conditional update from `open`."""
    now = now or timezone.now()
    run = QaRun()
    managers: dict[int, TeamMember | None] = {}
    per_business: dict[int, dict[str, dict[str, int]]] = {}
    for kind in kinds or QA_KINDS:
        found = CHECKS[kind](now)
        open_rows = ExceptionItem.objects.filter(kind=kind, status=ExceptionItem.Status.OPEN).values_list(
            "pk", "business_id", "subject"
        )
        already = {(b, s): pk for pk, b, s in open_rows}
        new = [key for key in found if key not in already]
        cleared_keys = [key for key in already if key not in found]
        cleared = [already[key] for key in cleared_keys]
        with transaction.atomic():
            for business_id, _ in new:
                if business_id not in managers:
                    managers[business_id] = business_manager(business_id)
            ExceptionItem.objects.bulk_create(
                [
                    ExceptionItem(
                        business_id=b,
                        lead_id=found[(b, s)][0],
                        owner=managers[b],
                        kind=kind,
                        subject=s,
                        detail=found[(b, s)][1][:500],
                        detected_at=now,
                    )
                    for b, s in new
                ],
                batch_size=1000,
                ignore_conflicts=True,
            )
            resolved = ExceptionItem.objects.filter(pk__in=cleared, status=ExceptionItem.Status.OPEN).update(
                status=ExceptionItem.Status.RESOLVED, resolved_at=now, resolved_by=ACTOR
            )
        if new:
            run.opened[kind] = len(new)
        if resolved:
            run.resolved[kind] = resolved
        for b, _ in new:
            per_business.setdefault(b, {}).setdefault("opened", {}).setdefault(kind, 0)
            per_business[b]["opened"][kind] += 1
        for b, _ in cleared_keys:
            per_business.setdefault(b, {}).setdefault("resolved", {}).setdefault(kind, 0)
            per_business[b]["resolved"][kind] += 1
    _receipts(per_business)
    run.open_total = ExceptionItem.objects.filter(kind__in=QA_KINDS, status=ExceptionItem.Status.OPEN).count()
    return run


def _receipts(per_business: dict[int, dict[str, dict[str, int]]]) -> None:
    # One receipt per business and run that changed something: the items
    # themselves are the per-record trail, this says who opened and closed them.
    for business in Business.objects.filter(pk__in=list(per_business)):
        receipt_write(
            business=business, actor=ACTOR, action="qa.run", subject=business.public_id,
            after=per_business[business.pk],
        )  # fmt: skip
