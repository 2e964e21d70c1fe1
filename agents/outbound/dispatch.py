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
  have sent it, so the message sweep (agents.outbound.reconcile) asks the
  provider before anything is sent again.

The provider's id is saved the moment the provider answers, in its own
statement, before the finish (status and receipt): a worker that dies in
between leaves a `sending` row the sweep settles by that id. Each claim
spends one of the message's MAX_DISPATCH_ATTEMPTS; past them it is given up
(`message_give_up`): failed, with an exception item for a person.

Every Twilio request goes through the account of the message's business
(agents.outbound.twilio_accounts): its own when its sources carry one, else
the operator's shared account.

An Instagram DM goes through Meta's Send API (agents.outbound.instagram)
with the token of the business's instagram source for the account it is
sent from, under the same claim and the same outcomes: Meta's "outside the
allowed window" → `failed` with block reason `outside_window`; a rate limit
→ `queued` again after the same backoff; other refusals → `failed`; a
timeout, a dropped connection or a 5xx → `unknown` (the sweep never sends a
DM again: agents.outbound.reconcile).

A marketplace reply (Thumbtack, Yelp) goes into its thread through the
marketplace's API (agents.outbound.marketplace), with the token of the
source the thread came in through, under the same claim and outcomes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import requests
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import IntegrityError, transaction
from django.db.models import F
from django.urls import reverse
from django.utils import timezone
from twilio.base.exceptions import TwilioException, TwilioRestException
from twilio.http import HttpClient
from twilio.rest import Client
from twilio.twiml.voice_response import VoiceResponse

from agents.meta_graph import message_sid
from agents.outbound.instagram import dm_post, instagram_source_for
from agents.outbound.line_type import CANNOT_TEXT, line_words, number_line
from agents.outbound.marketplace import MARKETPLACE_CHANNELS, marketplace_post
from agents.outbound.twilio_accounts import TwilioAccount, business_account, twilio_client
from agents.queue import task_enqueue
from crm.models import Call, ExceptionItem, Message, NumberLookup
from crm.selectors import business_manager
from crm.services.consent import consent_record
from crm.services.receipts import receipt_write
from crm.services.records import task_create
from crm.services.timers import timer_schedule

ACTOR = "agent:dispatcher"
# A text Twilio cannot hand on within this many seconds expires instead of
# arriving late (past quiet hours, say).
VALIDITY_PERIOD_SECONDS = 600
RETRY_TIMER = "outbound.retry"
RETRY_DELAYS = (timedelta(seconds=30), timedelta(minutes=2), timedelta(minutes=10))
UNSUBSCRIBED = 21610
GAVE_UP = "gave_up"  # the error code of a message no worker or sweep will try again
GAVE_UP_EXCEPTION = "send_gave_up"


def message_account(message: Message) -> TwilioAccount:
    """The account this message goes out (and is reconciled) through: its
    business's, chosen by the number or Messaging Service it is sent from."""
    return business_account(message.business_id, number=message.from_number)


def message_claim(message_id: int, *, now: datetime | None = None) -> bool:
    """queued → sending for one worker (the conditional UPDATE is the claim),
    spending one dispatch attempt; False when another worker has it, it is
    no longer queued, or its attempts are spent."""
    return (
        Message.objects.filter(
            pk=message_id, status=Message.Status.QUEUED, attempts__lt=Message.MAX_DISPATCH_ATTEMPTS
        ).update(status=Message.Status.SENDING, attempts=F("attempts") + 1, claimed_at=now or timezone.now())
        == 1
    )


def message_dispatch(message_id: int, *, http_client: HttpClient | None = None) -> str:
    """Send one queued message if this worker wins its claim; returns the
    message's new status, or "skipped"."""
    if not message_claim(message_id):
        return "skipped"
    message = Message.objects.select_related("business", "lead", "contact_point").get(pk=message_id)
    if message.channel == "email":
        return _email(message)
    if message.channel == "instagram":
        return _instagram(message)
    if message.channel in MARKETPLACE_CHANNELS:
        return _marketplace(message)
    try:
        client = twilio_client(message_account(message), http_client)
        if message.channel == "sms" and message.business.line_type_lookup:
            line = number_line(message.to, client)
            if line is not None and line.line_type in CANNOT_TEXT:
                return _cannot_text(message, line)
        created = _twilio_call(message, client) if message.channel == "voice" else _twilio_send(message, client)
    except TwilioRestException as exc:
        return _rest_error(message, exc)
    except (TwilioException, requests.RequestException) as exc:
        # A timeout or a dropped connection: the provider may have sent it.
        return _finish(message, Message.Status.UNKNOWN, error=f"{type(exc).__name__}: {exc}"[:200])
    return _finish(message, Message.Status.SENT, sid=created.sid)


