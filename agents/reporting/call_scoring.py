"""Call Scoring: recordings and transcripts in, an explainable score out, and
the calls a manager should listen to in a review queue.

Input: Twilio's recording status callback (`POST /hooks/twilio/voice/recording/`,
signed like every Twilio hook; it also accepts Twilio's transcription
callback, whose `TranscriptionText` becomes the transcript), the server's
speech to text on the recording where the business says
`calls: {transcription: model}` (agents/reporting/call_transcription.py), or
a transcript imported by hand (`python manage.py import_transcript CALL FILE`).

The rubric, each item with the words that decided it:

| flag | when |
|---|---|
| `no_booking_ask` | a call on a lead whose transcript never asks for a booking |
| `price_promised` | a price, discount or warranty said on the call (the claims guard's words) |
| `complaint_words` | words of a complaint (lawyer, refund, terrible…) |
| `ended_unbooked` | a completed call on an open lead with no appointment booked since the call began |
| `too_short` | a completed conversation shorter than SHORT_SECONDS |

Points start at 100 and each flag takes its weight; any flag puts the call in
the review queue (`review_status="pending"`, the Call admin's filter) unless a
person already reviewed that same set of flags.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.ai.inbound import AI_TASK_TIMEOUT
from agents.ai.speech import speech_settings_for
from agents.capture.providers.twilio import form_params, signature_problem, signing_account
from agents.capture.webhooks import WebhookError, accept, body_digest, raw_body, reject
from agents.playbook.claims_guard import claims_scan
from agents.queue import task_enqueue
from crm.models import Appointment, Business, Call, InboundEvent, Provider, Timer
from crm.services.inbound_handlers import MalformedPayload, handler_register
from crm.services.receipts import receipt_write
from crm.services.timers import timer_schedule

ACTOR = "agent:call_scoring"
TRANSCRIBE_KIND = "call.transcribe"
SHORT_SECONDS = 30
# Arrival times are left out: a setter booking a visit on the phone names one.
PROMISE_KINDS = ("price", "discount", "warranty")
BOOKING_ASK = re.compile(
    r"\b(?:schedul\w*|book(?:ed|ing)?|appointment|come (?:out|by)|send (?:a tech|someone|somebody)"
    r"|what time works|when (?:are|would) you (?:free|available)|get you on the calendar|set (?:you|it|that) up"
    r"|available (?:on|tomorrow|today|this|next))\b",
    re.IGNORECASE,
)
COMPLAINT = re.compile(
    r"\b(?:complain\w*|terrible|awful|worst|lawyer|attorney|sue|scam\w*|rip(?:ped)?[- ]off|refund"
    r"|unacceptable|never again|better business bureau|harass\w*|disgusting|furious)\b",
    re.IGNORECASE,
)
WEIGHTS = {"no_booking_ask": 30, "price_promised": 25, "complaint_words": 25, "ended_unbooked": 10, "too_short": 10}


@dataclass(frozen=True)
class Flag:
    code: str
    reason: str
    evidence: str = ""


def _excerpt(text: str, match: re.Match[str], width: int = 40) -> str:
    start, end = max(0, match.start() - width), min(len(text), match.end() + width)
    return ("…" if start else "") + text[start:end].strip() + ("…" if end < len(text) else "")


def call_flags(call: Call, transcript: str, *, booked_since: bool) -> list[Flag]:
    """The rubric over one call: pure, given whether a booking followed."""
    flags: list[Flag] = []
    on_lead = call.lead_id is not None
    if on_lead:
        ask = BOOKING_ASK.search(transcript)
        if ask is None:
            flags.append(Flag("no_booking_ask", "nobody asked to book a visit"))
    promises = [f for f in claims_scan(transcript) if f.kind in PROMISE_KINDS]
    if promises:
        words = "; ".join(f"{f.kind}: {f.excerpt}" for f in promises)
        flags.append(Flag("price_promised", "a promise only a person may make was said on the call", words))
    complaint = COMPLAINT.search(transcript)
    if complaint:
        flags.append(Flag("complaint_words", f"complaint word “{complaint.group(0)}”", _excerpt(transcript, complaint)))
    completed = call.status == "completed"
    if completed and on_lead and not booked_since and call.lead and call.lead.is_open:
        flags.append(Flag("ended_unbooked", "a lead call that ended without a booking"))
    if completed and call.duration_seconds is not None and call.duration_seconds < SHORT_SECONDS:
        flags.append(Flag("too_short", f"{call.duration_seconds} s, under {SHORT_SECONDS} s"))
    return flags


@transaction.atomic
def call_score(call: Call, *, actor: str = ACTOR) -> Call:
    """Score the call's transcript and queue it for review when flagged.
    Idempotent: the same transcript scores the same, and a person's review
    of the same flags stands."""
    call = Call.objects.select_for_update(of=("self",)).select_related("lead", "business").get(pk=call.pk)
    if not call.transcript.strip():
        return call
    booked_since = (
        call.lead_id is not None
        and Appointment.objects.filter(lead_id=call.lead_id, created_at__gte=call.started_at).exists()
    )
    flags = call_flags(call, call.transcript, booked_since=booked_since)
    codes = [f.code for f in flags]
    points = max(0, 100 - sum(WEIGHTS[c] for c in codes))
    same_as_reviewed = call.review_status == "reviewed" and [f["code"] for f in call.flags] == codes
    review = "" if not flags else ("reviewed" if same_as_reviewed else "pending")
    before = {"flags": [f["code"] for f in call.flags], "review_status": call.review_status}
    call.flags = [asdict(f) for f in flags]
    call.score = {"points": points, "rubric": codes, "booked_since": booked_since, "duration": call.duration_seconds}
    call.review_status = review
    call.save(update_fields=["flags", "score", "review_status"])
    receipt_write(
        business=call.business,
        lead=call.lead,
        subject=call.public_id,
        actor=actor,
        action="call.scored",
        before=before,
        after={"points": points, "flags": codes, "review_status": review},
    )
    return call


@transaction.atomic
def call_transcript_set(call: Call, text: str, *, actor: str, source: str) -> Call:
    """Store a transcript (from the provider or imported by a person) and score it."""
    text = text.strip()
    if not text:
        raise ValueError("the transcript is empty")
    Call.objects.filter(pk=call.pk).update(transcript=text)
    receipt_write(
        business=call.business,
        lead=call.lead,
        subject=call.public_id,
        actor=actor,
        action="call.transcript_added",
        after={"source": source, "characters": len(text)},
    )
    return call_score(call)


@transaction.atomic
def call_review_mark(call: Call, *, actor: str, note: str = "") -> bool:
    """A person listened: the call leaves the review queue. False if it was not pending."""
    done = Call.objects.filter(pk=call.pk, review_status="pending").update(review_status="reviewed")
    if done:
        receipt_write(
            business=call.business,
            lead=call.lead,
            subject=call.public_id,
            actor=actor,
            action="call.reviewed",
            reason=note,
            after={"review_status": "reviewed"},
        )
    return bool(done)


def call_find(ref: str) -> Call | None:
    """A call by its public id or its provider's SID."""
    return Call.objects.select_related("business", "lead").filter(public_id=ref).first() or (
        Call.objects.select_related("business", "lead").filter(provider_sid=ref).first()
    )


