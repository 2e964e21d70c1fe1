"""The consent ledger: append an event, keep the derived state in step.

The full policy (what counts as permission for which send) arrives with the
send gate; this module owns the ledger's one write path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from crm.models import ConsentEvent, ConsentState, ConsentStatus, ContactPoint, InboundEvent
from crm.services.receipts import receipt_write


@transaction.atomic
def consent_record(
    *,
    contact_point: ContactPoint,
    channel: str,
    granted: bool,
    basis: str,
    actor: str,
    evidence: dict[str, Any] | None = None,
    inbound_event: InboundEvent | None = None,
    at: datetime | None = None,
) -> ConsentEvent:
    """Append one grant or revocation and rewrite the point's current state
    for that channel in the same transaction (the state row is locked, so two
    recorders for one point apply in order)."""
    event = ConsentEvent.objects.create(
        business_id=contact_point.business_id,
        contact_point=contact_point,
        channel=channel,
        action=ConsentEvent.Action.GRANT if granted else ConsentEvent.Action.REVOKE,
        basis=basis,
        evidence=evidence or {},
        inbound_event=inbound_event,
        actor=actor,
        at=at or timezone.now(),
    )
    status = ConsentStatus.GRANTED if granted else ConsentStatus.REVOKED
    state = ConsentState.objects.select_for_update().filter(contact_point=contact_point, channel=channel).first()
    before = state.status if state else ConsentStatus.UNKNOWN
    if state is None:
        ConsentState.objects.create(
            contact_point=contact_point, channel=channel, status=status, last_event=event, updated_at=event.at
        )
    else:
        state.status, state.last_event, state.updated_at = status, event, event.at
        state.save(update_fields=["status", "last_event", "updated_at"])
    receipt_write(
        business=contact_point.contact.business,
        subject=event.public_id,
        actor=actor,
        action="consent.granted" if granted else "consent.revoked",
        reason=basis,
        before={"channel": channel, "status": before},
        after={"channel": channel, "status": status, "point": contact_point.value},
    )
    return event
