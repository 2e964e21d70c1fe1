"""The Human Gatekeeper's write path: open a request, decide it, expire it.

A decision is one transaction: lock the request row, refuse unless the user
may decide it (a manager or owner of its business, or an operator) and did
not propose it, compare-and-set from pending, write the receipt, then call the
handler the proposing app registered for the kind (`approvals.handlers`), so
the waiting step resumes or is cancelled together with the decision or not at
all. The database refuses a self-approval too (approvals migration 0001).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from approvals.handlers import approval_handlers_for
from approvals.models import ApprovalRequest
from crm.models import Business, Lead
from crm.selectors import scope_for
from crm.services.receipts import receipt_write

log = logging.getLogger(__name__)

PENDING = ApprovalRequest.Status.PENDING
# Who expires a request: the clock, acting as the gatekeeper role.
EXPIRY_ACTOR = "agent:human_gatekeeper"
_FK_FIELDS = ["business", "lead", "proposed_by_user", "decided_by"]


class ApprovalError(Exception):
    """A decision refused: the request is left as it was and no receipt written."""


class ApprovalForbidden(ApprovalError):
    """This user may not decide this request."""


class SelfApproval(ApprovalForbidden):
    """The user proposed the request (invariant 9: nobody approves their own proposal)."""


class ApprovalNotPending(ApprovalError):
    """The request was already decided or has expired (a double click, or someone else was first)."""


@transaction.atomic
def approval_request_open(
    *,
    business: Business,
    kind: str,
    summary: str,
    proposed_by: str,
    lead: Lead | None = None,
    payload: dict[str, Any] | None = None,
    proposed_by_user: Any = None,
    expires_at: datetime | None = None,
) -> ApprovalRequest:
    """A pending request in the queue, with a receipt naming who proposed it.

    `proposed_by` names the proposer: an automated role (`agent:<role>`) or,
    for a person's proposal, their username, with the user as
    `proposed_by_user` so that the database, too, refuses their decision.
    """
    request = ApprovalRequest(
        business=business,
        lead=lead,
        kind=kind,
        summary=summary[:300],
        payload=payload or {},
        proposed_by=proposed_by,
        proposed_by_user=proposed_by_user,
        expires_at=expires_at,
    )
    request.full_clean(exclude=_FK_FIELDS, validate_unique=False, validate_constraints=False)
    request.save(force_insert=True)
    receipt_write(
        business=business,
        lead=lead,
        subject=request.public_id,
        actor=proposed_by,
        action="approval.requested",
        reason=summary,
        after={"kind": kind, "payload": payload or {}},
    )
    return request


def approval_may_decide(request: ApprovalRequest, user: Any) -> bool:
    """Managers and owners of the request's business decide; setters do not."""
    scope = scope_for(user)
    return scope.everything or request.business_id in scope.full_business_ids


def approval_is_proposer(request: ApprovalRequest, user: Any) -> bool:
    """Did `user` propose `request`, as the recorded user or by name?

    A proposal recorded only by name (`sam`, or a role acting for a person,
    `copilot:sam`) counts as the named user's own.
    """
    if request.proposed_by_user_id is not None and request.proposed_by_user_id == user.pk:
        return True
    username = user.get_username().casefold()
    named = request.proposed_by.strip().casefold()
    return named == username or named.rsplit(":", 1)[-1] == username


def _refuse_unless_may_decide(request: ApprovalRequest, user: Any) -> None:
    if not approval_may_decide(request, user):
        raise ApprovalForbidden(
            f"{user.get_username()} may not decide {request.public_id}: only the business's managers and owners may"
        )
    if approval_is_proposer(request, user):
        raise SelfApproval(f"{user.get_username()} proposed {request.public_id} and may not decide it")


def _locked(request: ApprovalRequest) -> ApprovalRequest:
    # `of=("self",)`: PostgreSQL cannot lock the nullable side of the lead join.
    return ApprovalRequest.objects.select_for_update(of=("self",)).select_related("business", "lead").get(pk=request.pk)


def _set_from_pending(request: ApprovalRequest, changes: dict[str, Any]) -> None:
    """Write `changes` only if the row is still pending (compare-and-set)."""
    for field, value in changes.items():
        setattr(request, field, value)
    request.full_clean(exclude=_FK_FIELDS, validate_unique=False, validate_constraints=False)
    updated = ApprovalRequest.objects.filter(pk=request.pk, status=PENDING).update(**changes)
    if updated != 1:
        # Unreachable while the row lock is held; kept so that a caller that
        # forgets the lock still cannot decide a request twice.
        raise ApprovalNotPending(f"{request.public_id} is no longer pending")


