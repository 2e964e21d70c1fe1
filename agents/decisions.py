"""What a person's decision resumes, registered with the Human Gatekeeper at
startup (approvals cannot import the roles that wait on it).

- message_draft: approved → the (possibly edited) text goes through the gate
  again, now approved; rejected → the message is blocked as `rejected`;
  expired (nobody decided by its deadline) → blocked as `expired`, so a held
  reply never goes out late nor waits for ever.
  Before an approval or an edit, the pinned message must still be waiting
  (`pending_approval`), else the decision is a conflict and nothing changes;
  an edited body is re-read by the claims guard for the next person.
- opt_out_question: approved → the revocation is recorded in the ledger
  (texts for a number, DMs for an Instagram handle); rejected → automation
  resumes for the person.
- complaint: approved → the hold stays; rejected → the hold is released and
  automation resumes.
"""

from __future__ import annotations

from typing import Any

from agents.consent.policy import consent_channel
from agents.outbound.gate import message_gate
from agents.playbook.claims_guard import claims_scan
from approvals.handlers import approval_handler_register
from approvals.models import ApprovalRequest
from approvals.services import EXPIRY_ACTOR, ApprovalConflict
from crm.models import Contact, Message
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.receipts import receipt_write


def _message(request: ApprovalRequest) -> Message | None:
    """The pinned message, locked, looked up within the request's business.

    A draft proposed without a message row (nothing waits on it) resumes nothing.
    """
    if request.message_id is None:
        return None
    return (
        Message.objects.select_for_update(of=("self",))
        .select_related("business", "lead")
        .filter(pk=request.message_id, business_id=request.business_id)
        .first()
    )


def draft_check(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    """Only a draft still waiting for a person may be approved or reworded."""
    message = _message(request)
    if message is not None and message.status != Message.Status.PENDING_APPROVAL:
        raise ApprovalConflict(
            f"{message.public_id} is {message.status}, no longer waiting for approval: "
            f"nothing in {request.public_id} can be approved or edited now; reject it to clear it"
        )


def draft_recheck(request: ApprovalRequest, payload: dict[str, Any]) -> list[str]:
    """The claims guard on the reworded text: what the next person approves."""
    findings = claims_scan(str(payload.get("body", "")))
    if not findings:
        return ["the claims guard finds no promise"]
    return ["claims: " + ", ".join(f"{finding.kind} “{finding.excerpt}”" for finding in findings)]


def draft_approved(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    message = _message(request)
    if message is None:
        return
    # The check ran under this transaction's lock; kept here so no caller
    # that skips it can rewrite a text that already went out.
    draft_check(request, payload)
    body = str(payload.get("body") or message.body)
    if body != message.body:
        Message.objects.filter(pk=message.pk).update(body=body)
    message_gate(message)  # not needs_approval: a person approved this text


def draft_rejected(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    _draft_block(request, Message.BlockReason.REJECTED)


def draft_expired(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    _draft_block(request, Message.BlockReason.EXPIRED)


def _draft_block(request: ApprovalRequest, reason: str) -> None:
    message = _message(request)
    if message is None:
        return
    updated = Message.objects.filter(pk=message.pk, status=Message.Status.PENDING_APPROVAL).update(
        status=Message.Status.BLOCKED, block_reason=reason
    )
    if updated:
        receipt_write(
            business=message.business,
            lead=message.lead,
            subject=message.public_id,
            actor=_decider(request),
            action="message.blocked",
            reason=reason,
            before={"status": "pending_approval"},
            after={"status": "blocked", "block_reason": reason},
        )


def opt_out_confirmed(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    point = request.contact_point  # pinned within the request's business when it was proposed
    if point is not None:
        consent_record(
            contact_point=point,
            channel=consent_channel(point),
            granted=False,
            basis="free_text_confirmed",
            actor=_decider(request),
            evidence={"text": payload.get("body", ""), "approval": request.public_id},
        )


def opt_out_denied(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    if request.lead is not None:
        _resume(request.lead.contact, request)


def complaint_dismissed(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    lead = request.lead
    if lead is None:
        return
    if lead.hold:
        lead_sync.lead_set_hold(lead, False, actor=_decider(request), reason="not a complaint, on review")
    _resume(lead.contact, request)


def _resume(contact: Contact, request: ApprovalRequest) -> None:
    if Contact.objects.filter(pk=contact.pk, automation_paused=True).update(
        automation_paused=False, automation_paused_reason=""
    ):
        receipt_write(
            business=contact.business,
            subject=contact.public_id,
            actor=_decider(request),
            action="contact.automation_resumed",
            reason=request.decision_note or request.kind,
        )


def _decider(request: ApprovalRequest) -> str:
    # Nobody decides an expiry: the clock does, as the gatekeeper role.
    return request.decided_by.get_username() if request.decided_by else EXPIRY_ACTOR


def register() -> None:
    approval_handler_register(
        "message_draft",
        on_approved=draft_approved,
        on_rejected=draft_rejected,
        on_expired=draft_expired,
        check=draft_check,
        recheck=draft_recheck,
    )
    approval_handler_register("out_of_playbook", check=draft_check, recheck=draft_recheck)
    approval_handler_register("opt_out_question", on_approved=opt_out_confirmed, on_rejected=opt_out_denied)
    approval_handler_register("complaint", on_rejected=complaint_dismissed)
