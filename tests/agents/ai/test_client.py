"""The official SDKs against real local servers speaking OpenAI's and
Anthropic's wire formats: structured output asked for, answers parsed, and
every failure named (a malformed answer, a timeout, a 429, a 5xx)."""

from __future__ import annotations

import hashlib
import json

import pytest

from agents.ai.calls import understand
from agents.ai.client import ModelFailure, ModelSettings, cost_of, model_settings
from agents.ai.grounding import ANSWER_NAME, SYSTEM_PROMPT, Grounding, Turn
from agents.playbook.facts import Fact
from tests.helpers.llm import GOOD_DRAFT, PROMISING_DRAFT, ModelServer, model_server

GROUNDING = Grounding(
    business="Acme Heating & Air",
    facts=(Fact("booking_url", "Customers book a visit themselves at https://acme.example/book"),),
    lead={"stage": "new"},
    conversation=(Turn("customer", "how much to replace my AC, can you come tomorrow?"),),
    message="how much to replace my AC, can you come tomorrow?",
)


def configured() -> ModelSettings:
    config = model_settings()
    assert config is not None
    return config


def test_a_structured_answer_is_read_with_its_tokens_and_digests(model: ModelServer) -> None:
    model.default = PROMISING_DRAFT
    understanding = understand(GROUNDING, configured())

    assert (understanding.intent, understanding.confidence) == ("price_question", 0.88)
    assert understanding.reply == PROMISING_DRAFT["reply"] and understanding.facts == ("service:hvac",)
    usage = understanding.usage
    assert (usage.input_tokens, usage.output_tokens) in ((412, 57), (398, 61))
    [request] = model.posts()
    sent = request["json"]
    assert usage.prompt_digest == hashlib.sha256(json.dumps(sent, sort_keys=True).encode()).hexdigest()
    assert len(usage.answer_digest) == 64 and usage.answer_digest != usage.prompt_digest


def test_openai_is_asked_for_a_strict_json_schema(openai_model: ModelServer) -> None:
    understand(GROUNDING, configured())
    [request] = openai_model.posts()
    body = request["json"]
    assert body["response_format"]["type"] == "json_schema"
    schema = body["response_format"]["json_schema"]
    assert schema["name"] == ANSWER_NAME and schema["strict"] is True
    assert schema["schema"]["required"] == ["intent", "confidence", "reply", "facts"]
    assert schema["schema"]["additionalProperties"] is False
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"] == SYSTEM_PROMPT
    # A compatible server (LLM_BASE_URL) gets the token limit it knows.
    assert body["max_tokens"] == 400 and "max_completion_tokens" not in body
    assert request["headers"]["authorization"] == "Bearer test-key-not-secret"


def test_anthropic_is_made_to_answer_with_its_one_tool(settings: object) -> None:
    with model_server(settings, "anthropic") as server:
        understand(GROUNDING, configured())
    [request] = server.posts()
    body = request["json"]
    assert body["tool_choice"] == {"type": "tool", "name": ANSWER_NAME}
    [tool] = body["tools"]
    assert tool["name"] == ANSWER_NAME and tool["input_schema"]["required"] == [
        "intent",
        "confidence",
        "reply",
        "facts",
    ]
    assert body["system"] == SYSTEM_PROMPT and body["max_tokens"] == 400


@pytest.mark.parametrize(
    ("behaviour", "kind", "requests"),
    [
        ("malformed", "malformed", 1),
        ({"intent": "buy_now", "confidence": 1, "reply": "", "facts": []}, "malformed", 1),
        ({"intent": "question", "confidence": "high", "reply": "", "facts": []}, "malformed", 1),
        ({"intent": "question", "confidence": 0.5, "reply": 7, "facts": []}, "malformed", 1),
        # Retried once (LLM_MAX_RETRIES=1 in the tests), then given up.
        ("stall", "timeout", 2),
        (429, "rate_limited", 2),
        (500, "provider_error", 2),
        (400, "provider_error", 1),
    ],
)
def test_every_failure_is_named_after_the_bounded_retries(
    model: ModelServer, behaviour: object, kind: str, requests: int
) -> None:
    model.default = behaviour  # type: ignore[assignment]
    with pytest.raises(ModelFailure) as failed:
        understand(GROUNDING, configured())
    assert failed.value.kind == kind
    assert len(model.posts()) == requests
    assert len(failed.value.usage.prompt_digest) == 64


def test_a_good_answer_after_a_429_is_used(model: ModelServer) -> None:
    model.plan = [429]
    model.default = GOOD_DRAFT
    assert understand(GROUNDING, configured()).intent == "booking_request"
    assert len(model.posts()) == 2


def test_the_cost_estimate_uses_the_operators_prices(settings: object, openai_model: ModelServer) -> None:
    settings.LLM_PRICE_INPUT_PER_MTOK = "0.15"  # type: ignore[attr-defined]
    settings.LLM_PRICE_OUTPUT_PER_MTOK = "0.60"  # type: ignore[attr-defined]
    config = model_settings()
    assert config is not None
    usage = understand(GROUNDING, config).usage
    # 412 × 0.15 + 57 × 0.60 per million tokens
    assert str(cost_of(usage, config)) == "0.000096"


def test_nothing_is_configured_without_a_provider(settings: object) -> None:
    settings.LLM_PROVIDER = ""  # type: ignore[attr-defined]
    assert model_settings() is None
