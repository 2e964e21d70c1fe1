"""Exception items for a business's manager: something a person must look
at, opened by a periodic check or a failing handoff. At most one open item
per kind and subject (a partial unique constraint), so a check that finds
the same problem again opens nothing new."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.utils import timezone

from crm.models import ExceptionItem
from crm.selectors import business_manager


def manager_exception_open(
    *, business_id: int, kind: str, subject: str, detail: str, lead_id: int | None = None
) -> ExceptionItem | None:
    """The item, owned by the business's manager; None when one is open already."""
    try:
        with transaction.atomic():
            return ExceptionItem.objects.create(
                business_id=business_id,
                lead_id=lead_id,
                owner=business_manager(business_id),
                kind=kind,
                subject=subject,
                detail=detail[:500],
                detected_at=timezone.now(),
            )
    except IntegrityError:
        # Already open for it (the partial unique constraint): it says the same.
        return None


def manager_exceptions_resolve(*, business_id: int, kind: str, subject: str, actor: str) -> int:
    return ExceptionItem.objects.filter(
        business_id=business_id, kind=kind, subject=subject, status=ExceptionItem.Status.OPEN
    ).update(status=ExceptionItem.Status.RESOLVED, resolved_at=timezone.now(), resolved_by=actor[:150])
