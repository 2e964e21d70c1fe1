"""Speech to text for recorded calls: the official `openai` SDK's audio
transcriptions (`POST {STT_BASE_URL}/audio/transcriptions`, multipart),
which OpenAI's Whisper and the Whisper-compatible servers (faster-whisper
servers, LocalAI, vLLM, whisper.cpp's server) all speak.

`speech_to_text` sends one recording and returns its text, or raises
`ModelFailure` naming what went wrong, as agents/ai/client.py does for the
chat models: `timeout`, `rate_limited`, `provider_error` (a refusal, 5xx
after the retries, no connection) or `malformed` (no text in the answer).
Nothing here touches the database: agents/ai/calls.py counts and records
each call.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from agents.ai.client import ModelFailure, ModelSettings, Usage, openai_client, openai_failure, sha256
from crm.models import Business

PROVIDER = "openai"  # the wire format: every speech-to-text server we use speaks OpenAI's


@dataclass(frozen=True)
class SpeechSettings:
    """The server's STT_* settings, read once per call."""

    model: str
    base_url: str
    api_key: str
    timeout: float
    connect_timeout: float
    max_retries: int
    price_per_minute: Decimal

    @property
    def label(self) -> str:
        return f"{PROVIDER}/{self.model}"

    def as_model_settings(self) -> ModelSettings:
        """The shape agents/ai/calls.py records a call under (no token prices:
        audio is priced by the minute, see `cost_of_audio`)."""
        return ModelSettings(
            provider=PROVIDER,
            model=self.model,
            base_url=self.base_url,
            api_key=self.api_key,
            timeout=self.timeout,
            connect_timeout=self.connect_timeout,
            max_retries=self.max_retries,
            max_output_tokens=0,
            price_input_per_mtok=Decimal(0),
            price_output_per_mtok=Decimal(0),
        )


def speech_settings() -> SpeechSettings | None:
    """The configured speech to text, or None: neither LLM_PROVIDER=openai
    nor STT_BASE_URL is set (then no audio leaves the machine)."""
    if settings.LLM_PROVIDER != "openai" and not settings.STT_BASE_URL:
        return None
    return SpeechSettings(
        model=settings.STT_MODEL,
        base_url=settings.STT_BASE_URL,
        api_key=settings.STT_API_KEY,
        timeout=float(settings.STT_TIMEOUT_SECONDS),
        connect_timeout=float(settings.LLM_CONNECT_TIMEOUT_SECONDS),
        max_retries=int(settings.STT_MAX_RETRIES),
        price_per_minute=Decimal(str(settings.STT_PRICE_PER_MINUTE)),
    )


@dataclass(frozen=True)
class Transcript:
    text: str
    usage: Usage


def cost_of_audio(seconds: int | None, config: SpeechSettings) -> Decimal:
    """USD for `seconds` of audio at the operator's price per minute."""
    return (Decimal(seconds or 0) * config.price_per_minute / Decimal(60)).quantize(Decimal("0.000001"))


def speech_to_text(audio: bytes, filename: str, content_type: str, config: SpeechSettings) -> Transcript:
    """The text of one recording (see the module). The request's digest
    commits to the audio and the model, never keeping either."""
    import openai

    client = openai_client(config.base_url, config.api_key, config.timeout, config.connect_timeout, config.max_retries)
    digest = sha256(f"{config.model}:{hashlib.sha256(audio).hexdigest()}")
    started = time.monotonic()

    def used(answer: str = "", tokens_in: int = 0, tokens_out: int = 0) -> Usage:
        return Usage(
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            prompt_digest=digest,
            answer_digest=sha256(answer) if answer else "",
            duration_ms=int((time.monotonic() - started) * 1000),
        )

    try:
        answer = client.audio.transcriptions.create(
            model=config.model, file=(filename, audio, content_type), response_format="json"
        )
    except openai.APIError as exc:
        raise openai_failure(exc, used()) from exc
    text = str(getattr(answer, "text", "") or "").strip()
    # Newer models count tokens; Whisper counts seconds (priced by the minute instead).
    usage = getattr(answer, "usage", None)
    tokens_in = int(getattr(usage, "input_tokens", 0) or 0)
    tokens_out = int(getattr(usage, "output_tokens", 0) or 0)
    if not text:
        raise ModelFailure("malformed", "the answer has no text", used("", tokens_in, tokens_out))
    return Transcript(text, used(text, tokens_in, tokens_out))


def speech_settings_for(business: Business) -> SpeechSettings | None:
    """The speech to text `business` uses, or None: none configured, or the
    business opted out of models (`ai: {enabled: false}`)."""
    config = speech_settings()
    if config is None or not business.ai_enabled:
        return None
    return config
