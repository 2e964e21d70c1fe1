"""The exception path's decision: out-of-area, emergency, commercial and
warranty leads are decided by a person before any booking.

The fit role opens an `exception` approval request (agents.routing.steps);
a person approves (the lead may be booked: the flags stay as facts) or
rejects (the lead is disqualified, with the decision note as the reason).
Booking asks `booking_refusal` first.
"""

from __future__ import annotations

from typing import Any

from agents.fit.qualify import EXCEPTION_PATH
from approvals.handlers import approval_handler_register
from approvals.models import ApprovalRequest
from crm.models import Lead, Stage
from crm.services import lead_sync


def booking_refusal(lead: Lead) -> str:
    """Why the lead may not be booked yet ("" when it may)."""
    flags = [flag for flag in lead.exceptions if flag in EXCEPTION_PATH]
    if not flags:
        return ""
    decisions = ApprovalRequest.objects.filter(lead=lead, kind="exception").order_by("-created_at", "-pk")
    latest = decisions.first()
    if latest is not None and latest.status == ApprovalRequest.Status.APPROVED:
        return ""
    pending = f" (approval {latest.public_id} is {latest.status})" if latest is not None else ""
    return f"{', '.join(flags)}: a manager decides before any booking{pending}"


def exception_rejected(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    lead = request.lead
    if lead is None or not lead.is_open or not lead_sync.transition_allowed(lead.stage, Stage.DISQUALIFIED):
        return
    decider = request.decided_by.get_username() if request.decided_by else "agent:approvals"
    lead_sync.lead_transition(
        lead,
        Stage.DISQUALIFIED,
        actor=decider,
        reason=request.decision_note or f"exception declined: {', '.join(payload.get('flags', []))}",
    )


def register() -> None:
    approval_handler_register("exception", on_rejected=exception_rejected)
