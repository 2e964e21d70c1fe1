"""The TwiML Twilio fetches during a follow-up call (agents.followup.voice).

`POST /hooks/twilio/follow-up/<message>/` when the call is answered (with
`AnsweredBy` from answering-machine detection), `.../gather/` with the key
pressed, `.../dial/` with the owner's `DialCallStatus`. Each request:
X-Twilio-Signature checked with the real RequestValidator against
PUBLIC_BASE_URL + path, under the auth token of the account the call was
placed through (the message's business's, agents.outbound.twilio_accounts;
403 JSON otherwise, counted), then 404 JSON for a message that is not a
follow-up call (checked under the shared token, so an unsigned request
learns nothing about which ids exist), the raw request stored as an
InboundEvent, processed at once (a key press 9 revokes consent before the
caller hears the confirmation), and the TwiML built from what was recorded.
A signed request without its CallSid is stored failed and answered 400.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from twilio.twiml.voice_response import VoiceResponse

from agents.capture.processing import event_process
from agents.capture.providers.twilio import signature_problem, signing_account, twiml
from agents.capture.webhooks import WebhookError, accept, body_digest, raw_body, reject
from agents.followup import voice
from crm.models import Call, InboundEvent, Message, Provider

Build = Callable[[Message, Call | None], VoiceResponse]


def _twiml_view(kind: str, build: Build) -> Callable[[HttpRequest, str], HttpResponse]:
    @csrf_exempt
    @require_POST
    def view(request: HttpRequest, message_id: str) -> HttpResponse:
        try:
            body = raw_body(request)
            params = request.POST
            message = voice.followup_message(message_id)
            problem = signature_problem(request, params, signing_account(params, stored=message))
            if problem:
                raise reject(request, provider=Provider.TWILIO, source=None, reason=problem, status=403)
            if message is None:
                raise WebhookError(404, "unknown_call", f"no follow-up call {message_id!r}")
            call_sid = params.get("CallSid", "")
            # One event per call, stage and key pressed: Twilio's retries are duplicates.
            external_id = f"{call_sid}:{kind}:{params.get('Digits', '')}:{params.get('DialCallStatus', '')}"
            accepted = accept(
                request,
                provider=Provider.TWILIO,
                external_id=external_id if call_sid else f"{kind}:{body_digest(body)}",
                body=body,
                business=message.business,
                kind=kind,
                malformed="" if call_sid else "no CallSid",
                extra_headers={voice.MESSAGE_HEADER: message.public_id},
            )
            if not call_sid:
                raise WebhookError(400, "malformed_payload", "no CallSid")
        except WebhookError as exc:
            return exc.response()
        if accepted.event.status == InboundEvent.Status.RECEIVED:
            # Processed now, not by a worker: the caller hears what was recorded.
            # The queued task then finds the event claimed and does nothing.
            event_process(accepted.event.pk)
        return twiml(build(message, Call.objects.filter(provider_sid=call_sid).first()))

    return view


answer = _twiml_view(voice.KIND_ANSWER, voice.answer_twiml)
gather = _twiml_view(voice.KIND_GATHER, voice.gather_twiml)
dial = _twiml_view(voice.KIND_DIAL, voice.dial_twiml)

urlpatterns = [
    path("hooks/twilio/follow-up/<str:message_id>/", answer, name="followup-voice-answer"),
    path("hooks/twilio/follow-up/<str:message_id>/gather/", gather, name="followup-voice-gather"),
    path("hooks/twilio/follow-up/<str:message_id>/dial/", dial, name="followup-voice-dial"),
]
