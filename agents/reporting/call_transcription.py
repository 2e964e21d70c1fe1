"""A recorded call's transcript from the server's speech to text.

Twilio's recording callback leaves a `call.transcribe` timer (one per
recording; agents/reporting/call_scoring.py, `transcription_schedule`) that
the AI tasks run after commit (`agents.tasks.call_transcribe`; the
`leadops.ai` job sweeps any whose enqueue was lost). `call_transcribe`:

1. downloads the recording from Twilio (its URL + `.mp3`, with the call's
   business's account credentials, which go to Twilio's API host only);
2. sends it to the speech to text (agents/ai/speech.py), one counted and
   receipted model call (agents/ai/calls.py, purpose `transcription`) —
   both outside any transaction;
3. stores the text and scores the call (`call_transcript_set`).

A failure (the recording unavailable, the provider's timeout or error, the
month's cap reached) leaves the call without a transcript and says so twice:
a `call.transcription_failed` receipt on the call, and the timer `failed`
with the reason, which the Timer admin's retry puts back in line. A
redelivered or retried timer finds a transcript already there and does
nothing.
"""

from __future__ import annotations

from django.conf import settings
from requests import RequestException, Session

from agents.ai.calls import transcription_call
from agents.ai.speech import speech_settings_for
from agents.outbound.twilio_accounts import business_account
from agents.reporting.call_scoring import TRANSCRIBE_KIND, call_transcript_set
from crm.models import Call, Timer
from crm.services.receipts import receipt_write
from crm.services.timers import timer_handler_register

ACTOR = "agent:call_scoring"
TWILIO_API = "https://api.twilio.com/"
# Twilio serves a recording as .wav or .mp3; mp3 is a tenth of the size and
# every speech to text reads it (OpenAI's limit is 25 MB a file).
AUDIO_SUFFIX, AUDIO_TYPE = ".mp3", "audio/mpeg"
MAX_AUDIO_BYTES = 25 * 1024 * 1024
CONNECT_TIMEOUT = 3.05


class TranscriptionFailed(Exception):
    """The call could not be transcribed this time; the reason is on its receipt."""


def recording_download(call: Call, url: str) -> bytes:
    """The recording's audio, fetched with the call's business's Twilio
    account. Raises TranscriptionFailed for a URL outside Twilio's API (the
    credentials never go anywhere else), an error, or a file too large."""
    hosts = [TWILIO_API]
    if settings.TWILIO_API_BASE_URL:
        hosts.append(settings.TWILIO_API_BASE_URL.rstrip("/") + "/")
    if not url.startswith(tuple(hosts)):
        raise TranscriptionFailed(f"the recording URL {url[:120]!r} is not on Twilio's API")
    number = call.to if call.direction == "in" else call.from_number
    account = business_account(call.business_id, number=number)
    timeout = (CONNECT_TIMEOUT, float(settings.RECORDING_DOWNLOAD_TIMEOUT_SECONDS))
    try:
        # Twilio answers with a redirect to its media store; requests drops
        # the credentials when the redirect leaves the host, as it should.
        with (
            Session() as session,
            session.get(
                url + AUDIO_SUFFIX, auth=(account.sid, account.auth_token), timeout=timeout, stream=True
            ) as response,
        ):
            if response.status_code != 200:
                raise TranscriptionFailed(f"Twilio answered HTTP {response.status_code} for the recording")
            audio = bytearray()
            for chunk in response.iter_content(64 * 1024):
                audio += chunk
                if len(audio) > MAX_AUDIO_BYTES:
                    raise TranscriptionFailed(f"the recording is over {MAX_AUDIO_BYTES // (1024 * 1024)} MB")
    except RequestException as exc:
        raise TranscriptionFailed(f"the recording could not be downloaded ({type(exc).__name__})") from exc
    if not audio:
        raise TranscriptionFailed("the recording is empty")
    return bytes(audio)


def call_transcribe(timer: Timer) -> None:
    """The timer's work (see the module). Runs outside any transaction."""
    call = Call.objects.select_related("business", "lead").filter(pk=timer.payload.get("call")).first()
    if call is None or call.transcript.strip():
        return  # gone (a merge moved nothing here), or transcribed meanwhile
    try:
        config = speech_settings_for(call.business)
        if config is None:
            raise TranscriptionFailed("no speech to text is configured, or the business does not use models")
        audio = recording_download(call, str(timer.payload.get("recording_url", "")))
        outcome = transcription_call(
            business=call.business,
            config=config,
            audio=audio,
            filename=f"{timer.payload.get('recording') or call.public_id}{AUDIO_SUFFIX}",
            content_type=AUDIO_TYPE,
            call=call,
        )
        if not outcome.text:
            raise TranscriptionFailed(
                f"{config.label} gave no transcript ({outcome.failure}: {outcome.call.detail}); "
                f"model call {outcome.call.public_id}"
            )
    except TranscriptionFailed as exc:
        receipt_write(
            business=call.business,
            lead=call.lead,
            subject=call.public_id,
            actor=ACTOR,
            action="call.transcription_failed",
            reason=str(exc),
            after={"timer": timer.public_id, "recording": timer.payload.get("recording", "")},
        )
        raise
    call_transcript_set(call, outcome.text, actor=ACTOR, source="model")


def register() -> None:
    # Calls the network: the AI tasks and job run it, never the timer loop.
    timer_handler_register(TRANSCRIBE_KIND, call_transcribe, own_job=True)