def message_sid_save(message: Message, sid: str) -> None:
    # Autocommit, at once: whatever happens before the finish commits (a
    # killed worker, a failed receipt), the row names what the provider took.
    Message.objects.filter(pk=message.pk, status=Message.Status.SENDING, provider_sid__isnull=True).update(
        provider_sid=sid
    )


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
    created = client.messages.create(**params)
    message_sid_save(message, created.sid)
    return created


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
    message_sid_save(message, call.sid)
    call_row_ensure(message, call.sid)
    return call


def call_row_ensure(message: Message, sid: str) -> None:
    """The Call row of an outbound call placed for `message` (the sweep makes
    it too when the worker died before it could)."""
    # get_or_create: Twilio's first TwiML request for the call may get here first.
    Call.objects.get_or_create(
        provider_sid=sid,
        defaults={
            "business": message.business,
            "lead": message.lead,
            "contact": message.contact,
            "direction": "out",
            "status": "queued",
            "from_number": message.from_number,
            "to": message.to,
            "started_at": timezone.now(),
            "enrollment_id": message.enrollment_id,
        },
    )


def _cannot_text(message: Message, line: NumberLookup) -> str:
    """A text to a line that cannot take it fails before Twilio, and the
    lead's owner (else the manager) gets a call to make in its place."""
    kind = line_words(line.line_type)
    with transaction.atomic():
        status = _finish(
            message,
            Message.Status.FAILED,
            error=f"lookup:{line.line_type}",
            block_reason=Message.BlockReason.CANNOT_TEXT,
            reason=f"Twilio Lookup: {message.to} is a {kind} line, which cannot take texts",
        )
        failed_here = Message.objects.filter(pk=message.pk, block_reason=Message.BlockReason.CANNOT_TEXT).exists()
        if failed_here and message.lead is not None:
            lead = message.lead
            task_create(
                lead=lead,
                title=f"Call {lead.contact.name or message.to}: {message.to} is a {kind} and cannot take texts",
                due_at=timezone.now(),
                actor=ACTOR,
                kind="follow_up",
                owner=lead.owner or business_manager(lead.business_id),
                reason=f"the text {message.public_id} could not be sent to a {kind}",
            )
    return status


def _rest_error(message: Message, exc: TwilioRestException) -> str:
    if exc.status == 429:
        return _retry_later(message, f"429: {exc.msg}")
    if exc.status >= 500:
        return _finish(message, Message.Status.UNKNOWN, error=f"{exc.status}: {exc.msg}"[:200])
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
            return _finish(message, Message.Status.FAILED, error=str(UNSUBSCRIBED), block_reason="revoked")
    return _finish(message, Message.Status.FAILED, error=str(exc.code or exc.status))


def _instagram(message: Message) -> str:
    source = instagram_source_for(message.business_id, message.from_number)
    if source is None or not source.page_token:
        # Nothing reached Meta: the business must configure the account first.
        return _finish(
            message,
            Message.Status.FAILED,
            error="no_access_token",
            reason=f"no active instagram source with account_id {message.from_number!r} and an access_token",
        )
    outcome = dm_post(access_token=source.page_token, recipient=message.to, text=message.body)
    if outcome.status == "sent":
        sid = message_sid(outcome.message_id)
        message_sid_save(message, sid)
        return _finish(message, Message.Status.SENT, sid=sid)
    if outcome.status == "throttled":
        return _retry_later(message, outcome.detail, code=outcome.error)
    if outcome.status == "outside_window":
        return _finish(
            message,
            Message.Status.FAILED,
            error=outcome.error,
            reason=f"outside_window: {outcome.detail}",
            block_reason="outside_window",
        )
    status = Message.Status.UNKNOWN if outcome.status == "unknown" else Message.Status.FAILED
    return _finish(message, status, error=outcome.error, reason=outcome.detail)


def _marketplace(message: Message) -> str:
    outcome = marketplace_post(message)
    if outcome.status == "sent":
        sid = f"{message.channel}:{outcome.message_id}" if outcome.message_id else None
        if sid:
            message_sid_save(message, sid)
        return _finish(message, Message.Status.SENT, sid=sid)
    if outcome.status == "throttled":
        return _retry_later(message, outcome.detail, code=outcome.error)
    status = Message.Status.UNKNOWN if outcome.status == "unknown" else Message.Status.FAILED
    return _finish(message, status, error=outcome.error, reason=outcome.detail)


