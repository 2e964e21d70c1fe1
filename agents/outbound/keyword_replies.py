"""An inbound text read for consent, and the confirmation it is owed.

Consent (agents/consent/keywords.py) records what a text changes — the
ledger, a pause, a complaint — and says which compliance confirmation is
owed; this sends it through the gate, as any text goes out. Consent sits
below outbound (the gate asks it whether a channel may be used), so the
send is here, never there.
"""

from __future__ import annotations

from agents.consent.keywords import ACTOR, Reading, keyword_text_record
from agents.outbound.gate import message_send
from crm.models import Lead, Message


def inbound_text_apply(*, message: Message, lead: Lead, opt_out_type: str = "") -> Reading:
    """Act on one inbound text already recorded on `lead`: record it, then
    send the confirmation owed (once: keyed by the inbound message, so a
    replay sends no second). Joins the caller's transaction."""
    reading = keyword_text_record(message=message, lead=lead, opt_out_type=opt_out_type)
    if reading.reply:
        message_send(
            lead=lead,
            channel="sms",
            body=reading.reply,
            actor=ACTOR,
            idempotency_key=f"keyword-reply:{message.public_id}",
            automated=True,
            compliance_reply=True,
        )
    return reading
