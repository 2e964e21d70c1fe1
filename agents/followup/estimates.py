"""Estimates and Open-Estimate Follow-Up.

An estimate is its own record with its own states: draft → (pending_approval
→) sent → accepted | declined | expired. It is not cash.

- Sending: an estimate above its service line's `high_value_amount` waits for
  a person's approval (ApprovalRequest kind `high_value_estimate`) before it
  counts as sent; the proposer can never approve it (the approvals service
  and the database both refuse). Rejected or expired → back to draft, with a
  task for the lead's owner to revise it.
- Sent: the orchestrator's `estimate.sent` step moves the lead to
  `estimate_sent` (CRM Sync), sets its next action, and schedules the
  follow-up check `Business.estimate_follow_up_days` later (and the expiry,
  when the estimate has one).
- No decision by then: the business's `open_estimate` path starts (or, with
  none, a follow-up task for the owner). It stops on acceptance (`won`),
  decline (`declined`), expiry (`expired`) or a payment for the lead (`paid`),
  besides the shared exits.
- Accepted → the lead is won; declined → lost (unless another estimate is
  still open), both through CRM Sync in the orchestrator's steps.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.events import exception_task, lead_event
from agents.followup.sequences.engine import TRIGGER_EXITS, enrollment_start, enrollments_stop
from approvals.handlers import approval_handler_register
from approvals.models import ApprovalRequest
from approvals.services import ApprovalConflict, approval_request_open
from crm.models import Enrollment, Estimate, EventType, Lead, Payment, Stage, Task, Timer
from crm.selectors import business_manager
from crm.services import lead_sync
from crm.services.outbox import event_emit
from crm.services.receipts import receipt_write
from crm.services.records import task_ensure
from crm.services.timers import timer_handler_register, timer_schedule

ACTOR = "agent:open_estimate_follow_up"
FOLLOW_UP_TIMER = "estimate.follow_up"
EXPIRY_TIMER = "estimate.expiry"
TRIGGER = "open_estimate"
# How a decision ends the estimate's follow-up path.
DECISION_REASONS: dict[str, str] = {
    Estimate.Status.ACCEPTED: "won",
    Estimate.Status.DECLINED: "declined",
    Estimate.Status.EXPIRED: "expired",
}
# The outbox events of a customer's decision (an expiry is no one's decision: none).
DECISION_EVENTS: dict[str, str] = {
    Estimate.Status.ACCEPTED: EventType.ESTIMATE_ACCEPTED,
    Estimate.Status.DECLINED: EventType.ESTIMATE_DECLINED,
}


class EstimateError(Exception):
    """The estimate is not in a state that allows this (nothing was written)."""


def _locked(estimate: Estimate) -> Estimate:
    return (
        Estimate.objects.select_for_update(of=("self",))
        .select_related("business", "lead__business", "lead__contact", "lead__service_line", "lead__owner__user")
        .get(pk=estimate.pk)
    )


def _receipt(estimate: Estimate, action: str, *, actor: str, before: str, reason: str = "", **after: Any) -> None:
    receipt_write(
        business=estimate.business,
        lead=estimate.lead,
        subject=estimate.public_id,
        actor=actor,
        action=action,
        reason=reason,
        before={"status": before},
        after={"status": estimate.status, "amount": estimate.amount, "currency": estimate.currency, **after},
    )


def high_value_threshold(estimate: Estimate) -> Decimal | None:
    """The amount above which this estimate needs a person's approval, if any."""
    line = estimate.lead.service_line
    if line is None or line.high_value_amount is None:
        return None
    return Decimal(line.high_value_amount)


def estimate_needs_approval(estimate: Estimate) -> bool:
    threshold = high_value_threshold(estimate)
    return threshold is not None and estimate.amount > threshold


