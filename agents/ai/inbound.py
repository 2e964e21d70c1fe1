"""The language model on every inbound text, DM and email reply, when the
business uses one (docs/ai.md).

Capture records the message with the rules' intent and runs the consent
check's safe paths in its own transaction, as without a model. Then
`inbound_read_schedule` leaves a timer (`ai.inbound`, one per message) that
runs after commit, outside any transaction while the model is asked
(`inbound_read`):

1. The model reads the message and drafts a reply (agents/ai/drafter.py:
   one counted and receipted call; on a failure the rules' reading stands
   and no draft is made — the composer offers the rules' reply as always).
2. Under the lead's row lock: the intent kept is `intent_merged`'s (a
   revocation or a complaint the rules found stays); a revocation only the
   model saw gets the revocation's safe path (automation paused, an
   `opt_out_question` for a person).
3. The draft, when the message wants one and nobody answered it meanwhile:
   checked by the assistant (the claims guard against the cited playbook
   facts). It goes through the send gate on its own only where the business
   turned on auto-reply for its intent (`ai: {auto_reply: [...]}`) and the
   guard passed it; otherwise it waits in the thread for a person's approval
   (a `message_draft` request, proposed by `agent:ai_assistant`, with the
   reason), and a person edits or approves it.
"""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from django.db import transaction
from django.utils import timezone

from agents.ai.calls import ACTOR, CallOutcome
from agents.ai.drafter import ModelDrafter, ai_settings_for
from agents.ai.intents import (
    MODEL,
    NOT_DRAFTED,
    READER,
    REVOCATION,
    SAFE_PATH_INTENTS,
    IntentReading,
    intent_merged,
    keyword_text,
)
from agents.consent.keywords import revocation_ask
from agents.outbound.gate import POINT_KIND, message_send
from agents.outbound.local_hours import hours_open
from agents.playbook.assistant import PERSON_APPROVES, Draft, Proposal, draft_proposal
from agents.playbook.copilot import model_draft_key
from agents.queue import task_enqueue
from crm.models import Lead, Message, Timer
from crm.services.lead_sync import lead_for_update
from crm.services.receipts import receipt_write
from crm.services.timers import timer_handler_register, timer_schedule

TIMER_KIND = "ai.inbound"
# The after-hours receptionist's timer (agents/booking/receptionist.py runs
# it), left in place of the reading for a text or DM outside business hours.
RECEPTION_TIMER = "ai.reception"
RECEPTION_CHANNELS = ("sms", "dm", "instagram", "thumbtack", "yelp")
# Above the longest call (55 s, leadops.settings), below the cluster's retry (90 s).
AI_TASK_TIMEOUT = 80
# The channel a reply goes back on, by the channel the message came in on.
REPLY_CHANNEL = {
    "sms": "sms",
    "dm": "instagram",
    "instagram": "instagram",
    "email": "email",
    # A marketplace message is answered in its thread.
    "thumbtack": "thumbtack",
    "yelp": "yelp",
}


def inbound_read_schedule(message: Message, lead: Lead) -> Timer | None:
    """Leave the model's reading of `message` for after commit, when the
    business uses a model. Joins the caller's transaction. Nothing for a
    keyword (its meaning is the ledger's), an empty text or a test lead."""
    if message.direction != "in" or lead.is_test or not message.body.strip() or keyword_text(message.body):
        return None
    if ai_settings_for(lead.business) is None:
        return None
    return read_timer_leave(message, lead, TIMER_KIND)


def read_timer_leave(message: Message, lead: Lead, kind: str) -> Timer:
    """One timer of `kind` for `message` (a second call finds the first),
    enqueued to run after commit on the AI queue."""
    return ai_timer_leave(lead, kind, key=message.public_id, payload={"message": message.pk})


def ai_timer_leave(lead: Lead, kind: str, *, key: str, payload: dict[str, Any]) -> Timer:
    """One timer of `kind` for the lead and `key` (a second call finds the
    first), enqueued to run after commit on the AI queue."""
    timer = timer_schedule(
        business=lead.business,
        lead=lead,
        kind=kind,
        due_at=timezone.now(),
        payload=payload,
        dedupe_key=f"{kind}:{key}",
    )
    if timer.status == Timer.Status.PENDING:
        # A lost enqueue leaves the timer due: the AI job's sweep runs it.
        task_enqueue("agents.tasks.ai_inbound", timer.pk, group="ai", save=False, timeout=AI_TASK_TIMEOUT)
    return timer


def reception_wanted(message: Message, lead: Lead) -> bool:
    """The business turned the receptionist on and `message`, a text or DM
    (not a keyword: the ledger answers those), came in outside its hours, in
    its own zone."""
    business = lead.business
    if not business.ai_receptionist or message.direction != "in" or message.channel not in RECEPTION_CHANNELS:
        return False
    if lead.is_test or not message.body.strip() or keyword_text(message.body):
        return False
    return not hours_open(business.business_hours, ZoneInfo(business.timezone), message.created_at)


