"""Consent check: may this channel be used for this person, now, this way?

Reads the ledger's derived state (crm ConsentState) and the conversation:
- a revocation always wins;
- granted consent allows every send — but consent older than the business's
  `consent_max_age_days` is no permission for automated follow-up;
- with no consent on record, an inbound text or call in the last day allows
  replies in that conversation (a person's or an automated reply);
- otherwise there is no consent.

Instagram DMs follow Meta's rule instead of a grant: a business may answer
only within 24 hours of the person's last DM to it (`outside_window` after
that, and before any DM at all). No form or manual grant opens that window,
and Meta would refuse the send anyway; a revocation (their STOP by DM, or
their plain words confirmed by a person) still blocks inside it.

A marketplace thread (Thumbtack, Yelp) is the customer's own request to the
business on that marketplace: an answer there needs no grant, and only their
revocation (STOP in the thread, plain words a person confirmed) blocks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from crm.models import Call, ConsentState, ConsentStatus, Contact, ContactPoint, ContactPointKind, Message

CONVERSATION_WINDOW = timedelta(hours=24)
# Meta's standard messaging window: replies only within this of the person's
# last message to the business (the HUMAN_AGENT tag's 7 days is not used).
MESSAGING_WINDOW = timedelta(hours=24)
# Marketplace threads: the channel is the contact point's kind.
THREAD_KINDS = (ContactPointKind.THUMBTACK, ContactPointKind.YELP)


@dataclass(frozen=True)
class ConsentDecision:
    allowed: bool
    reason: str  # "" when allowed; else revoked / no_consent
    basis: str


def consent_decide(point: ContactPoint, channel: str, *, automated: bool, now: datetime) -> ConsentDecision:
    state = ConsentState.objects.filter(contact_point=point, channel=channel).select_related("last_event").first()
    if state is not None and state.status == ConsentStatus.REVOKED:
        return ConsentDecision(False, "revoked", state.last_event.basis)
    if channel == "instagram":
        return _messaging_window(point, now)
    if channel in THREAD_KINDS:
        return ConsentDecision(True, "", "marketplace_thread")
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


def consent_channel(point: ContactPoint) -> str:
    """The ledger channel a person's own words on this point speak for (a
    keyword, a revocation a person confirmed): texts for a phone, DMs for an
    Instagram handle, the thread's own channel for a marketplace handle."""
    if point.kind in (ContactPointKind.INSTAGRAM, *THREAD_KINDS):
        return str(point.kind)
    return "sms"


def messaging_window_closes(point: ContactPoint) -> datetime | None:
    """When Meta's window for DMs to this Instagram handle closes (or closed):
    24 hours after the person's last DM to the business; None before any."""
    last = (
        Message.objects.filter(contact_point=point, direction="in")
        .order_by("-created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    return last + MESSAGING_WINDOW if last is not None else None


def _messaging_window(point: ContactPoint, now: datetime) -> ConsentDecision:
    closes = messaging_window_closes(point)
    if closes is None:
        return ConsentDecision(False, "outside_window", "the person has never sent a DM to the business")
    if now >= closes:
        return ConsentDecision(
            False, "outside_window", f"Meta's 24-hour window after the person's last DM closed at {closes.isoformat()}"
        )
    return ConsentDecision(True, "", "messaging_window")


def revoked_elsewhere(contact: Contact) -> str:
    """Where the person revoked consent on any channel, any number or handle
    ("" for nowhere). One revocation stops every automated text and call
    from the business to them (the FCC's revoke-all rule, in force 31
    January 2027; applied here from now): a STOP to one number, an email
    unsubscribe or a STOP in a marketplace thread all count. A person's own
    reply is not automated, and still answers them where their consent
    allows."""
    state = (
        ConsentState.objects.filter(contact_point__contact_id=contact.pk, status=ConsentStatus.REVOKED)
        .select_related("contact_point")
        .order_by("-updated_at")
        .first()
    )
    if state is None:
        return ""
    return f"revoked on {state.channel} ({state.contact_point.kind} {state.contact_point.public_id})"
