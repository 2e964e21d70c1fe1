"""The AI SMS Assistant: drafts the first acknowledgement and replies from the
approved playbook (a draft outside it waits for a person).

Two steps with a clean boundary between them:

1. A drafter proposes (`Drafter.draft_acknowledgement` / `draft_reply` →
   `Proposal`): a body and the approved template it says the body is, or no
   body at all. `RulesDrafter`, the default, picks an approved template by the
   intent of the inbound text; it needs no network. A language-model drafter
   can take its place by implementing the same two methods.
2. The assistant checks (`draft_acknowledgement`, `draft_reply` → `Draft`),
   whatever drafted: it renders the named template itself to decide whether
   the body is that approved text unmodified, and runs the claims guard on
   every body. No drafter can mark its own text as approved.

A Draft needs a person when no approved template fits, or when the body is
not an unmodified approved template and the claims guard finds anything. An
unmodified approved template goes out as it is (a person approved that text);
its findings are still recorded. Nothing here writes to the database or sends:
the caller routes a draft to the send gate or to a person.

A language model's draft (`Proposal.author`, agents/ai/drafter.py) always
needs a person. The assistant looks up the playbook facts the draft cites
itself and runs the claims guard against them (`model_text_verdict`): every
price, discount, warranty, time or promise must be stated by a cited fact,
and a diagnosis never is. The reason says which claims are not backed. Only
a draft with none is `auto_ok`: where the business turned on auto-reply for
its intent (`ai: {auto_reply: [...]}`), it may go through the send gate
without a person.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from agents.playbook.claims_guard import Finding, claim_kinds, claims_scan, claims_unbacked
from agents.playbook.facts import playbook_facts
from agents.playbook.templates import (
    LEAD_TYPED_PLACEHOLDERS,
    TemplateRenderError,
    placeholders_of,
    playbook_context,
    template_render,
    template_version_in_force,
)
from crm.models import Lead, MessageTemplate
from crm.selectors import message_templates

CHANNEL = "sms"

ACKNOWLEDGEMENT = "acknowledgement"
EMERGENCY = "emergency"
WARRANTY = "warranty"
PRICE = "price"
SCHEDULE = "schedule"
GENERIC = "generic"
EDITED = "edited"
PICKED = "picked"  # a template a person chose from the playbook

# Template keys an intent may use, in order of preference. An intent missing
# here (emergency, warranty) always goes to a person.
ACKNOWLEDGEMENT_TEMPLATES = ("ack_sms",)
GENERIC_TEMPLATES = ("reply_generic_sms", "reply_generic", "ack_sms", "ack")
REPLY_TEMPLATES: dict[str, tuple[str, ...]] = {
    # A price question is answered by the business's own approved price reply, or by a person.
    PRICE: ("price_question_sms", "price_question"),
    SCHEDULE: ("scheduling_sms", "schedule_sms", "scheduling", "schedule", *GENERIC_TEMPLATES),
    GENERIC: GENERIC_TEMPLATES,
}


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.VERBOSE)


# Checked in this order: the first that matches is the intent.
_INTENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        EMERGENCY,
        _rx(
            r"""\b(?:smell(?:s|ing)?\s+(?:of\s+|like\s+)?gas|gas\s+smell|gas\s+leak|carbon\s+monoxide|co\s+(?:alarm|detector)
                   |fire(?!\s+up)|smoke|sparks?|sparking|flood(?:ing|ed)?|burst|emergency|huele\s+a\s+gas|fuga\s+de\s+gas|incendio)\b"""
        ),
    ),
    (WARRANTY, _rx(r"\b(?:warrant\w*|guarantee\w*|garant\w*)\b")),
    (
        PRICE,
        _rx(
            r"""\$|\b(?:how\s+much|price[sd]?|pricing|cost(?:s|ing)?|charges?|fees?|rates?|quotes?|expensive
                   |cheap|afford\w*|budget|cu[áa]nto|precios?|cuesta|costo)\b"""
        ),
    ),
    (
        SCHEDULE,
        _rx(
            r"""\b(?:schedul\w*|reschedul\w*|book(?:ing)?|appointments?|appt|available|availability|come\s+(?:out|by|over)
                   |visit|when|what\s+time|today|tomorrow|tonight|this\s+week|next\s+week|monday|tuesday|wednesday
                   |thursday|friday|saturday|sunday|morning|afternoon|evening|asap|cita|cu[áa]ndo|horario|hoy|ma[ñn]ana)\b"""
        ),
    ),
)


def reply_intent(inbound_text: str) -> str:
    """What the inbound text asks about: emergency, warranty, price, schedule or generic."""
    for intent, pattern in _INTENTS:
        if pattern.search(inbound_text):
            return intent
    return GENERIC


@dataclass(frozen=True)
class Proposal:
    """What a drafter proposes: a body and the approved template it says the
    body is (None for free text), or an empty body when nothing fits."""

    body: str
    template_key: str | None
    intent: str
    reason: str
    # A language model's draft: who wrote it ("openai/gpt-4o-mini"), the
    # ids of the playbook facts it says it relies on, its confidence in the
    # intent, and why its text cannot be used as it is (a stray placeholder).
    author: str = ""
    facts: tuple[str, ...] = ()
    confidence: float | None = None
    problem: str = ""


@dataclass(frozen=True)
class Draft:
    """A checked draft, ready for the send gate or for a person.

    `template_version` is the approved version in force when the body is that
    template unmodified (None for the text loaded from the business file, and
    for anything else). `findings` are the claims guard's, always recorded.
    """

    body: str
    template_key: str | None
    template_version: int | None
    unmodified_approved: bool
    findings: list[Finding]
    needs_person: bool
    reason: str
    intent: str = ""
    # A model's draft: its author, the cited facts that exist, and whether the
    # guard passed it (no claim beyond the cited facts): see the module.
    author: str = ""
    facts: tuple[str, ...] = ()
    auto_ok: bool = False
    confidence: float | None = None


class Drafter(Protocol):
    """The drafting step. Implementations propose; they never decide whether
    a person is needed (the assistant does, from what was proposed)."""

    def draft_acknowledgement(self, lead: Lead) -> Proposal: ...

    def draft_reply(self, lead: Lead, inbound_text: str) -> Proposal: ...


class RulesDrafter:
    """The default drafter: the first approved SMS template that fits the
    intent, rendered for the lead; no network."""

    def draft_acknowledgement(self, lead: Lead) -> Proposal:
        return self._from_templates(lead, ACKNOWLEDGEMENT, ACKNOWLEDGEMENT_TEMPLATES)

    def draft_reply(self, lead: Lead, inbound_text: str) -> Proposal:
        intent = reply_intent(inbound_text)
        keys = REPLY_TEMPLATES.get(intent, ())
        if not keys:
            return Proposal("", None, intent, f"the message reads as {intent}: a person answers it")
        return self._from_templates(lead, intent, keys)

    def _from_templates(self, lead: Lead, intent: str, keys: tuple[str, ...]) -> Proposal:
        templates = message_templates(lead.business_id)
        usable = [templates[k] for k in keys if k in templates and _usable(templates[k])]
        if not usable:
            unapproved = [k for k in keys if k in templates and not templates[k].approved]
            why = f" ({', '.join(unapproved)} not approved)" if unapproved else ""
            return Proposal("", None, intent, f"no approved {CHANNEL} template for {intent}{why}: a person answers")
        template = usable[0]
        try:
            body = template_render(template, playbook_context(lead))
        except TemplateRenderError as exc:
            return Proposal("", template.key, intent, f"{exc}: a person answers")
        return Proposal(body, template.key, intent, f"approved template {template.key}")


DEFAULT_DRAFTER: Drafter = RulesDrafter()


def draft_acknowledgement(lead: Lead, *, drafter: Drafter | None = None) -> Draft:
    """The first acknowledgement for a new lead, checked (see the module)."""
    return _checked(lead, (drafter or DEFAULT_DRAFTER).draft_acknowledgement(lead))


def draft_reply(lead: Lead, inbound_text: str, *, drafter: Drafter | None = None) -> Draft:
    """A reply to the lead's inbound text, checked (see the module)."""
    return _checked(lead, (drafter or DEFAULT_DRAFTER).draft_reply(lead, inbound_text))