@transaction.atomic
def estimate_send(estimate: Estimate, *, actor: str, user: Any = None, now: datetime | None = None) -> Estimate:
    """Send a draft estimate, or ask for approval first when it is high value.

    `actor` names the proposer (a username or `agent:<role>`); pass the person
    as `user` too, so that neither the service nor the database lets them
    approve their own estimate. Idempotent for an estimate already waiting
    or sent (returned as it is); refuses a decided one. One transaction under
    the estimate's row lock.
    """
    now = now or timezone.now()
    estimate = _locked(estimate)
    if estimate.status in (Estimate.Status.PENDING_APPROVAL, Estimate.Status.SENT):
        return estimate
    if estimate.status != Estimate.Status.DRAFT:
        raise EstimateError(f"{estimate.public_id} is {estimate.status}: only a draft can be sent")
    if estimate_needs_approval(estimate):
        threshold = high_value_threshold(estimate)
        estimate.status = Estimate.Status.PENDING_APPROVAL
        estimate.save(update_fields=["status"])
        request = approval_request_open(
            business=estimate.business,
            lead=estimate.lead,
            kind=ApprovalRequest.Kind.HIGH_VALUE_ESTIMATE,
            summary=f"Send estimate {estimate.public_id} for {estimate.amount} {estimate.currency} "
            f"(above {threshold} {estimate.currency} for {estimate.lead.service_line})",
            proposed_by=actor,
            proposed_by_user=user,
            payload={
                "estimate": estimate.public_id,
                "amount": str(estimate.amount),
                "currency": estimate.currency,
                "threshold": str(threshold),
            },
        )
        _receipt(
            estimate,
            "estimate.approval_requested",
            actor=actor,
            before=Estimate.Status.DRAFT,
            reason=f"above the high-value amount {threshold}",
            approval=request.public_id,
        )
        return estimate
    return _mark_sent(estimate, actor=actor, now=now, before=Estimate.Status.DRAFT)


@transaction.atomic
def estimate_sent_elsewhere(estimate: Estimate, *, actor: str, sent_at: datetime) -> Estimate:
    """A draft the contractor's own system (Jobber) has already sent to the
    customer: marked sent as it is, at `sent_at`. No high-value approval:
    that gate stands before what we send, and a person sent this one there.
    Idempotent for an estimate no longer a draft (returned as it is)."""
    estimate = _locked(estimate)
    if estimate.status != Estimate.Status.DRAFT:
        return estimate
    return _mark_sent(estimate, actor=actor, now=sent_at, before=Estimate.Status.DRAFT)


def _announce(estimate: Estimate, event_type: str, **data: Any) -> None:
    event_emit(
        business=estimate.business_id,
        lead=estimate.lead,
        type=event_type,
        subject=estimate.public_id,
        data={
            "lead": estimate.lead.public_id,
            "estimate": estimate.public_id,
            "amount": estimate.amount,
            "currency": estimate.currency,
            **data,
        },
    )


def _mark_sent(estimate: Estimate, *, actor: str, now: datetime, before: str) -> Estimate:
    estimate.status, estimate.sent_at = Estimate.Status.SENT, now
    estimate.save(update_fields=["status", "sent_at"])
    _receipt(estimate, "estimate.sent", actor=actor, before=before)
    _announce(estimate, EventType.ESTIMATE_SENT, sent_at=now, expires_at=estimate.expires_at)
    lead_event(
        estimate.lead, "estimate.sent", key=estimate.public_id, data={"estimate": estimate.public_id}, actor=actor
    )
    return estimate


def _decide(estimate: Estimate, status: str, *, actor: str, reason: str, now: datetime | None) -> Estimate:
    now = now or timezone.now()
    estimate = _locked(estimate)
    if estimate.status == status:
        return estimate
    if estimate.status != Estimate.Status.SENT:
        raise EstimateError(f"{estimate.public_id} is {estimate.status}: only a sent estimate can be {status}")
    estimate.status, estimate.decided_at = status, now
    estimate.save(update_fields=["status", "decided_at"])
    _receipt(estimate, f"estimate.{status}", actor=actor, before=Estimate.Status.SENT, reason=reason)
    if status in DECISION_EVENTS:
        _announce(estimate, DECISION_EVENTS[status], decided_at=now)
    # The follow-up stops now, not when the orchestrator gets to it.
    stop_reason = DECISION_REASONS[status]
    _stop_follow_up(estimate.lead, reason=stop_reason, actor=actor, now=now)
    return estimate


