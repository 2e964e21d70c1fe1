"""Delivery proof (invariant 8): Twilio's message status callbacks move a
sent message forward — never back: a late `sent` after `delivered` changes
nothing, and a terminal status is final. Error codes are kept; an undelivered
or failed text writes a receipt on the lead for its owner and the manager."""

from __future__ import annotations

from urllib.parse import parse_qs

from django.utils import timezone

from crm.models import InboundEvent, Message
from crm.services.inbound_handlers import MalformedPayload, RetryLater
from crm.services.receipts import receipt_write

RANK: dict[str, int] = {
    Message.Status.QUEUED: 0,
    Message.Status.SENDING: 1,
    Message.Status.UNKNOWN: 1,
    Message.Status.SENT: 2,
    Message.Status.DELIVERED: 3,
    Message.Status.UNDELIVERED: 3,
    Message.Status.FAILED: 3,
}
TWILIO_STATUS: dict[str, str] = {
    "accepted": Message.Status.QUEUED,
    "scheduled": Message.Status.QUEUED,
    "queued": Message.Status.QUEUED,
    "sending": Message.Status.SENDING,
    "sent": Message.Status.SENT,
    "delivered": Message.Status.DELIVERED,
    "read": Message.Status.DELIVERED,
    "undelivered": Message.Status.UNDELIVERED,
    "failed": Message.Status.FAILED,
    "canceled": Message.Status.FAILED,
    "partially_delivered": Message.Status.DELIVERED,
}


class UnknownMessage(RetryLater):
    """A callback for a message id we have not recorded (yet): Twilio can
    call back before the send's worker has saved the id it was answered
    with, so the event waits and is tried again (bounded, then failed)."""


def status_callback_process(event: InboundEvent) -> str:
    """Apply one callback to its message, in the caller's transaction. Raises
    UnknownMessage while no message carries the callback's provider id."""
    params = {
        k: v[-1] for k, v in parse_qs(bytes(event.body).decode("utf-8", "replace"), keep_blank_values=True).items()
    }
    sid = params.get("MessageSid") or params.get("SmsSid", "")
    reported = params.get("MessageStatus") or params.get("SmsStatus", "")
    if not sid or reported not in TWILIO_STATUS:
        raise MalformedPayload(f"no MessageSid or an unknown MessageStatus {reported!r}")
    message = (
        Message.objects.select_for_update(of=("self",))
        .select_related("business", "lead")
        .filter(provider_sid=sid)
        .first()
    )
    if message is None:
        raise UnknownMessage(f"no outbound message with provider id {sid!r} (yet: its send may not have saved it)")
    if event.business_id is None:
        InboundEvent.objects.filter(pk=event.pk).update(business=message.business)
    elif event.business_id != message.business_id:
        # Accepted under another business's Twilio account: it cannot speak for this message.
        raise MalformedPayload(f"message {sid!r} belongs to another business than the account that signed this")
    new = TWILIO_STATUS[reported]
    if RANK.get(new, 0) <= RANK.get(message.status, 0) and message.status != Message.Status.UNKNOWN:
        return InboundEvent.Status.IGNORED  # out of order or repeated: never move back
    before = message.status
    message.status = new
    message.error_code = params.get("ErrorCode", "") or message.error_code
    if new == Message.Status.DELIVERED:
        message.delivered_at = timezone.now()
    message.save(update_fields=["status", "error_code", "delivered_at"])
    receipt_write(
        business=message.business,
        lead=message.lead,
        subject=message.public_id,
        actor="agent:delivery_status",
        action=f"message.{new}",
        reason=f"Twilio error {message.error_code}"
        if new in (Message.Status.UNDELIVERED, Message.Status.FAILED) and message.error_code
        else "",
        before={"status": before},
        after={"status": new, "error_code": message.error_code},
    )
    return InboundEvent.Status.PROCESSED
