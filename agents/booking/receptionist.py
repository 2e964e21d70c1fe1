"""The after-hours receptionist: outside the business's hours, an inbound
text or DM is answered within the approved playbook, or handed to a person.

Opt-in per business (`ai: {receptionist: true}`); within business hours, for
a business without hours, or for an email, nothing changes. It works with the
rules alone; when the business uses a model, the model reads the message
instead (the one counted call agents/ai/inbound.py would make) and may pick
which approved fact answers it, but its own words only ever wait for a
person's approval.

Capture's hand-off leaves a timer (`ai.reception`, one per message) in place
of the model's usual reading (`agents/ai/inbound.py`: `inbound_schedule`,
`reception_wanted`), run after commit (`reception_run`, here: answering may
book a visit, so the receptionist sits with booking):

1. The model reads the message, when the business uses one (outside any
   transaction).
2. Under the lead's row lock: the intent kept (`intent_apply`: a revocation or
   a complaint the rules found stands, and its safe path has run already), then
   what to do (`reception_decide`), in this order:
   - nothing while a handover of ours is open: the conversation is the owner's;
   - hand over — one take-over task for the lead's owner with the reason, and a
     `reception.handed_over` receipt — when anything is flagged (a revocation,
     a complaint, a wrong number, a lead only a manager may book, a model that
     gave no answer, a model draft the claims guard holds), when the person
     asks for a person, repeats themselves (the third message in a row with
     the same intent or words and no person's answer between), wants to move
     a visit, or asks what the playbook has no approved answer to;
   - else answer with approved content only, through the send gate as an
     automated message (consent, quiet hours, the one path, the daily cap):
     the playbook facts that answer a question, the slots the availability
     rules offer (template `slots_offer_sms`), the booking link
     (`booking_link_sms`) or the acknowledgement (`after_hours_sms`);
   - book the slot the person picks by its number from the ones offered,
     through the booking flow (`appointment_book`: its confirmation, reminders
     and next action), outside the lead's lock (the booking's lock order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from zoneinfo import ZoneInfo

from django.db import transaction
from django.utils import timezone

from agents.ai.calls import CallOutcome
from agents.ai.drafter import ModelDrafter, ai_settings_for
from agents.ai.inbound import (
    RECEPTION_TIMER,
    REPLY_CHANNEL,
    draft_route,
    draft_wanted,
    intent_apply,
)
from agents.ai.intents import (
    BOOKING_REQUEST,
    COMPLAINT,
    MODEL,
    NOT_DRAFTED,
    OTHER,
    PRICE_QUESTION,
    QUESTION,
    RESCHEDULE,
    REVOCATION,
    SPAM,
    WRONG_NUMBER,
)
from agents.booking.services import appointment_book, owner_or_manager
from agents.booking.slots import BookingError, slot_key_parse, slots_offer, when_label
from agents.fit.exceptions import booking_refusal
from agents.outbound.gate import POINT_KIND, message_send
from agents.playbook.assistant import Draft, Proposal, draft_proposal
from agents.playbook.facts import Fact, placeholder_values, playbook_facts
from agents.playbook.templates import TemplateError, playbook_context, template_for_automation, template_render
from crm.models import Availability, Lead, Message, Receipt, Task, Timer
from crm.services.lead_sync import lead_for_update
from crm.services.receipts import receipt_write
from crm.services.records import task_ensure
from crm.services.timers import timer_handler_register

ACTOR = "agent:receptionist"
HANDOVER_TITLE = "After hours:"
# The approved templates the receptionist may send, by what they are for.
ACK_TEMPLATE = "after_hours_sms"
SLOTS_TEMPLATE = "slots_offer_sms"
BOOKING_TEMPLATE = "booking_link_sms"
SLOTS_OFFERED = 3
# The third message in a row saying the same thing, with nobody's answer between, goes to a person.
REPEATS = 3
# One acknowledgement of small talk a night, not one per "ok".
ACK_QUIET = timedelta(hours=12)
# Facts that may answer a question as they are; the business's name, a
# service's keywords and the booking link answer none by themselves.
ANSWER_FACTS = re.compile(r"^(?:price:\d+|fact:\d+|hours|area:.+|phone|offer:.+)$")

# Handover reasons: what the task and the receipt say, and whether the person
# is told (by the approved acknowledgement) that someone will get back to them.
HUMAN = "asked_for_person"
NO_ANSWER = "no_answer"
REPEATED = "repeated"
MOVE = "reschedule"
GUARD = "claims_guard"
MODEL_FAILED = "model_failed"
NOT_BOOKABLE = "not_bookable"
BOOKING_FAILED = "booking_failed"
REASONS = {
    HUMAN: "asked to talk to a person",
    NO_ANSWER: "asked something the playbook has no approved answer to",
    REPEATED: f"said the same thing {REPEATS} times without a person's answer",
    MOVE: "wants to change a booked visit",
    GUARD: "the claims guard held the model's draft",
    MODEL_FAILED: "the model gave no answer",
    NOT_BOOKABLE: "wants a visit, but a manager decides before any booking",
    BOOKING_FAILED: "picked a slot that could not be booked",
    REVOCATION: "asked not to be contacted (automation is paused)",
    COMPLAINT: "complained",
    WRONG_NUMBER: "says it is a wrong number",
}
ACKNOWLEDGED = frozenset({HUMAN, NO_ANSWER, MOVE, GUARD, MODEL_FAILED, NOT_BOOKABLE, BOOKING_FAILED})


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.VERBOSE)


_HUMAN = _rx(
    r"""\b(?:(?:talk|speak|chat)\s+(?:to|with)\s+(?:a\s+|an\s+|the\s+|some\s*)?(?:real\s+|live\s+|actual\s+)?
           (?:person|human|one|body|someone|somebody|agent|representative|rep|owner|people)
           |(?:real|live|actual)\s+(?:person|human)|call\s+me|give\s+me\s+a\s+call|(?:can|could)\s+(?:someone|somebody)\s+call
           |hablar\s+con\s+(?:alguien|una\s+persona|un\s+humano|el\s+due[ñn]o|un\s+agente|una\s+persona\s+real)
           |ll[áa]m(?:e|enme|ame)(?:n)?\b|persona\s+real)"""
)
_PICK = _rx(
    r"^\s*(?:option\s*|opci[óo]n\s*|\#|n[uú]mero\s*)?([1-9])\s*[.!)]?\s*(?:please|pls|por\s+favor|thanks)?\s*[.!]?\s*$"
)
_WORD = re.compile(r"[^\W\d_]{4,}")
# Words that say nothing of what a question is about.
_PLAIN = _rx(
    r"""^(?:about|also|anything|does|from|have|hello|much|need|that|there|thanks|this|what|when|where|which|will|with
          |would|could|should|your|yours|cu[áa]nto|tienen|hacen|ustedes|pueden|para|c[óo]mo)$"""
)


@dataclass(frozen=True)
class Decision:
    """What the receptionist does with one message: `answer` (approved
    `body`), `book` (`slot` of the offered ones), `hand_over` (`reason`), or
    `none` (the usual path, as within hours)."""

    kind: str
    reason: str = ""
    detail: str = ""
    body: str = ""
    template_key: str = ""
    what: str = ""
    facts: tuple[str, ...] = ()
    slots: tuple[str, ...] = field(default=())
    slot: str = ""


NONE = Decision("none")


def reception_run(timer: Timer) -> None:
    """The timer's work (see the module). A redelivered timer finds the
    message answered or handed over already and does nothing more."""
    message = (
        Message.objects.select_related("lead__business", "lead__contact")
        .filter(pk=timer.payload.get("message"), direction="in")
        .first()
    )
    if message is None or message.lead is None or _handled(message):
        return
    lead = message.lead
    config = ai_settings_for(lead.business)
    proposal: Proposal | None = None
    outcome: CallOutcome | None = None
    if config is not None and message.intent_source != MODEL:
        drafter = ModelDrafter(config, message=message)
        proposal = drafter.draft_reply(lead, message.body)  # the network, outside any transaction
        outcome = drafter.last
    decision = _decide_and_act(message, proposal, outcome)
    if decision.kind == "book":
        _book(message, decision.slot)


def _handled(message: Message) -> bool:
    return Receipt.objects.filter(subject=message.public_id, action__startswith="reception.").exists()


@transaction.atomic
def _decide_and_act(message: Message, proposal: Proposal | None, outcome: CallOutcome | None) -> Decision:
    lead = lead_for_update(message.lead_id or 0)
    kept = intent_apply(message, lead, outcome)
    understood = outcome is not None and outcome.understanding is not None
    draft = draft_proposal(lead, proposal) if understood and proposal is not None else None
    failed = outcome.fallback if outcome is not None and outcome.fallback not in ("", "over_cap") else ""
    decision = reception_decide(message, lead, kept.intent, draft=draft, failed=failed)
    if decision.kind == "hand_over":
        hand_over(message, lead, decision.reason, detail=decision.detail)
    elif decision.kind == "answer":
        _answer(message, lead, decision)
    wanted = draft is not None and decision.kind in ("hand_over", "none") and kept.intent not in NOT_DRAFTED
    if draft is not None and wanted and draft_wanted(message, lead):
        # A handover's draft is the owner's suggestion: it waits for a person
        # whatever auto-reply says; otherwise the usual path, as within hours.
        draft_route(message, lead, draft, kept.intent, auto_reply=decision.kind == "none")
    return decision


def reception_decide(message: Message, lead: Lead, intent: str, *, draft: Draft | None, failed: str = "") -> Decision:
    """What to do with `message` (see the module). Reads, writes nothing."""
    if _handover_open(lead):
        return NONE
    if intent in (REVOCATION, COMPLAINT, WRONG_NUMBER):
        return Decision("hand_over", intent)
    if intent == SPAM or not lead.is_open:
        return NONE
    if lead.hold or lead.contact.automation_paused:
        return NONE  # a person holds the lead already; nothing automated goes out
    if _HUMAN.search(message.body):
        return Decision("hand_over", HUMAN)
    if failed:
        return Decision("hand_over", MODEL_FAILED, detail=failed)
    if draft is not None and draft.body.strip() and not draft.auto_ok:
        return Decision("hand_over", GUARD, detail=draft.reason)
    if _repeated(message, lead, intent):
        return Decision("hand_over", REPEATED)
    picked = _picked(message, lead)
    if picked:
        return Decision("book", slot=picked)
    if intent == RESCHEDULE:
        return Decision("hand_over", MOVE)
    if intent == BOOKING_REQUEST:
        return _visit_offer(lead)
    if intent in (QUESTION, PRICE_QUESTION):
        return _question_answer(message, lead, draft)
    return _acknowledgement(lead)


def _handover_open(lead: Lead) -> bool:
    return lead.tasks.filter(
        kind=Task.Kind.TAKE_OVER, status=Task.Status.OPEN, title__startswith=HANDOVER_TITLE
    ).exists()


def _person_answered_since(lead: Lead) -> Message | None:
    return (
        Message.objects.filter(lead=lead, direction="out", automated=False)
        .exclude(actor__startswith="agent:")
        .order_by("-created_at", "-pk")
        .first()
    )


def _normalized(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _repeated(message: Message, lead: Lead, intent: str) -> bool:
    """The person said the same thing REPEATS times in a row (the same intent,
    other than small talk, or the same words) and no person answered between."""
    ins = Message.objects.filter(lead=lead, direction="in", created_at__lte=message.created_at)
    answered = _person_answered_since(lead)
    if answered is not None:
        ins = ins.filter(created_at__gt=answered.created_at)
    recent = list(ins.order_by("-created_at", "-pk")[:REPEATS])
    if len(recent) < REPEATS:
        return False
    intents = {intent if m.pk == message.pk else m.intent for m in recent}
    same_intent = len(intents) == 1 and intent != OTHER
    return same_intent or len({_normalized(m.body) for m in recent}) == 1


def _picked(message: Message, lead: Lead) -> str:
    """The key of the offered slot the message picks by its number, or ""."""
    match = _PICK.match(message.body)
    if match is None:
        return ""
    offer = (
        Receipt.objects.filter(lead=lead, action="reception.slots_offered", at__lte=message.created_at)
        .order_by("-at", "-pk")
        .first()
    )
    slots = list((offer.after or {}).get("slots") or []) if offer is not None else []
    n = int(match.group(1))
    return str(slots[n - 1]) if 0 < n <= len(slots) else ""


def _rendered(lead: Lead, key: str, extra: dict[str, str] | None = None) -> tuple[str, str]:
    """An approved SMS template for automation, rendered for the lead: (body,
    key), or ("", "") when the business has none or it cannot be filled in."""
    try:
        template = template_for_automation(lead.business, key, channel="sms")
        values = placeholder_values(lead.business, playbook_context(lead)) | (extra or {})
        return template_render(template, values), key
    except TemplateError:
        return "", ""


def _visit_offer(lead: Lead) -> Decision:
    refusal = booking_refusal(lead)
    if refusal:
        return Decision("hand_over", NOT_BOOKABLE, detail=refusal)
    zone = ZoneInfo(lead.business.timezone)
    slots = slots_offer(lead)[:SLOTS_OFFERED]
    if slots:
        options = ", ".join(f"{n}) {s.local_label(zone)}" for n, s in enumerate(slots, start=1))
        body, key = _rendered(lead, SLOTS_TEMPLATE, {"slot_options": options})
        if body:
            return Decision("answer", body=body, template_key=key, what="slots", slots=tuple(s.key for s in slots))
    body, key = _rendered(lead, BOOKING_TEMPLATE)
    if body:
        return Decision("answer", body=body, template_key=key, what="booking link")
    return Decision("hand_over", NO_ANSWER, detail="no approved way to offer a visit")


def _stems(text: str) -> set[str]:
    return {w.lower()[:5] for w in _WORD.findall(text) if not _PLAIN.match(w)}


def _question_answer(message: Message, lead: Lead, draft: Draft | None) -> Decision:
    """The approved facts that answer the question, as they are: the ones the
    model's draft cites (the assistant checked that they exist), else those
    sharing the most words with the question. None: a person answers."""
    facts = [f for f in playbook_facts(lead.business) if ANSWER_FACTS.match(f.id)]
    chosen: list[Fact]
    if draft is not None:
        cited = set(draft.facts)
        chosen = [f for f in facts if f.id in cited]
    else:
        asked = _stems(message.body)
        shared = {f.id: len(asked & _stems(f.text)) for f in facts}
        best = max(shared.values(), default=0)
        chosen = [f for f in facts if best and shared[f.id] == best]
    chosen = chosen[:2]
    if not chosen:
        return Decision("hand_over", NO_ANSWER)
    body = " ".join(f.text for f in chosen)
    return Decision("answer", body=body, what="playbook facts", facts=tuple(f.id for f in chosen))


def _acknowledgement(lead: Lead) -> Decision:
    recently = Message.objects.filter(
        lead=lead, direction="out", automated=True, created_at__gte=timezone.now() - ACK_QUIET
    ).exists()
    if recently:
        return NONE
    body, key = _rendered(lead, ACK_TEMPLATE)
    return Decision("answer", body=body, template_key=key, what="acknowledgement") if body else NONE


def _send(message: Message, lead: Lead, body: str, *, template_key: str, why: str) -> Message | None:
    channel = REPLY_CHANNEL.get(message.channel, "sms")
    if not lead.contact.points.filter(kind=POINT_KIND[channel], is_valid=True).exists():
        return None
    return message_send(
        lead=lead,
        channel=channel,
        body=body,
        actor=ACTOR,
        idempotency_key=f"reception:{message.public_id}",
        automated=True,
        template_key=template_key,
        draft_reason=why,
    )


def _answer(message: Message, lead: Lead, decision: Decision) -> None:
    why = f"after hours: approved {decision.what}" + (f" ({', '.join(decision.facts)})" if decision.facts else "")
    sent = _send(message, lead, decision.body, template_key=decision.template_key, why=why)
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=message.public_id,
        actor=ACTOR,
        action="reception.slots_offered" if decision.slots else "reception.answered",
        reason=why,
        after={
            "reply": sent.public_id if sent is not None else None,
            "status": sent.status if sent is not None else "no_channel",
            "template": decision.template_key,
            "facts": list(decision.facts),
            "slots": list(decision.slots),
        },
    )


def hand_over(message: Message, lead: Lead, reason: str, *, detail: str = "") -> Task:
    """Give the conversation to the lead's owner (else a manager): one open
    take-over task saying why, a `reception.handed_over` receipt, and for a
    person waiting on an answer the approved acknowledgement. The caller
    holds the lead's row lock."""
    said = REASONS.get(reason, reason)
    who = lead.contact.name or "The person"
    task = task_ensure(
        lead=lead,
        title=f"{HANDOVER_TITLE} {who} {said} — take over the conversation"[:300],
        due_at=timezone.now(),
        actor=ACTOR,
        kind=Task.Kind.TAKE_OVER,
        owner=owner_or_manager(lead),
        reason=f"{said}{f': {detail}' if detail else ''} ({message.public_id})"[:300],
    )
    acknowledged = None
    if reason in ACKNOWLEDGED:
        body, key = _rendered(lead, ACK_TEMPLATE)
        if body:
            acknowledged = _send(message, lead, body, template_key=key, why=f"after hours: handed over ({said})")
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=message.public_id,
        actor=ACTOR,
        action="reception.handed_over",
        reason=f"{said}{f': {detail}' if detail else ''}"[:300],
        after={
            "task": task.public_id,
            "reason": reason,
            "acknowledgement": acknowledged.public_id if acknowledged is not None else None,
        },
    )
    return task