def _retry_later(message: Message, error: str, *, code: str = "429") -> str:
    attempts = Message.objects.filter(pk=message.pk).values_list("attempts", flat=True).get()  # this claim's included
    if attempts >= Message.MAX_DISPATCH_ATTEMPTS:
        gave_up = message_give_up(
            message,
            from_status=Message.Status.SENDING,
            reason=f"the provider throttled all {attempts} attempts ({error})",
        )
        return Message.Status.FAILED if gave_up else "skipped"
    due = timezone.now() + RETRY_DELAYS[min(attempts, len(RETRY_DELAYS)) - 1]
    with transaction.atomic():
        # Ready again only at the backoff's end: the queued sweep leaves it to the timer until then.
        Message.objects.filter(pk=message.pk, status=Message.Status.SENDING).update(
            status=Message.Status.QUEUED, error_code=code[:32], queued_at=due
        )
        timer_schedule(
            business=message.business,
            lead=message.lead,
            kind=RETRY_TIMER,
            due_at=due,
            payload={"message": message.pk},
            dedupe_key=f"{RETRY_TIMER}:{message.pk}:{attempts}",
        )
    return Message.Status.QUEUED


def _email(message: Message) -> str:
    try:
        EmailMessage(subject=message.subject or message.business.name, body=message.body, to=[message.to]).send()
    except OSError as exc:
        return _finish(message, Message.Status.UNKNOWN, error=str(exc)[:200])
    return _finish(message, Message.Status.SENT)


def _finish(
    message: Message,
    status: str,
    *,
    sid: str | None = None,
    error: str = "",
    block_reason: str = "",
    reason: str = "",
) -> str:
    """sending → `status`, with the error code (and `reason`, the receipt's
    longer account of it, when the code alone says too little)."""
    with transaction.atomic():
        changes: dict[str, Any] = {"status": status, "error_code": error[:32]}
        if sid:
            changes["provider_sid"] = sid
        if status == Message.Status.SENT:
            changes["sent_at"] = timezone.now()
        if block_reason:
            changes["block_reason"] = block_reason
        if not Message.objects.filter(pk=message.pk, status=Message.Status.SENDING).update(**changes):
            # The sweep settled it meanwhile (this worker was slow, not dead),
            # or its status callback moved it on: that outcome stands.
            return status
        receipt_write(
            business=message.business,
            lead=message.lead,
            subject=message.public_id,
            actor=ACTOR,
            action=f"message.{status}",
            reason=reason or error,
            before={"status": Message.Status.SENDING},
            after={"status": status, "sid": sid},
        )
    return status


def dispatch_enqueue(message_id: int) -> None:
    """Hand a queued message to a worker when the caller's transaction
    commits; never raising: a lost enqueue leaves the message queued, and the
    messages sweep enqueues it again (agents.outbound.reconcile)."""
    task_enqueue("agents.tasks.message_dispatch", message_id, group="outbound")


@transaction.atomic
def message_give_up(message: Message, *, from_status: str, reason: str, actor: str = ACTOR) -> bool:
    """`from_status` → failed (error `gave_up`), with `reason` in the receipt
    and an open `send_gave_up` exception item for the business's manager: a
    person decides whether to send it again. Conditional: False when the
    message has moved on meanwhile. One transaction."""
    if not Message.objects.filter(pk=message.pk, status=from_status).update(
        status=Message.Status.FAILED, error_code=GAVE_UP
    ):
        return False
    receipt_write(
        business=message.business,
        lead=message.lead,
        subject=message.public_id,
        actor=actor,
        action="message.gave_up",
        reason=reason[:500],
        before={"status": from_status},
        after={
            "status": Message.Status.FAILED,
            "attempts": message.attempts,
            "reconcile_attempts": message.reconcile_attempts,
        },
    )
    detail = f"{message.channel} to {message.to} not sent: {reason}"[:500]
    try:
        with transaction.atomic():
            ExceptionItem.objects.create(
                business=message.business,
                lead=message.lead,
                owner=business_manager(message.business_id),
                kind=GAVE_UP_EXCEPTION,
                subject=message.public_id,
                detail=detail,
                detected_at=timezone.now(),
            )
    except IntegrityError:
        # Already open for this message (the partial unique constraint): it says the same.
        pass
    return True
