"""A `Drafter` backed by the configured language model (agents/playbook/assistant.py).

`ModelDrafter.draft_reply` grounds the model in the records
(agents/ai/grounding.py), makes one counted and receipted call
(agents/ai/calls.py) and proposes the model's text with the intent it read,
the facts it cites and its author. The assistant then decides what the text
is; a model never decides that itself. When the call fails (a timeout, a 429
after the retries, a malformed answer) or the month's cap is reached, the
rules drafter answers instead and the call's receipt says so.

The acknowledgement of a new lead stays the approved template: it goes out
without a person within minutes, and a model's text never may.

`drafter_for(business)` is the drafter a business gets: the rules (no
network) unless the server has a provider (LLM_PROVIDER) and the business
has not opted out (`ai: {enabled: false}`).
"""

from __future__ import annotations

from dataclasses import replace

from agents.ai.calls import CallOutcome, Understanding, model_call
from agents.ai.client import ModelSettings, model_settings
from agents.ai.grounding import Grounding, grounding_for
from agents.playbook.assistant import Drafter, Proposal, RulesDrafter
from agents.playbook.templates import TemplateRenderError, text_render
from crm.models import Business, Lead, Message

RULES = RulesDrafter()


def ai_settings_for(business: Business) -> ModelSettings | None:
    """The model `business` uses, or None: no provider configured, or the
    business opted out."""
    config = model_settings()
    if config is None or not business.ai_enabled:
        return None
    return config


def drafter_for(business: Business, *, message: Message | None = None) -> Drafter:
    config = ai_settings_for(business)
    return RULES if config is None else ModelDrafter(config, message=message)


def reply_render(reply: str, values: dict[str, str]) -> tuple[str, str]:
    """The model's text with its placeholders filled in, and "" — or the text
    as written and why it cannot be filled in (an unknown placeholder, a
    stray brace): then a person reads it as written."""
    try:
        return text_render(reply, values).strip(), ""
    except TemplateRenderError as exc:
        return reply.strip(), f"its text cannot be filled in ({exc})"


def proposal_of(understanding: Understanding, grounding: Grounding, author: str) -> Proposal:
    """The model's answer as the assistant reads a proposal."""
    body, problem = reply_render(understanding.reply, grounding.values) if understanding.reply else ("", "")
    return Proposal(
        body,
        None,
        understanding.intent,
        f"drafted by {author}",
        author=author,
        facts=understanding.facts,
        confidence=understanding.confidence,
        problem=problem,
    )


class ModelDrafter:
    """Drafts with the configured model; see the module. Call it outside a
    transaction (it waits for the network). `last` is the outcome of the last
    call, for the caller that records the intent it read."""

    def __init__(self, config: ModelSettings, *, message: Message | None = None) -> None:
        self.config = config
        self.message = message
        self.last: CallOutcome | None = None

    def draft_acknowledgement(self, lead: Lead) -> Proposal:
        return RULES.draft_acknowledgement(lead)

    def draft_reply(self, lead: Lead, inbound_text: str) -> Proposal:
        grounding = grounding_for(lead, self.message, text=inbound_text)
        self.last = outcome = model_call(
            business=lead.business, config=self.config, grounding=grounding, lead=lead, message=self.message
        )
        if outcome.understanding is None:
            fallback = RULES.draft_reply(lead, inbound_text)
            why = f"the model gave no answer ({outcome.fallback}), so the rules drafted: {fallback.reason}"
            return replace(fallback, reason=why)
        return proposal_of(outcome.understanding, grounding, self.config.label)
