"""What follows a text or DM a person sent, once capture has recorded it.

Capture announces the message (`crm.services.inbound_handlers.message_arrived`)
and this, registered at startup, acts on it in capture's transaction, in
this order: the consent check reads it (a keyword is recorded and confirmed,
a revocation or complaint pauses and asks a person); a message on a lead we
already had is a reply, so every automated path of the person ends now; and
the message is left for its reading after commit (the after-hours
receptionist where the business turned it on, else a language model's
reading where it uses one).
"""

from __future__ import annotations

from agents.ai.inbound import inbound_schedule
from agents.followup.replies import reply_log
from agents.outbound.keyword_replies import inbound_text_apply
from crm.models import Lead, Message
from crm.services.inbound_handlers import message_subscriber_register


def message_arrived(message: Message, lead: Lead, *, created_lead: bool, opt_out_type: str = "") -> None:
    reading = inbound_text_apply(message=message, lead=lead, opt_out_type=opt_out_type)
    if not created_lead:
        reply_log(message, lead=lead, reading=reading.kind)
    inbound_schedule(message, lead)


def register() -> None:
    message_subscriber_register(message_arrived)
