"""Handing a queued message to its provider, once.

A worker claims the row (queued → sending, a conditional UPDATE that one
worker wins) before calling the provider, so a redelivered task does nothing.
The provider call runs outside any transaction. Its outcome:
- accepted → `sent` with the provider's id (delivery is proven later, by the
  status callback);
- 429 → back to `queued`, retried with backoff (a timer row);
- error 21610 (the person replied STOP to this sender) → `failed`, and an
  opt-out recorded in the consent ledger;
- any other 4xx → `failed` with the error;
- a timeout, connection error or 5xx → `unknown`: the provider may or may not
  have sent it, so `messages_reconcile` asks the provider's message list
  before anything is sent again.

Every Twilio request goes through the account of the message's business
(agents.outbound.twilio_accounts): its own when its sources carry one, else
the operator's shared account.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import requests
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from twilio.base.exceptions import TwilioException, TwilioRestException
from twilio.http import HttpClient
from twilio.rest import Client
from twilio.twiml.voice_response import VoiceResponse

from agents.outbound.twilio_accounts import TwilioAccount, business_account, twilio_client
from crm.models import Call, Message
from crm.services.consent import consent_record
from crm.services.receipts import receipt_write
from crm.services.timers import timer_schedule

log = logging.getLogger(__name__)
S = Message.Status
ACTOR = "agent:dispatcher"
# A text Twilio cannot hand on within this many seconds expires instead of
# arriving late (past quiet hours, say).
VALIDITY_PERIOD_SECONDS = 600
RETRY_TIMER = "outbound.retry"
RETRY_DELAYS = (timedelta(seconds=30), timedelta(minutes=2), timedelta(minutes=10))
UNSUBSCRIBED = 21610


def message_account(message: Message) -> TwilioAccount:
    """The account this message goes out (and is reconciled) through: its
    business's, chosen by the number or Messaging Service it is sent from."""
    return business_account(message.business_id, number=message.from_number)


def _claim(message_id: int) -> bool:
    return Message.objects.filter(pk=message_id, status=S.QUEUED).update(status=S.SENDING) == 1


def message_dispatch(message_id: int, *, http_client: HttpClient | None = None) -> str:
    """Send one queued message if this worker wins its claim; returns the
    message's new status, or "skipped"."""
    if not _claim(message_id):
        return "skipped"
    message = Message.objects.select_related("business", "lead", "contact_point").get(pk=message_id)
    if message.channel == "email":
        return _email(message)
    try:
        client = twilio_client(message_account(message), http_client)
        created = _twilio_call(message, client) if message.channel == "voice" else _twilio_send(message, client)
    except TwilioRestException as exc:
        return _rest_error(message, exc)
    except (TwilioException, requests.RequestException) as exc:
        # A timeout or a dropped connection: the provider may have sent it.
        return _finish(message, S.UNKNOWN, error=f"{type(exc).__name__}: {exc}"[:200])
    return _finish(message, S.SENT, sid=created.sid)


def _twilio_send(message: Message, client: Client) -> Any:
    params: dict[str, Any] = {
        "to": message.to,
        "body": message.body,
        "status_callback": f"{settings.PUBLIC_BASE_URL}/hooks/twilio/sms/status/",
        "validity_period": VALIDITY_PERIOD_SECONDS,
    }
    if message.from_number.startswith("MG"):
        params["messaging_service_sid"] = message.from_number
    else:
        params["from_"] = message.from_number
    return client.messages.create(**params)


def _twilio_call(message: Message, client: Client) -> Any:
    """An outbound call that speaks the approved script. The Call row exists
    before the provider answers, so its status callbacks have a row to update.
    A follow-up path's call (the message has an enrollment) is answered by our
    TwiML instead (agents.followup.views: press 1 / press 9, voicemail only to
    machines), so Twilio detects answering machines for it."""
    params: dict[str, Any] = {
        "to": message.to,
        "from_": message.from_number,
        "status_callback": f"{settings.PUBLIC_BASE_URL}/hooks/twilio/voice/status/",
        "timeout": 25,
    }
    if message.enrollment_id:
        answer = reverse("followup-voice-answer", args=[message.public_id])
        params["url"] = settings.PUBLIC_BASE_URL.rstrip("/") + answer
        params["machine_detection"] = "DetectMessageEnd"
    else:
        twiml = VoiceResponse()
        twiml.say(message.body)
        params["twiml"] = str(twiml)
    call = client.calls.create(**params)
    # get_or_create: Twilio's first TwiML request for the call may get here first.
    Call.objects.get_or_create(
        provider_sid=call.sid,
        defaults={
            "business": message.business, "lead": message.lead, "contact": message.contact, "direction": "out",
            "status": "queued", "from_number": message.from_number, "to": message.to, "started_at": timezone.now(),
            "enrollment_id": message.enrollment_id,
        },
    )  # fmt: skip
    return call