# ---------------------------------------------------- Twilio's recording hook


def _external_id(params: Any) -> tuple[str, str]:
    """The event id, and what is missing when the body cannot be identified."""
    if params.get("TranscriptionSid"):
        return f"{params['TranscriptionSid']}:transcription:{params.get('TranscriptionStatus', '')}", ""
    sid, status = params.get("RecordingSid", ""), params.get("RecordingStatus", "")
    if not params.get("CallSid"):
        return "", "CallSid"
    if not sid or not status:
        return "", "RecordingSid or RecordingStatus"
    return f"{sid}:recording:{status}", ""


@csrf_exempt
@require_POST
def recording_status(request: HttpRequest) -> HttpResponse:
    try:
        body = raw_body(request)
        params = request.POST
        call_sid = params.get("CallSid", "")
        call = Call.objects.filter(provider_sid=call_sid).first() if call_sid else None
        # The call's business's account signs its recordings; a recording that
        # outruns its call is checked under the account AccountSid names.
        account = signing_account(params, stored=call, status=True)
        business_id = call.business_id if call else account.business_id
        business = Business.objects.filter(pk=business_id).first() if business_id else None
        problem = signature_problem(request, params, account)
        if problem:
            raise reject(request, provider=Provider.TWILIO, source=None, reason=problem, status=403)
        external_id, missing = _external_id(params)
        accept(
            request,
            provider=Provider.TWILIO,
            external_id=external_id or f"recording:{body_digest(body)}",
            body=body,
            business=business,
            kind="recording",
            malformed=f"no {missing}" if missing else "",
        )
        if missing:
            raise WebhookError(400, "malformed_payload", f"no {missing}")
    except WebhookError as exc:
        return exc.response()
    return HttpResponse(status=204)


