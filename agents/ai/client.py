"""The language model behind one call: the official `openai` or `anthropic`
SDK, chosen by LLM_PROVIDER, with explicit timeouts and bounded retries.

`model_ask` sends one request asking for structured output and returns the
parsed answer, or raises `ModelFailure` naming what went wrong:

- `timeout`: no answer within LLM_TIMEOUT_SECONDS, after the retries;
- `rate_limited`: 429 after the retries (the SDKs back off between them,
  honouring the provider's Retry-After);
- `provider_error`: any other refusal (5xx after the retries, 4xx), or no
  connection at all;
- `malformed`: an answer that is not the JSON object asked for (not JSON, no
  tool use, truncated, refused).

OpenAI and every OpenAI-compatible server (LLM_BASE_URL: Azure OpenAI,
Ollama, vLLM, llama.cpp's server) get a chat completion with a
`response_format` JSON schema; Anthropic gets a message with one tool whose
input schema is the answer's, and `tool_choice` forcing it. Nothing here
touches the database: callers record the call (agents/ai/calls.py).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any

from django.conf import settings

# A local server needs no key, but both SDKs refuse to start without one.
NO_KEY = "no-key"


@dataclass(frozen=True)
class ModelSettings:
    """The server's LLM_* settings, read once per call."""

    provider: str
    model: str
    base_url: str
    api_key: str
    timeout: float
    connect_timeout: float
    max_retries: int
    max_output_tokens: int
    price_input_per_mtok: Decimal
    price_output_per_mtok: Decimal

    @property
    def label(self) -> str:
        return f"{self.provider}/{self.model}"


def model_settings() -> ModelSettings | None:
    """The configured model, or None when LLM_PROVIDER is unset (the default:
    nothing leaves the machine)."""
    if not settings.LLM_PROVIDER:
        return None
    return ModelSettings(
        provider=settings.LLM_PROVIDER,
        model=settings.LLM_MODEL,
        base_url=settings.LLM_BASE_URL,
        api_key=settings.LLM_API_KEY,
        timeout=float(settings.LLM_TIMEOUT_SECONDS),
        connect_timeout=float(settings.LLM_CONNECT_TIMEOUT_SECONDS),
        max_retries=int(settings.LLM_MAX_RETRIES),
        max_output_tokens=int(settings.LLM_MAX_OUTPUT_TOKENS),
        price_input_per_mtok=Decimal(str(settings.LLM_PRICE_INPUT_PER_MTOK)),
        price_output_per_mtok=Decimal(str(settings.LLM_PRICE_OUTPUT_PER_MTOK)),
    )


@dataclass(frozen=True)
class ModelRequest:
    """One question for the model: its instructions, the content to read, and
    the JSON schema of the object it must answer with."""

    system: str
    user: str
    schema: dict[str, Any]
    name: str
    description: str


@dataclass(frozen=True)
class Usage:
    """What a call cost, as the provider counted it, and the digests of what
    was sent and answered (SHA-256 hex; empty when nothing came back)."""

    input_tokens: int = 0
    output_tokens: int = 0
    prompt_digest: str = ""
    answer_digest: str = ""
    duration_ms: int = 0


@dataclass(frozen=True)
class ModelAnswer:
    data: dict[str, Any]
    usage: Usage


class ModelFailure(Exception):
    """The model gave no usable answer; `kind` says why (see the module)."""

    def __init__(self, kind: str, detail: str, usage: Usage | None = None) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail
        self.usage = usage or Usage()


@dataclass
class _Sent:
    body: dict[str, Any]
    started: float = field(default_factory=time.monotonic)

    @property
    def digest(self) -> str:
        return sha256(json.dumps(self.body, sort_keys=True, ensure_ascii=False))

    def usage(self, input_tokens: int = 0, output_tokens: int = 0, answer: str = "") -> Usage:
        return Usage(
            input_tokens=max(int(input_tokens or 0), 0),
            output_tokens=max(int(output_tokens or 0), 0),
            prompt_digest=self.digest,
            answer_digest=sha256(answer) if answer else "",
            duration_ms=int((time.monotonic() - self.started) * 1000),
        )


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_ask(request: ModelRequest, config: ModelSettings) -> ModelAnswer:
    """Ask `request` of the configured model once (with the SDK's bounded
    retries); the parsed JSON object, or ModelFailure."""
    if config.provider == "anthropic":
        return _ask_anthropic(request, config)
    return _ask_openai(request, config)


def cost_of(usage: Usage, config: ModelSettings) -> Decimal:
    """The call's cost estimate in USD from the operator's prices per million tokens."""
    cost = (
        Decimal(usage.input_tokens) * config.price_input_per_mtok
        + Decimal(usage.output_tokens) * config.price_output_per_mtok
    ) / Decimal(1_000_000)
    return cost.quantize(Decimal("0.000001"))


# --- OpenAI and OpenAI-compatible servers -------------------------------------------


@lru_cache(maxsize=8)
def openai_client(base_url: str, api_key: str, timeout: float, connect: float, retries: int) -> Any:
    import httpx2
    import openai

    # One client per configuration: it keeps its connection pool between calls.
    return openai.OpenAI(
        api_key=api_key or NO_KEY,
        base_url=base_url or None,
        timeout=httpx2.Timeout(timeout, connect=connect),
        max_retries=retries,
    )


