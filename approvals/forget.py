"""Forgetting a person, for the approval queue: crm's `contact_forget` calls
this through its eraser registry (crm does not import approvals)."""

from __future__ import annotations

from django.db.models import Q

from approvals.models import ApprovalRequest
from crm.services.forget import Forgetting


def approvals_forget(f: Forgetting) -> None:
    """Redact the person from requests about their leads or messages: the
    summary and note lose their values, payloads their personal keys. The
    request, its kind, status and decision stay."""
    rows = ApprovalRequest.objects.filter(business_id=f.contact.business_id).filter(
        Q(lead_id__in=f.lead_ids) | Q(payload__message__in=sorted(f.subjects))
    )
    n = 0
    for request in rows:
        f.subjects.add(request.public_id)
        changes = {
            "summary": f.redact(request.summary),
            "decision_note": f.redact(request.decision_note),
            "payload": f.redact_json(request.payload),
            "original_payload": f.redact_json(request.original_payload),
        }
        if any(getattr(request, k) != v for k, v in changes.items()):
            ApprovalRequest.objects.filter(pk=request.pk).update(**changes)
            n += 1
    f.count("approvals_approvalrequest", n)