def draft_proposal(lead: Lead, proposal: Proposal) -> Draft:
    """A proposal some drafter already made, checked (see the module): the
    path of a model's draft, whose call happened outside the transaction."""
    return _checked(lead, proposal)


def draft_template(lead: Lead, key: str) -> Draft:
    """A template a person picked from the playbook, rendered for the lead
    and checked like any drafter's proposal (see the module): approved and
    unmodified, it goes out as it is."""
    template = message_templates(lead.business_id).get(key)
    if template is None:
        return _checked(lead, Proposal("", key, PICKED, f"no template {key!r}: a person answers"))
    try:
        body = template_render(template, playbook_context(lead))
    except TemplateRenderError as exc:
        return _checked(lead, Proposal("", key, PICKED, f"{exc}: a person answers"))
    return _checked(lead, Proposal(body, key, PICKED, f"template {key}"))


def draft_check(body: str, *, template_key: str | None = None) -> Draft:
    """Check a body a person edited (the setter copilot's send path).

    Edited text is never an unmodified approved template, even when it still
    reads the same: any claim in it goes to a person. Text without claims may
    go on, since a person wrote it.
    """
    findings = claims_scan(body)
    if not body.strip():
        return Draft(body, template_key, None, False, findings, True, "the text is empty", EDITED)
    if findings:
        reason = f"edited text makes claims ({', '.join(claim_kinds(findings))}): a person must approve it"
        return Draft(body, template_key, None, False, findings, True, reason, EDITED)
    return Draft(body, template_key, None, False, findings, False, "edited text, no claims found", EDITED)


def _usable(template: MessageTemplate) -> bool:
    return template.approved and template.channel == CHANNEL


# What a model's draft that the guard passed still waits for, unless auto-reply sends it.
PERSON_APPROVES = ": a person approves it before it goes"