def _decide(
    request: ApprovalRequest,
    *,
    user: Any,
    status: str,
    note: str,
    edited_payload: dict[str, Any] | None = None,
) -> ApprovalRequest:
    # The row lock makes a second decider (a double click, a colleague) wait
    # here until the first commits, then read the decided status and refuse.
    current = _locked(request)
    _refuse_unless_may_decide(current, user)
    now = timezone.now()
    if current.status != PENDING:
        decided_by = current.decided_by.get_username() if current.decided_by else None
        who = f" by {decided_by}" if decided_by else ""
        raise ApprovalNotPending(f"{current.public_id} is already {current.status}{who}")
    if current.expires_at is not None and current.expires_at <= now:
        raise ApprovalNotPending(f"{current.public_id} expired at {current.expires_at.isoformat()}")

    before: dict[str, Any] = {"status": current.status}
    after: dict[str, Any] = {"status": status}
    changes: dict[str, Any] = {"status": status, "decided_by": user, "decided_at": now, "decision_note": note}
    if edited_payload is not None and edited_payload != current.payload:
        before["payload"], after["payload"] = current.payload, edited_payload
        changes["original_payload"], changes["payload"] = current.payload, edited_payload
    _set_from_pending(current, changes)
    receipt_write(
        business=current.business,
        lead=current.lead,
        subject=current.public_id,
        actor=user.get_username(),
        action=f"approval.{status}",
        reason=note,
        before=before,
        after=after,
    )
    handlers = approval_handlers_for(current.kind)
    if handlers is not None:
        handler = handlers.on_approved if status == ApprovalRequest.Status.APPROVED else handlers.on_rejected
        if handler is not None:
            handler(current, current.payload)
    request.refresh_from_db()
    return current


@transaction.atomic
def approval_approve(
    request: ApprovalRequest, *, user: Any, note: str = "", edited_payload: dict[str, Any] | None = None
) -> ApprovalRequest:
    """Approve a pending request as `user`, optionally editing its payload first.

    Owns one transaction: the row lock, the compare-and-set from pending, the
    receipt (`approval.approved`, with the original and edited payloads when
    edited) and the kind's `on_approved` handler, called with the approved
    payload. Raises ApprovalForbidden (not a manager or owner of the
    business), SelfApproval (the user proposed it) or ApprovalNotPending
    (decided already, or expired); then nothing is written.
    """
    if edited_payload is not None and not isinstance(edited_payload, dict):
        raise ApprovalError("an edited payload must be a JSON object")
    return _decide(request, user=user, status=ApprovalRequest.Status.APPROVED, note=note, edited_payload=edited_payload)


@transaction.atomic
def approval_reject(request: ApprovalRequest, *, user: Any, note: str = "") -> ApprovalRequest:
    """Reject a pending request as `user`; the kind's `on_rejected` handler
    cancels the waiting step in the same transaction. Refuses as `approval_approve`."""
    return _decide(request, user=user, status=ApprovalRequest.Status.REJECTED, note=note)


def approvals_expire(now: datetime | None = None) -> int:
    """Expire pending requests whose `expires_at` has passed; returns how many.

    Each request is its own transaction (lock, compare-and-set, receipt,
    the kind's `on_expired` handler, never `on_rejected`: nobody decided).
    A request a person is deciding right now is
    skipped (SKIP LOCKED) rather than waited for: the decision wins. A
    handler that fails leaves its request pending for the next run and does
    not stop the others.
    """
    now = now or timezone.now()
    due = ApprovalRequest.objects.filter(status=PENDING, expires_at__lte=now).order_by("expires_at", "pk")
    expired = 0
    for pk in due.values_list("pk", flat=True):
        try:
            expired += _expire_one(pk, now)
        except Exception:
            log.exception("approval %s: expiry failed; it stays pending", pk)
    return expired


@transaction.atomic
def _expire_one(pk: int, now: datetime) -> int:
    current = (
        ApprovalRequest.objects.select_for_update(of=("self",), skip_locked=True)
        .select_related("business", "lead")
        .filter(pk=pk, status=PENDING, expires_at__lte=now)
        .first()
    )
    if current is None:
        return 0  # decided meanwhile, or being decided right now
    deadline = current.expires_at
    _set_from_pending(current, {"status": ApprovalRequest.Status.EXPIRED, "decided_at": now})
    receipt_write(
        business=current.business,
        lead=current.lead,
        subject=current.public_id,
        actor=EXPIRY_ACTOR,
        action="approval.expired",
        reason=f"no decision by {deadline.isoformat() if deadline else 'the deadline'}",
        before={"status": PENDING},
        after={"status": ApprovalRequest.Status.EXPIRED},
    )
    handlers = approval_handlers_for(current.kind)
    if handlers and handlers.on_expired:
        handlers.on_expired(current, current.payload)
    return 1
