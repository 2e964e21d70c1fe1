"""Every model call on behalf of a business: claimed against its monthly
cap, made, and recorded as a `ModelCall` row and a receipt.

`model_call` (a message read and its reply drafted), `transcription_call`
(a call's recording turned into text) and `model_call_counted` beneath them
(also an explanation of a fit score) are the only ways agents/ai calls a
model for a business:

1. The cap. Unless the business file says `ai: {enabled: false}`, one call
   is claimed from the business's counter for the current calendar month of
   its own zone (`quota_claim`): a single conditional upsert, so any number
   of workers at once never take it past `ai: {monthly_calls: N}`. A claim
   counts the call whether or not it is answered (a provider may bill a call
   whose answer never arrived). Refused: no call, a `refused` row and an
   `ai.refused` receipt; the rules answer.
2. The call, outside any transaction (agents/ai/client.py).
3. The record, in one transaction: a `ModelCall` row (model, digests of the
   prompt and the answer, tokens, cost estimate, duration) and a receipt
   (`ai.called`, or `ai.failed` saying what happens instead: the rules
   answer, or the call waits without a transcript).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from functools import partial
from typing import Protocol, TypeVar
from zoneinfo import ZoneInfo

from django.db import connection, transaction
from django.utils import timezone

from agents.ai.client import ModelFailure, ModelRequest, ModelSettings, Usage, cost_of, model_ask
from agents.ai.grounding import ANSWER_DESCRIPTION, ANSWER_NAME, ANSWER_SCHEMA, SYSTEM_PROMPT, Grounding, prompt_of
from agents.ai.intents import INTENTS
from agents.ai.speech import SpeechSettings, cost_of_audio, speech_to_text
from crm.models import Business, Call, Lead, Message, ModelCall
from crm.services.receipts import receipt_write

ACTOR = "agent:ai_assistant"
REPLY = "reply"  # the purpose of a call that reads a message and drafts its answer
TRANSCRIPTION = "transcription"  # the purpose of a call that turns a call's recording into text
EXPLAIN = "explain"  # the purpose of a call that explains a lead's fit score and offer
# What each purpose's receipt says it did, and what happens instead when it gives no answer.
DONE = {
    REPLY: "read the message and drafted a reply",
    TRANSCRIPTION: "transcribed the call's recording",
    EXPLAIN: "explained the fit score in the lead's words",
}
INSTEAD = {
    REPLY: "the rules answered instead",
    TRANSCRIPTION: "the call stays without a transcript until its transcription is retried",
    EXPLAIN: "the fit score stands without an explanation",
}
CONFIDENCE_DEFAULT = 0.5


class Answered(Protocol):
    @property
    def usage(self) -> Usage: ...


A = TypeVar("A", bound=Answered)


@dataclass(frozen=True)
class Understanding:
    """The model's reading of a message: its intent and confidence, the reply
    it drafted (placeholders unfilled) and the ids of the facts it cites."""

    intent: str
    confidence: float
    reply: str
    facts: tuple[str, ...]
    usage: Usage


@dataclass(frozen=True)
class CallOutcome:
    """What `model_call` got: an understanding, or why the rules answer instead."""

    understanding: Understanding | None
    call: ModelCall
    fallback: str = ""  # the failure's kind, or over_cap


def month_of(business: Business, now: datetime) -> date:
    """The first day of `now`'s calendar month in the business's zone."""
    return now.astimezone(ZoneInfo(business.timezone)).date().replace(day=1)


def quota_claim(business: Business, *, now: datetime | None = None) -> bool:
    """Count one model call for the business this month; False (nothing
    counted) when its cap is reached. One statement: the upsert's row lock
    and its re-checked WHERE make concurrent claims take turns, so the count
    never passes the cap however many workers claim at once. Runs in its own
    autocommit when called outside a transaction, so the claim holds even if
    the call that follows never returns."""
    cap = business.ai_monthly_calls
    if cap is not None and cap <= 0:
        return False
    month = month_of(business, now or timezone.now())
    sql = (
        "INSERT INTO crm_modelcallquota (business_id, month, used) VALUES (%s, %s, 1) "
        "ON CONFLICT (business_id, month) DO UPDATE SET used = crm_modelcallquota.used + 1"
    )
    params: list[int | date] = [business.pk, month]
    if cap is not None:
        sql += " WHERE crm_modelcallquota.used < %s"
        params.append(cap)
    with connection.cursor() as cursor:
        cursor.execute(sql + " RETURNING used", params)
        return cursor.fetchone() is not None


def understand(grounding: Grounding, config: ModelSettings) -> Understanding:
    """Ask the model to read `grounding.message` and draft its reply; no
    database (the evaluation uses it too). Raises ModelFailure, `malformed`
    for an answer that is not the object the schema describes."""
    request = ModelRequest(
        system=SYSTEM_PROMPT,
        user=prompt_of(grounding),
        schema=ANSWER_SCHEMA,
        name=ANSWER_NAME,
        description=ANSWER_DESCRIPTION,
    )
    answer = model_ask(request, config)
    data = answer.data
    intent = data.get("intent")
    reply = data.get("reply")
    facts = data.get("facts")
    confidence = data.get("confidence", CONFIDENCE_DEFAULT)
    if intent not in INTENTS:
        raise ModelFailure("malformed", f"intent {str(intent)[:40]!r} is not one of ours", answer.usage)
    if not isinstance(reply, str) or not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
        raise ModelFailure("malformed", "reply or facts of the wrong type", answer.usage)
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        raise ModelFailure("malformed", "confidence is not a number", answer.usage)
    return Understanding(
        intent=str(intent),
        confidence=min(max(float(confidence), 0.0), 1.0),
        reply=reply.strip(),
        facts=tuple(dict.fromkeys(f.strip() for f in facts if f.strip()))[:20],
        usage=answer.usage,
    )


def model_call(
    *,
    business: Business,
    config: ModelSettings,
    grounding: Grounding,
    lead: Lead | None = None,
    message: Message | None = None,
    purpose: str = REPLY,
) -> CallOutcome:
    """Claim, call and record one model call for `business` (see the module).
    Call it outside a transaction: the network call must not hold one open."""
    answer, call, fallback = model_call_counted(
        lambda: understand(grounding, config),
        business=business,
        config=config,
        lead=lead,
        message=message,
        purpose=purpose,
    )
    return CallOutcome(answer, call, fallback)


def model_call_counted(
    ask: Callable[[], A],
    *,
    business: Business,
    config: ModelSettings,
    lead: Lead | None = None,
    message: Message | None = None,
    call: Call | None = None,
    purpose: str,
    cost: Callable[[A], Decimal] | None = None,
) -> tuple[A | None, ModelCall, str]:
    """Claim one call from the business's cap, make it (`ask`: a parsed
    answer carrying its `usage`, or ModelFailure) and record it: the answer,
    its ModelCall row, and "" or why there is no answer (the failure's kind,
    or over_cap). `cost`: the answer's price where tokens do not make it (a
    transcription is priced by the minute). Outside a transaction, as
    `model_call`."""
    record = partial(_record, business=business, lead=lead, message=message, call=call, purpose=purpose, config=config)
    if not quota_claim(business):
        cap = business.ai_monthly_calls
        detail = f"this month's {cap} model calls are used up"
        row = record(status=ModelCall.Status.REFUSED, usage=Usage(), error="over_cap", detail=detail)
        return None, row, "over_cap"
    try:
        answer = ask()
    except ModelFailure as failure:
        row = record(status=ModelCall.Status.FAILED, usage=failure.usage, error=failure.kind, detail=failure.detail)
        return None, row, failure.kind
    row = record(status=ModelCall.Status.OK, usage=answer.usage, cost=cost(answer) if cost is not None else None)
    return answer, row, ""


@dataclass(frozen=True)
class TranscriptionOutcome:
    """What `transcription_call` got: the text, or why there is none."""

    text: str
    call: ModelCall
    failure: str = ""  # the failure's kind, or over_cap


def transcription_call(
    *, business: Business, config: SpeechSettings, audio: bytes, filename: str, content_type: str, call: Call
) -> TranscriptionOutcome:
    """Claim, call and record one transcription of `call`'s recording for
    `business`, counted against the same monthly cap as every model call.
    Call it outside a transaction: the upload and the answer take seconds."""
    transcript, row, failure = model_call_counted(
        lambda: speech_to_text(audio, filename, content_type, config),
        business=business,
        config=config.as_model_settings(),
        lead=call.lead,
        call=call,
        purpose=TRANSCRIPTION,
        cost=lambda _: cost_of_audio(call.duration_seconds, config),
    )
    return TranscriptionOutcome(transcript.text if transcript is not None else "", row, failure)


@transaction.atomic
def _record(
    *,
    business: Business,
    lead: Lead | None,
    message: Message | None,
    purpose: str,
    config: ModelSettings,
    status: str,
    usage: Usage,
    error: str = "",
    detail: str = "",
    call: Call | None = None,
    cost: Decimal | None = None,
) -> ModelCall:
    row = ModelCall.objects.create(
        business=business,
        lead=lead,
        message=message,
        call=call,
        purpose=purpose,
        provider=config.provider,
        model=config.model[:100],
        status=status,
        error=error,
        detail=detail[:300],
        prompt_digest=usage.prompt_digest,
        answer_digest=usage.answer_digest,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_amount=cost_of(usage, config) if cost is None else cost,
        duration_ms=usage.duration_ms,
    )
    if status == ModelCall.Status.OK:
        action, reason = "ai.called", f"{config.label} {DONE[purpose]}"
    elif status == ModelCall.Status.REFUSED:
        action, reason = "ai.refused", f"no call: {detail}; {INSTEAD[purpose]}"
    else:
        action, reason = "ai.failed", f"{config.label} gave no usable answer ({error}); {INSTEAD[purpose]}"
    receipt_write(
        business=business,
        lead=lead,
        subject=row.public_id,
        actor=ACTOR,
        action=action,
        reason=reason,
        after={
            "provider": row.provider,
            "model": row.model,
            "purpose": purpose,
            "status": status,
            "error": error,
            "message": message.public_id if message is not None else None,
            "prompt_digest": row.prompt_digest,
            "answer_digest": row.answer_digest,
            "input_tokens": row.input_tokens,
            "output_tokens": row.output_tokens,
            "cost_amount": f"{row.cost_amount}",
            "currency": row.currency,
            "duration_ms": row.duration_ms,
        }
        | ({"call": call.public_id} if call is not None else {}),
    )
    return row