def _stop_follow_up(lead: Lead, *, reason: str, actor: str, now: datetime) -> None:
    if Enrollment.objects.filter(
        lead=lead, sequence__trigger=TRIGGER, status__in=[Enrollment.Status.ACTIVE, Enrollment.Status.WAITING]
    ).exists():
        enrollments_stop(lead=lead, reason=reason, actor=actor, now=now)


@transaction.atomic
def estimate_accept(estimate: Estimate, *, actor: str, now: datetime | None = None) -> Estimate:
    """The customer accepted: the estimate's follow-up ends (`won`); the
    orchestrator's `estimate.accepted` step wins the lead."""
    estimate = _decide(estimate, Estimate.Status.ACCEPTED, actor=actor, reason="the customer accepted", now=now)
    lead_event(
        estimate.lead, "estimate.accepted", key=estimate.public_id, data={"estimate": estimate.public_id}, actor=actor
    )
    return estimate


@transaction.atomic
def estimate_decline(estimate: Estimate, *, actor: str, reason: str = "", now: datetime | None = None) -> Estimate:
    """The customer declined: the follow-up ends (`declined`); the
    orchestrator's `estimate.declined` step decides the lead."""
    estimate = _decide(
        estimate, Estimate.Status.DECLINED, actor=actor, reason=reason or "the customer declined", now=now
    )
    lead_event(
        estimate.lead,
        "estimate.declined",
        key=estimate.public_id,
        data={"estimate": estimate.public_id, "reason": reason},
        actor=actor,
    )
    return estimate


@transaction.atomic
def estimate_expire(estimate: Estimate, *, now: datetime | None = None) -> Estimate | None:
    """A sent estimate past its `expires_at` without a decision expires; the
    owner gets a task to renew it or close the lead. None when not due."""
    now = now or timezone.now()
    current = _locked(estimate)
    if current.status != Estimate.Status.SENT or current.expires_at is None or current.expires_at > now:
        return None
    current = _decide(
        current,
        Estimate.Status.EXPIRED,
        actor=ACTOR,
        reason=f"no decision by {current.expires_at.isoformat()}",
        now=now,
    )
    _owner_task(current.lead, f"Estimate {current.public_id} expired: renew it or close the lead", now)
    return current


# --- approval decisions ---------------------------------------------------------------


def _estimate_of(payload: dict[str, Any]) -> Estimate | None:
    return Estimate.objects.filter(public_id=str(payload.get("estimate", ""))).first()


def _decider(request: ApprovalRequest) -> str:
    return request.decided_by.get_username() if request.decided_by else "agent:human_gatekeeper"


def _pinned_estimate(request: ApprovalRequest) -> Estimate | None:
    """The estimate the request was proposed for, within its business, locked."""
    if request.estimate_id is None:
        return None
    estimate = Estimate.objects.filter(pk=request.estimate_id, business_id=request.business_id).first()
    return _locked(estimate) if estimate is not None else None