def inbound_schedule(message: Message, lead: Lead) -> Timer | None:
    """Where capture hands a recorded text or DM on, in its transaction: the
    receptionist's timer after hours, else the model's usual reading."""
    if reception_wanted(message, lead):
        return read_timer_leave(message, lead, RECEPTION_TIMER)
    return inbound_read_schedule(message, lead)


def inbound_read(timer: Timer) -> None:
    """The timer's work (see the module). A redelivered timer finds the
    message read already and asks the model nothing."""
    message = (
        Message.objects.select_related("lead__business", "lead__contact", "contact_point")
        .filter(pk=timer.payload.get("message"), direction="in")
        .first()
    )
    if message is None or message.lead is None:
        return
    lead = message.lead
    if message.intent_source == MODEL or Message.objects.filter(idempotency_key=model_draft_key(message)).exists():
        return
    config = ai_settings_for(lead.business)
    if config is None:
        return  # the business opted out, or the provider was switched off, since
    drafter = ModelDrafter(config, message=message)
    proposal = drafter.draft_reply(lead, message.body)  # the network, outside any transaction
    _apply(message, proposal, drafter.last)


@transaction.atomic
def _apply(message: Message, proposal: Proposal, outcome: CallOutcome | None) -> None:
    lead = lead_for_update(message.lead_id or 0)
    kept = intent_apply(message, lead, outcome)
    if outcome is None or outcome.understanding is None or kept.intent in NOT_DRAFTED:
        return
    if not draft_wanted(message, lead):
        return
    draft_route(message, lead, draft_proposal(lead, proposal), kept.intent)


def intent_apply(message: Message, lead: Lead, outcome: CallOutcome | None) -> IntentReading:
    """Keep the intent of `message` as `intent_merged` decides, with a
    receipt when the model read it, and run the revocation's safe path when
    only the model saw one. The caller holds the lead's row lock."""
    understanding = outcome.understanding if outcome is not None else None
    # The reading stored as the message was recorded (the trained reader's).
    rules = IntentReading(message.intent or "other", float(message.intent_confidence or 0), message.intent_source)
    model = IntentReading(understanding.intent, understanding.confidence, MODEL) if understanding else None
    kept = intent_merged(rules, model)
    if model is not None:
        Message.objects.filter(pk=message.pk).update(
            intent=kept.intent, intent_confidence=kept.confidence, intent_source=kept.source
        )
        if model.intent != kept.intent:
            reason = (
                f"the model read {model.intent}; the {'reader' if kept.source == READER else 'rules'}'s "
                f"{kept.intent} stands"
                + (" (its safe path is never undone)" if kept.intent in SAFE_PATH_INTENTS else " (it was sure)")
            )
        else:
            reason = f"the model read {model.intent} ({model.confidence:.2f})"
        # Also what moves the inbox's version: the row shows the new intent at once.
        receipt_write(
            business=lead.business,
            lead=lead,
            subject=message.public_id,
            actor=ACTOR,
            action="message.intent_read",
            reason=reason,
            before={"intent": message.intent, "source": message.intent_source},
            after={"intent": kept.intent, "source": kept.source, "model_intent": model.intent},
        )
    if kept.intent == REVOCATION and rules.intent != REVOCATION:
        revocation_ask(message, lead, actor=ACTOR, why="The model reads this as a revocation. ")
    return kept


def draft_wanted(message: Message, lead: Lead) -> bool:
    """Nobody needs a draft for an old message, a closed or held lead, a
    paused person, or a message a person already answered."""
    if not lead.is_open or lead.hold or lead.contact.automation_paused:
        return False
    later = Message.objects.filter(lead=lead, created_at__gt=message.created_at)
    if later.filter(direction="in").exists():
        return False  # the newer message gets its own reading
    return not later.filter(direction="out", automated=False).exclude(actor__startswith="agent:").exists()


def draft_route(message: Message, lead: Lead, draft: Draft, intent: str, *, auto_reply: bool = True) -> Message | None:
    """The model's checked draft through the send gate: on its own where
    auto-reply allows it (never with `auto_reply=False`), else waiting for
    a person's approval."""
    if not draft.body.strip():
        return None
    channel = REPLY_CHANNEL.get(message.channel, "sms")
    if not lead.contact.points.filter(kind=POINT_KIND[channel], is_valid=True).exists():
        return None
    auto = auto_reply and draft.auto_ok and intent in (lead.business.ai_auto_reply or [])
    reason = (
        f"{draft.reason.removesuffix(PERSON_APPROVES)}; sent on its own: auto-reply is on for {intent}"
        if auto
        else draft.reason
    )
    return message_send(
        lead=lead,
        channel=channel,
        body=draft.body,
        subject=f"Re: your request to {lead.business.name}" if channel == "email" else "",
        actor=ACTOR,
        idempotency_key=model_draft_key(message),
        automated=True,
        needs_approval=not auto,
        draft_reason=reason,
    )


def register() -> None:
    # Calls a model: the AI job runs it (agents.tasks), never the timer loop.
    timer_handler_register(TIMER_KIND, inbound_read, own_job=True)