def _book(message: Message, slot: str) -> None:
    """Book the picked slot through the booking flow, in its own transaction
    and lock order (availability, then lead); refused, a person takes over."""
    try:
        public_id, starts_at = slot_key_parse(slot)
        with transaction.atomic():
            lead = Lead.objects.select_related("business", "contact", "owner").get(pk=message.lead_id or 0)
            rule = Availability.objects.filter(business_id=lead.business_id, public_id=public_id).first()
            if rule is None:
                raise BookingError(f"{public_id} is no availability rule of this business any more")
            booked = appointment_book(lead, availability=rule, starts_at=starts_at, actor=ACTOR)
            appointment = booked.appointment
            when = when_label(appointment.starts_at, appointment.ends_at, ZoneInfo(lead.business.timezone))
            receipt_write(
                business=lead.business,
                lead=lead,
                subject=message.public_id,
                actor=ACTOR,
                action="reception.booked",
                reason=f"after hours: the person picked {when} from the offered slots",
                after={"appointment": appointment.public_id, "slot": slot},
            )
    except BookingError as exc:
        with transaction.atomic():
            hand_over(message, lead_for_update(message.lead_id or 0), BOOKING_FAILED, detail=str(exc))


def register() -> None:
    # May call a model: the AI job runs it (agents.tasks), never the timer loop.
    timer_handler_register(RECEPTION_TIMER, reception_run, own_job=True)