def high_value_check(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    """Only an estimate still waiting for this approval may be approved."""
    estimate = _pinned_estimate(request)
    if estimate is not None and estimate.status != Estimate.Status.PENDING_APPROVAL:
        raise ApprovalConflict(
            f"{estimate.public_id} is {estimate.status}, no longer waiting for approval: reject {request.public_id}"
        )


def high_value_approved(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    estimate = _pinned_estimate(request)
    if estimate is not None and estimate.status == Estimate.Status.PENDING_APPROVAL:
        _mark_sent(estimate, actor=_decider(request), now=timezone.now(), before=Estimate.Status.PENDING_APPROVAL)


def high_value_not_approved(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    estimate = _pinned_estimate(request)
    if estimate is None or estimate.status != Estimate.Status.PENDING_APPROVAL:
        return
    estimate.status = Estimate.Status.DRAFT
    estimate.save(update_fields=["status"])
    why = request.decision_note or ("rejected" if request.status == ApprovalRequest.Status.REJECTED else "expired")
    _receipt(
        estimate,
        "estimate.approval_refused",
        actor=_decider(request),
        before=Estimate.Status.PENDING_APPROVAL,
        reason=why,
    )
    _owner_task(estimate.lead, f"Revise estimate {estimate.public_id}: not approved ({why})"[:300], timezone.now())


# --- the orchestrator's steps -------------------------------------------------------------


def estimate_sent_step(lead: Lead, data: dict[str, Any]) -> str:
    """`estimate.sent`: the lead is in `estimate_sent`, its next action is the
    decision, and the follow-up check (and expiry) are on the clock."""
    estimate = _estimate_of(data)
    if estimate is None or estimate.status != Estimate.Status.SENT or estimate.sent_at is None:
        return "the estimate is no longer open"
    done = []
    if lead.stage != Stage.ESTIMATE_SENT:
        if not lead_sync.transition_allowed(lead.stage, Stage.ESTIMATE_SENT):
            exception_task(
                lead,
                f"Estimate {estimate.public_id} sent from stage {lead.stage}: set the lead's stage",
                f"{lead.stage} cannot move to estimate_sent",
                actor=ACTOR,
            )
            return f"stage {lead.stage} kept: a person decides"
        lead_sync.lead_transition(lead, Stage.ESTIMATE_SENT, actor=ACTOR, reason=f"estimate {estimate.public_id} sent")
        done.append("estimate_sent")
    due = estimate.sent_at + timedelta(days=lead.business.estimate_follow_up_days)
    timer_schedule(
        business=lead.business,
        lead=lead,
        kind=FOLLOW_UP_TIMER,
        due_at=due,
        payload={"estimate": estimate.pk},
        dedupe_key=f"{FOLLOW_UP_TIMER}:{estimate.public_id}",
    )
    if estimate.expires_at is not None:
        timer_schedule(
            business=lead.business,
            lead=lead,
            kind=EXPIRY_TIMER,
            due_at=estimate.expires_at,
            payload={"estimate": estimate.pk},
            dedupe_key=f"{EXPIRY_TIMER}:{estimate.public_id}",
        )
    action = f"Get a decision on estimate {estimate.public_id}"
    if lead.next_action != action:
        lead_sync.lead_set_next_action(lead, action, due, actor=ACTOR, reason="estimate sent")
    done.append(f"follow-up check {due.isoformat()}")
    return ", ".join(done)


def estimate_accepted_step(lead: Lead, data: dict[str, Any]) -> str:
    """`estimate.accepted`: the follow-up is over and the lead is won."""
    enrollments_stop(lead=lead, reason="won", actor=ACTOR)
    _cancel_timers(lead)
    if lead.stage == Stage.WON:
        return "already won"
    if not lead_sync.transition_allowed(lead.stage, Stage.WON):
        exception_task(lead, "Estimate accepted: set the lead's stage", f"{lead.stage} cannot move to won", actor=ACTOR)
        return f"stage {lead.stage} kept: a person decides"
    lead_sync.lead_transition(lead, Stage.WON, actor=ACTOR, reason=f"estimate {data.get('estimate', '')} accepted")
    return "won"


def estimate_declined_step(lead: Lead, data: dict[str, Any]) -> str:
    """`estimate.declined`: the follow-up is over; the lead is lost unless
    another estimate for it is still open."""
    enrollments_stop(lead=lead, reason="declined", actor=ACTOR)
    if lead.estimates.filter(
        status__in=[Estimate.Status.SENT, Estimate.Status.PENDING_APPROVAL, Estimate.Status.DRAFT]
    ).exists():
        return "another estimate is still open"
    _cancel_timers(lead)
    if not lead.is_open:
        return f"already {lead.stage}"
    if not lead_sync.transition_allowed(lead.stage, Stage.LOST):
        exception_task(lead, "Estimate declined: decide the lead", f"{lead.stage} cannot move to lost", actor=ACTOR)
        return f"stage {lead.stage} kept: a person decides"
    why = str(data.get("reason") or "the customer declined the estimate")
    lead_sync.lead_transition(lead, Stage.LOST, actor=ACTOR, reason=f"estimate declined: {why}")
    return "lost"


def _cancel_timers(lead: Lead) -> None:
    Timer.objects.filter(lead=lead, kind__in=[FOLLOW_UP_TIMER, EXPIRY_TIMER], status=Timer.Status.PENDING).update(
        status=Timer.Status.CANCELED
    )


# --- timers --------------------------------------------------------------------------------


def open_estimate_check(estimate_id: int, *, now: datetime) -> str:
    """The follow-up check: an estimate still without a decision starts the
    `open_estimate` path (or, with none, gives the owner a follow-up task)."""
    estimate = Estimate.objects.select_related("lead__business", "lead__contact", "lead__owner__user").get(
        pk=estimate_id
    )
    lead = estimate.lead
    if estimate.status != Estimate.Status.SENT:
        return f"decided: {estimate.status}"
    if Payment.objects.filter(lead=lead).exists():
        return "paid"
    enrollment = enrollment_start(lead, TRIGGER, actor=ACTOR, now=now)
    if enrollment is not None:
        return f"{enrollment.status} {enrollment.public_id}"
    if not lead.is_open or lead.hold:
        return "lead closed or held"
    days = lead.business.estimate_follow_up_days
    task = _owner_task(lead, f"Follow up on estimate {estimate.public_id}: no decision after {days} days", now)
    return f"task {task.public_id}"


def _owner_task(lead: Lead, title: str, now: datetime) -> Any:
    owner = lead.owner if lead.owner is not None and lead.owner.is_active else business_manager(lead.business_id)
    return task_ensure(
        lead=lead, title=title, due_at=now, actor=ACTOR, kind=Task.Kind.FOLLOW_UP, owner=owner, reason="open estimate"
    )


def open_estimate_exit(enrollment: Enrollment, lead: Lead, now: datetime) -> str:
    """The `open_estimate` path's own exits: paid, or no estimate still open."""
    if Payment.objects.filter(lead=lead).exists():
        return "paid"
    if lead.estimates.filter(status=Estimate.Status.SENT).exists():
        return ""
    last = (
        lead.estimates.exclude(status__in=[Estimate.Status.DRAFT, Estimate.Status.PENDING_APPROVAL])
        .order_by("-decided_at", "-pk")
        .first()
    )
    return DECISION_REASONS.get(last.status if last else "", "stage_left")


def _follow_up_timer(timer: Timer) -> None:
    open_estimate_check(int(timer.payload["estimate"]), now=timer.claimed_at or timezone.now())


def _expiry_timer(timer: Timer) -> None:
    estimate_expire(Estimate.objects.get(pk=int(timer.payload["estimate"])), now=timer.claimed_at or timezone.now())


def register() -> None:
    timer_handler_register(FOLLOW_UP_TIMER, _follow_up_timer)
    timer_handler_register(EXPIRY_TIMER, _expiry_timer)
    TRIGGER_EXITS.register(TRIGGER, open_estimate_exit)
    approval_handler_register(
        ApprovalRequest.Kind.HIGH_VALUE_ESTIMATE,
        on_approved=high_value_approved,
        on_rejected=high_value_not_approved,
        on_expired=high_value_not_approved,
        check=high_value_check,
    )