def _rest_error(message: Message, exc: TwilioRestException) -> str:
    if exc.status == 429:
        return _retry_later(message, f"429: {exc.msg}")
    if exc.status >= 500:
        return _finish(message, S.UNKNOWN, error=f"{exc.status}: {exc.msg}"[:200])
    if exc.code == UNSUBSCRIBED:
        with transaction.atomic():
            if message.contact_point is not None:
                consent_record(
                    contact_point=message.contact_point,
                    channel="sms",
                    granted=False,
                    basis="provider_error_21610",
                    actor=ACTOR,
                    evidence={"error": exc.code, "message": str(exc.msg)[:200], "from": message.from_number},
                )
            return _finish(message, S.FAILED, error=str(UNSUBSCRIBED), block_reason="revoked")
    return _finish(message, S.FAILED, error=str(exc.code or exc.status))


def _retry_later(message: Message, error: str) -> str:
    attempts = Message.objects.filter(pk=message.pk).values_list("attempts", flat=True).get()
    if attempts >= len(RETRY_DELAYS):
        return _finish(message, S.FAILED, error=f"gave up after {attempts} throttled attempts ({error})")
    due = timezone.now() + RETRY_DELAYS[attempts]
    with transaction.atomic():
        Message.objects.filter(pk=message.pk, status=S.SENDING).update(
            status=S.QUEUED, attempts=attempts + 1, error_code="429"
        )
        timer_schedule(
            business=message.business, lead=message.lead, kind=RETRY_TIMER, due_at=due,
            payload={"message": message.pk}, dedupe_key=f"{RETRY_TIMER}:{message.pk}:{attempts + 1}",
        )  # fmt: skip
    return S.QUEUED


def _email(message: Message) -> str:
    try:
        EmailMessage(subject=message.subject or message.business.name, body=message.body, to=[message.to]).send()
    except OSError as exc:
        return _finish(message, S.UNKNOWN, error=str(exc)[:200])
    return _finish(message, S.SENT)


def _finish(message: Message, status: str, *, sid: str | None = None, error: str = "", block_reason: str = "") -> str:
    with transaction.atomic():
        changes: dict[str, Any] = {"status": status, "error_code": error[:32]}
        if sid:
            changes["provider_sid"] = sid
        if status == S.SENT:
            changes["sent_at"] = timezone.now()
        if block_reason:
            changes["block_reason"] = block_reason
        Message.objects.filter(pk=message.pk, status=S.SENDING).update(**changes)
        receipt_write(
            business=message.business,
            lead=message.lead,
            subject=message.public_id,
            actor=ACTOR,
            action=f"message.{status}",
            reason=error,
            before={"status": S.SENDING},
            after={"status": status, "sid": sid},
        )
    return status


def messages_reconcile(*, now: datetime | None = None, http_client: HttpClient | None = None) -> dict[str, int]:
    """Settle messages whose send outcome is unknown by asking Twilio's
    message list (to, from, since the attempt): found → `sent` with its id;
    not found → `queued` again, so it is sent once."""
    now = now or timezone.now()
    clients: dict[TwilioAccount, Client] = {}
    settled = {"found": 0, "requeued": 0}
    for message in Message.objects.filter(status=S.UNKNOWN, channel="sms").select_related("business", "lead"):
        listing: dict[str, Any] = {
            "to": message.to,
            "date_sent_after": message.created_at - timedelta(minutes=1),
            "limit": 20,
        }
        if not message.from_number.startswith("MG"):
            listing["from_"] = message.from_number
        account = message_account(message)
        if account not in clients:
            clients[account] = twilio_client(account, http_client)
        client = clients[account]
        try:
            found = [m for m in client.messages.list(**listing) if (m.body or "") == message.body]
        except (TwilioException, requests.RequestException) as exc:
            log.warning("reconcile %s: %s", message.public_id, exc)
            continue
        with transaction.atomic():
            if found:
                updated = Message.objects.filter(pk=message.pk, status=S.UNKNOWN).update(
                    status=S.SENT, provider_sid=found[0].sid
                )
                action, key = "message.reconciled_sent", "found"
            else:
                updated = Message.objects.filter(pk=message.pk, status=S.UNKNOWN).update(status=S.QUEUED)
                action, key = "message.reconciled_requeued", "requeued"
            if updated:
                settled[key] += 1
                receipt_write(
                    business=message.business, lead=message.lead, subject=message.public_id, actor=ACTOR,
                    action=action, reason="the provider's message list settles an unknown outcome",
                )  # fmt: skip
                if key == "requeued":
                    transaction.on_commit(partial(_enqueue, message.pk))
    return settled


def _enqueue(message_id: int) -> None:
    from django_q.tasks import async_task

    async_task("agents.tasks.message_dispatch", message_id, q_options={"group": "outbound"})
