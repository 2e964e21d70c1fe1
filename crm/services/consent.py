"""The consent ledger: append an event, keep the derived state in step.

The full policy (what counts as permission for which send) lives with the
send gate; this module owns the ledger's one write path, and one rule of its
own: a STOP from the handset (the keyword, the carrier's 21610, or the
person's own words confirmed) is lifted only by an opt-in keyword (START,
UNSTOP, YES) from that number. Any other grant after it (a web form
ticked by anybody who knows the number, a manual entry) is still appended as
evidence, marked `state_unchanged`, and the state stays revoked.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from crm.models import ConsentEvent, ConsentState, ConsentStatus, ContactPoint, InboundEvent
from crm.services.receipts import receipt_write

# The basis of a consent event recorded from a keyword the person texted.
HANDSET_BASIS = "keyword"
# Revocations that came from the person's handset: a STOP keyword, the
# carrier reporting the number unsubscribed (Twilio 21610), and their own
# words ("stop texting me") confirmed by a person.
HANDSET_REVOCATIONS = frozenset({HANDSET_BASIS, "provider_error_21610", "free_text_confirmed"})
HANDSET_STOP_REASON = "after a STOP from the handset only an opt-in keyword from that number re-opens texts"


def _handset_stop_holds(state: ConsentState, basis: str) -> bool:
    last = state.last_event
    return (
        state.status == ConsentStatus.REVOKED
        and last is not None
        and last.basis in HANDSET_REVOCATIONS
        and basis != HANDSET_BASIS
    )


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
    new_point: bool = False,
) -> ConsentEvent:
    """Append one grant or revocation and rewrite the point's current state
    for that channel in the same transaction (the state row is locked, so two
    recorders for one point apply in order). A grant that may not lift the
    current handset STOP is appended but leaves the state as it is.
    `new_point`: the point was made in this transaction, so it has no state
    yet and no one else can write one (nothing to read or lock)."""
    state = (
        None
        if new_point
        else ConsentState.objects.select_for_update(of=("self",))
        .select_related("last_event")
        .filter(contact_point=contact_point, channel=channel)
        .first()
    )
    held = granted and state is not None and _handset_stop_holds(state, basis)
    if held:
        evidence = {**(evidence or {}), "state_unchanged": HANDSET_STOP_REASON}
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
    before = state.status if state else ConsentStatus.UNKNOWN
    if held:
        receipt_write(
            business=contact_point.contact.business,
            subject=event.public_id,
            actor=actor,
            action="consent.grant_ignored",
            reason=HANDSET_STOP_REASON,
            before={"channel": channel, "status": before},
            after={"channel": channel, "status": before, "basis": basis},
        )
        return event
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
