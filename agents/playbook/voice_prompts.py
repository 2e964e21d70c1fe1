"""What our calls say, from the business's playbook: each prompt is an
approved `voice` template of the business when it has one (the business
file's `templates`, revised and approved like any other), else the wording
below, which is what LeadOps always said.

A template that cannot be used — missing, not approved, or needing a
placeholder the call has no value for — never silences a prompt: the
default wording is said instead, and the log says why. The follow-up call's
menu must still offer both of its choices: a menu text without a "1" and a
"9" is not used, because pressing 9 is how a person stops the calls.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from agents.playbook.templates import TemplateError, template_for_automation, text_render
from crm.models import Business

log = logging.getLogger(__name__)

# The template key of each prompt, and its wording when the business has none.
VOICE_PROMPTS: dict[str, str] = {
    # The AI voice follow-up (agents/followup/voice.py).
    "voice_menu": "Press 1 to talk to {owner_first_name} now. Press 9 and we will not call you again.",
    "voice_goodbye": "Thank you. Goodbye.",
    "voice_callback": "{owner_first_name} will call you back shortly. Goodbye.",
    "voice_opted_out": "You will get no more calls from {business}. Goodbye.",
    "voice_no_answer": "Sorry, nobody could pick up. We will call you back shortly. Goodbye.",
    # Said before a forwarded call is recorded where consent of all parties is
    # needed (agents/consent/recording.py).
    "recording_notice": "This call may be recorded for quality and training.",
}
# What a prompt must still say, whatever the business wrote.
REQUIRED_WORDS: dict[str, tuple[str, ...]] = {"voice_menu": ("1", "9")}


def voice_prompt(business: Business, key: str, context: Mapping[str, str]) -> str:
    """The words of prompt `key` for `business`, its placeholders filled from
    `context`: the business's approved voice template, else the default."""
    default = VOICE_PROMPTS[key]
    try:
        template = template_for_automation(business, key, channel="voice")
        text = text_render(template.body, context)
    except TemplateError as exc:
        if "has no template" not in str(exc):  # none at all is the usual case, not worth a line
            log.warning("voice prompt %s of %s: %s; the default wording is said", key, business.slug, exc)
        return text_render(default, context)
    missing = [word for word in REQUIRED_WORDS.get(key, ()) if word not in text]
    if missing:
        log.warning("voice prompt %s of %s does not say %s; the default wording is said", key, business.slug, missing)
        return text_render(default, context)
    return text
