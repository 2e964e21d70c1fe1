"""The Human Gatekeeper's write path: open a request for a person to decide.

Decisions (approve, reject) and the handlers that resume the proposing role
arrive with the consent and send-gate work.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from approvals.models import ApprovalRequest
from crm.models import Business, Lead
from crm.services.receipts import receipt_write


@transaction.atomic
def approval_request_open(
    *,
    business: Business,
    kind: str,
    summary: str,
    proposed_by: str,
    lead: Lead | None = None,
    payload: dict[str, Any] | None = None,
) -> ApprovalRequest:
    """A pending request in the queue, with a receipt naming who proposed it."""
    request = ApprovalRequest.objects.create(
        business=business, lead=lead, kind=kind, summary=summary[:300], payload=payload or {}, proposed_by=proposed_by
    )
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