@dataclass(frozen=True)
class ModelVerdict:
    """The claims guard on a model's text, against the facts it cites."""

    findings: list[Finding]
    unbacked: list[Finding]
    cited: tuple[str, ...]  # the cited ids that name a playbook fact
    unknown: tuple[str, ...]  # cited ids that name none
    auto_ok: bool
    reason: str


def model_text_verdict(
    body: str, cited: tuple[str, ...], facts: dict[str, str], *, author: str, problem: str = ""
) -> ModelVerdict:
    """Check a model's `body` against the playbook `facts` (id → text) it
    cites. Pure: the evaluation runs it on every draft of the corpus."""
    findings = claims_scan(body)
    known = tuple(fact_id for fact_id in cited if fact_id in facts)
    unknown = tuple(fact_id for fact_id in cited if fact_id not in facts)
    unbacked = claims_unbacked(body, [facts[fact_id] for fact_id in known])
    relies = f"relying on {', '.join(known)}" if known else "citing no playbook fact"
    if not body.strip():
        return ModelVerdict(findings, unbacked, known, unknown, False, f"{author} drafted no reply: a person answers")
    if unbacked:
        claims = ", ".join(f"{f.kind.replace('_', ' ')} “{f.excerpt}”" for f in unbacked)
        reason = f"drafted by {author}, {relies}; not in the playbook: {claims}: a person must approve it"
        return ModelVerdict(findings, unbacked, known, unknown, False, reason)
    if problem:
        return ModelVerdict(findings, unbacked, known, unknown, False, f"drafted by {author}: {problem}")
    if unknown:
        reason = f"drafted by {author}, citing facts the playbook lacks ({', '.join(unknown)}): a person checks it"
        return ModelVerdict(findings, unbacked, known, unknown, False, reason)
    return ModelVerdict(
        findings, unbacked, known, unknown, True, f"drafted by {author}, {relies}; no claim beyond the playbook"
    )


def _checked_model(lead: Lead, proposal: Proposal) -> Draft:
    """A model's proposal: never sent as it is by the assistant's say; the
    facts it cites are the business's as the records hold them."""
    facts = {fact.id: fact.text for fact in playbook_facts(lead.business)}
    verdict = model_text_verdict(proposal.body, proposal.facts, facts, author=proposal.author, problem=proposal.problem)
    return Draft(
        proposal.body,
        None,
        None,
        False,
        verdict.findings,
        True,
        verdict.reason + (PERSON_APPROVES if verdict.auto_ok else ""),
        proposal.intent,
        author=proposal.author,
        facts=verdict.cited,
        auto_ok=verdict.auto_ok,
        confidence=proposal.confidence,
    )


def _checked(lead: Lead, proposal: Proposal) -> Draft:
    """Decide what a proposal is, without trusting the drafter's word for it."""
    if proposal.author:
        return _checked_model(lead, proposal)
    body, key, intent = proposal.body, proposal.template_key, proposal.intent
    findings = claims_scan(body)
    if not body.strip():
        return Draft("", key, None, False, findings, True, proposal.reason, intent)

    template = None
    if key is not None:
        template = message_templates(lead.business_id).get(key)
    if template is None or not _usable(template):
        why = f"template {key!r} is not an approved {CHANNEL} template" if key else "free text"
        reason = f"{why}: no approved template fits, a person must approve it"
        return Draft(body, key, None, False, findings, True, reason, intent)

    context = playbook_context(lead)
    try:
        unmodified = template_render(template, context) == body
    except TemplateRenderError:
        unmodified = False
    if not unmodified:
        if findings:
            reason = (
                f"text differs from {key} and makes claims ({', '.join(claim_kinds(findings))}): a person must "
                "approve it"
            )
            return Draft(body, key, None, False, findings, True, reason, intent)
        return Draft(body, key, None, False, findings, False, f"text differs from {key}; no claims found", intent)

    in_force = template_version_in_force(template)
    version = in_force.version if in_force else None
    problem = _typed_value_problem(template, context)
    if problem:
        return Draft(body, key, version, True, findings, True, f"{problem}: a person must check it", intent)
    reason = f"approved template {key}, unmodified"
    if findings:
        reason += f" (claims in approved text: {', '.join(claim_kinds(findings))})"
    return Draft(body, key, version, True, findings, False, reason, intent)


def _typed_value_problem(template: MessageTemplate, context: dict[str, str]) -> str | None:
    """Why the lead's own words, filled into approved text, should not go out
    unread: a person approved the template, not what a form-filler typed."""
    for name in placeholders_of(template.body):
        if name not in LEAD_TYPED_PLACEHOLDERS:
            continue
        value = context.get(name, "")
        if len(value) > 40 or re.search(r"\d|https?:|www\.|@|\.(?:com|net|org)\b", value, re.IGNORECASE):
            return f"{{{name}}} does not read as a name ({value[:40]!r})"
        found = claims_scan(value)
        if found:
            return f"{{{name}}} makes claims ({', '.join(claim_kinds(found))})"
    return None