def openai_failure(exc: Exception, usage: Usage) -> ModelFailure:
    """The failure an `openai` SDK error is: a timeout, a 429 after the
    retries, or any other answer of the provider's."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return ModelFailure("timeout", said_of(exc), usage)
    if isinstance(exc, openai.RateLimitError):
        return ModelFailure("rate_limited", said_of(exc), usage)
    return ModelFailure("provider_error", said_of(exc), usage)


def _ask_openai(request: ModelRequest, config: ModelSettings) -> ModelAnswer:
    import openai

    client = openai_client(config.base_url, config.api_key, config.timeout, config.connect_timeout, config.max_retries)
    body: dict[str, Any] = {
        "model": config.model,
        "messages": [{"role": "system", "content": request.system}, {"role": "user", "content": request.user}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": request.name,
                "description": request.description,
                "strict": True,
                "schema": request.schema,
            },
        },
    }
    # OpenAI's own newer models take only max_completion_tokens; the
    # compatible servers (Ollama, vLLM, llama.cpp) know max_tokens.
    body["max_tokens" if config.base_url else "max_completion_tokens"] = config.max_output_tokens
    sent = _Sent(body)
    try:
        completion = client.chat.completions.create(**body)
    except openai.APIError as exc:
        raise openai_failure(exc, sent.usage()) from exc
    usage = getattr(completion, "usage", None)
    tokens_in = getattr(usage, "prompt_tokens", 0) or 0
    tokens_out = getattr(usage, "completion_tokens", 0) or 0
    try:
        choice = completion.choices[0]
        content = choice.message.content or ""
        refusal = getattr(choice.message, "refusal", None)
        finish = choice.finish_reason
    except (AttributeError, IndexError, TypeError) as exc:
        raise ModelFailure("malformed", "no choice in the answer", sent.usage(tokens_in, tokens_out)) from exc
    used = sent.usage(tokens_in, tokens_out, content or str(refusal or ""))
    if refusal:
        raise ModelFailure("malformed", f"the model refused: {str(refusal)[:120]}", used)
    if finish == "length":
        raise ModelFailure("malformed", "the answer was cut off at the token limit", used)
    return ModelAnswer(_json_object(content, used), used)


# --- Anthropic -----------------------------------------------------------------------


@lru_cache(maxsize=8)
def _anthropic_client(base_url: str, api_key: str, timeout: float, connect: float, retries: int) -> Any:
    import anthropic
    import httpx2

    return anthropic.Anthropic(
        api_key=api_key or NO_KEY,
        base_url=base_url or None,
        timeout=httpx2.Timeout(timeout, connect=connect),
        max_retries=retries,
    )


def _ask_anthropic(request: ModelRequest, config: ModelSettings) -> ModelAnswer:
    import anthropic

    client = _anthropic_client(
        config.base_url, config.api_key, config.timeout, config.connect_timeout, config.max_retries
    )
    body: dict[str, Any] = {
        "model": config.model,
        "max_tokens": config.max_output_tokens,
        "system": request.system,
        "messages": [{"role": "user", "content": request.user}],
        "tools": [{"name": request.name, "description": request.description, "input_schema": request.schema}],
        "tool_choice": {"type": "tool", "name": request.name},
    }
    sent = _Sent(body)
    try:
        message = client.messages.create(**body)
    except anthropic.APITimeoutError as exc:
        raise ModelFailure("timeout", said_of(exc), sent.usage()) from exc
    except anthropic.RateLimitError as exc:
        raise ModelFailure("rate_limited", said_of(exc), sent.usage()) from exc
    except anthropic.APIError as exc:
        raise ModelFailure("provider_error", said_of(exc), sent.usage()) from exc
    usage = getattr(message, "usage", None)
    tokens_in = getattr(usage, "input_tokens", 0) or 0
    tokens_out = getattr(usage, "output_tokens", 0) or 0
    blocks = list(getattr(message, "content", None) or [])
    tool = next(
        (b for b in blocks if getattr(b, "type", "") == "tool_use" and getattr(b, "name", "") == request.name), None
    )
    if tool is None:
        said = " ".join(str(getattr(b, "text", "")) for b in blocks)
        used = sent.usage(tokens_in, tokens_out, said)
        raise ModelFailure("malformed", f"no {request.name} tool use in the answer", used)
    data = getattr(tool, "input", None)
    text = json.dumps(data, sort_keys=True, ensure_ascii=False)
    used = sent.usage(tokens_in, tokens_out, text)
    if getattr(message, "stop_reason", "") == "max_tokens":
        raise ModelFailure("malformed", "the answer was cut off at the token limit", used)
    if not isinstance(data, dict):
        raise ModelFailure("malformed", "the tool's input is not an object", used)
    return ModelAnswer(data, used)


def _json_object(content: str, usage: Usage) -> dict[str, Any]:
    try:
        data = json.loads(content)
    except ValueError as exc:
        raise ModelFailure("malformed", "the answer is not JSON", usage) from exc
    if not isinstance(data, dict):
        raise ModelFailure("malformed", "the answer is not a JSON object", usage)
    return data


def said_of(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return (f"HTTP {status}: " if status else "") + text[:200]
