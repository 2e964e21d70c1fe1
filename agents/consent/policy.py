"""Consent check: may this channel be used for this person, now, this way?

Reads the ledger's derived state (crm ConsentState) and the conversation:
- a revocation always wins;
- granted consent allows every send — but consent older than the business's
  `consent_max_age_days` is no permission for automated follow-up;
- with no consent on record, an inbound text or call in the last day allows
  replies in that conversation (a person's or an automated reply);
- otherwise there is no consent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from crm.models import Call, ConsentState, ConsentStatus, ContactPoint, Message

CONVERSATION_WINDOW = timedelta(hours=24)


@dataclass(frozen=True)
class ConsentDecision:
    allowed: bool
    reason: str  # "" when allowed; else revoked / no_consent
    basis: str


def consent_decide(point: ContactPoint, channel: str, *, automated: bool, now: datetime) -> ConsentDecision:
    state = ConsentState.objects.filter(contact_point=point, channel=channel).select_related("last_event").first()
    if state is not None and state.status == ConsentStatus.REVOKED:
        return ConsentDecision(False, "revoked", state.last_event.basis)
    if state is not None and state.status == ConsentStatus.GRANTED:
        max_age = timedelta(days=point.contact.business.consent_max_age_days)
        if automated and now - state.last_event.at > max_age:
            return ConsentDecision(False, "no_consent", f"consent older than {max_age.days} days")
        return ConsentDecision(True, "", state.last_event.basis)
    since = now - CONVERSATION_WINDOW
    spoke = (
        Message.objects.filter(contact_point=point, direction="in", created_at__gte=since).exists()
        or Call.objects.filter(
            contact_id=point.contact_id, direction="in", from_number=point.value, started_at__gte=since
        ).exists()
    )
    if spoke and channel in ("sms", "voice"):
        return ConsentDecision(True, "", "inbound_conversation")
    return ConsentDecision(False, "no_consent", "no consent on record")