def _process_recording(event: InboundEvent) -> str:
    params = form_params(event)
    call_sid = params.get("CallSid", "")
    if not call_sid:
        raise MalformedPayload("no CallSid")
    call = Call.objects.select_related("business", "lead").filter(provider_sid=call_sid).first()
    if call is None:
        # The recording can outrun its call's own events: replay once the call is in.
        raise LookupError(f"no call with CallSid {call_sid!r} yet; replay after the call is recorded")
    if event.business_id is None:
        InboundEvent.objects.filter(pk=event.pk).update(business=call.business)
    elif event.business_id != call.business_id:
        raise MalformedPayload("the call belongs to another business than the account that signed this recording")
    text = params.get("TranscriptionText", "").strip()
    if params.get("TranscriptionSid"):
        if params.get("TranscriptionStatus", "completed") != "completed" or not text:
            return InboundEvent.Status.IGNORED
        call_transcript_set(call, text, actor=ACTOR, source="twilio")
        return InboundEvent.Status.PROCESSED
    if params.get("RecordingStatus") != "completed":
        return InboundEvent.Status.IGNORED  # in-progress, absent or failed: nothing to keep
    duration = params.get("RecordingDuration", "")
    changes: dict[str, Any] = {"recording_url": params.get("RecordingUrl", "")[:1000]}
    if call.duration_seconds is None and duration.isdigit():
        changes["duration_seconds"] = int(duration)
    Call.objects.filter(pk=call.pk).update(**changes)
    transcription = "twilio" if text else transcription_schedule(call, params)
    receipt_write(
        business=call.business,
        lead=call.lead,
        subject=call.public_id,
        actor=ACTOR,
        action="call.recording_added",
        after={"recording": params.get("RecordingSid", ""), "duration": duration, "transcription": transcription},
    )
    if text:
        call_transcript_set(call, text, actor=ACTOR, source="twilio")
    return InboundEvent.Status.PROCESSED


def transcription_schedule(call: Call, params: dict[str, str]) -> str:
    """Leave the recording's transcription for after commit when the business
    transcribes with a model (`calls: {transcription: model}`) and the server
    has speech to text: a timer (`call.transcribe`, one per recording) run by
    the AI tasks (agents/reporting/call_transcription.py). Joins the caller's
    transaction. Says what was done, for the recording's receipt."""
    business = call.business
    if business.call_transcription != "model":
        return "off"
    if speech_settings_for(business) is None:
        return "off: no speech to text configured, or the business does not use models"
    if call.transcript.strip():
        return "already transcribed"
    recording = params.get("RecordingSid", "")
    timer = timer_schedule(
        business=business,
        lead=call.lead,
        kind=TRANSCRIBE_KIND,
        due_at=timezone.now(),
        payload={"call": call.pk, "recording": recording, "recording_url": params.get("RecordingUrl", "")},
        dedupe_key=f"{TRANSCRIBE_KIND}:{recording}",
    )
    if timer.status == Timer.Status.PENDING:
        # A lost enqueue leaves the timer due: the AI job's sweep runs it.
        task_enqueue("agents.tasks.call_transcribe", timer.pk, group="ai", save=False, timeout=AI_TASK_TIMEOUT)
    return f"model ({timer.public_id})"


def register() -> None:
    handler_register(Provider.TWILIO, "recording", _process_recording)


urlpatterns = [
    path("hooks/twilio/voice/recording/", recording_status, name="hook-twilio-voice-recording"),
]
