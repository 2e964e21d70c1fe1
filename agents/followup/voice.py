"""AI Voice Follow-Up: a call, last in line, for leads
whose SMS and email paths ran without a reply.

- Eligible only when an automated text and an automated email went out to
  the lead, nothing came back since the first of them, and the person's
  phone has voice consent; the call then goes through the send gate like any
  message (hold, consent, quiet hours in the recipient's local time, caps,
  one path at a time), and the dispatcher places it with the twilio package,
  pointing Twilio at our TwiML (`agents/followup/views.py`) with answering-
  machine detection. Not eligible → the step is skipped, with a receipt.
- The TwiML: a person hears the approved script (the voice template, as
  rendered when the call was placed) and two choices. Every other prompt
  (the menu, the goodbyes, the call-back promise) is the business's approved
  voice template of that key, else our wording (agents/playbook/voice_prompts.py). 1 connects them to the
  lead's owner (`<Dial>` to the owner's phone); when the owner has no phone or
  does not answer, the owner gets a call-back task. 9 revokes voice consent at
  once (the consent ledger) and ends every path of the person. An answering
  machine gets only the approved voicemail (the voice template
  `<script>_voicemail`, else `voicemail`) or nothing at all.
- Every Twilio request is stored first as an InboundEvent (raw, replayable)
  and processed before we answer, so what the caller hears matches what was
  recorded; the outcome lands on the Call (`outcome`, `answered_by`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from twilio.twiml.voice_response import VoiceResponse

from agents.capture.providers.twilio import form_params
from agents.consent.policy import consent_decide, revoked_elsewhere
from agents.followup.sequences.engine import enrollments_stop
from agents.followup.sequences.preview import CHANNEL_PREVIEWS
from agents.followup.sequences.steps import CHANNEL_RUNNERS, Step, message_step, sent_on_path, step_context
from agents.outbound.gate import recipient_point
from agents.playbook.templates import TemplateError, template_for_automation, template_render
from agents.playbook.voice_prompts import voice_prompt
from crm.models import Call, ConsentEvent, Enrollment, InboundEvent, Lead, Message, Provider, Task, TeamMember
from crm.phones import phone_to_e164
from crm.selectors import business_manager
from crm.services.consent import consent_record
from crm.services.inbound_handlers import MalformedPayload, handler_register
from crm.services.receipts import receipt_write
from crm.services.records import task_ensure

ACTOR = "agent:voice_follow_up"
MESSAGE_HEADER = "X-LeadOps-Message"
KIND_ANSWER, KIND_GATHER, KIND_DIAL = "followup_answer", "followup_gather", "followup_dial"
# Twilio's AnsweredBy values for anything but a person (DetectMessageEnd).
MACHINES = frozenset({"machine_start", "machine_end_beep", "machine_end_silence", "machine_end_other", "fax"})
CONNECTED_DIAL = frozenset({"completed", "answered"})
GATHER_SECONDS = 6
DIAL_SECONDS = 20
CALL_BACK = Task.Kind.CALL_BACK


# --- who may be called -----------------------------------------------------------------


def _voice_consent(lead: Lead, now: datetime) -> str:
    point = recipient_point(lead.contact, "voice")
    if point is None:
        return "no valid phone number"
    decision = consent_decide(point, "voice", automated=True, now=now)
    if not decision.allowed:
        return f"no voice consent ({decision.reason}: {decision.basis})"
    # One revocation anywhere stops every automated call too.
    elsewhere = revoked_elsewhere(lead.contact)
    return f"no voice consent ({elsewhere})" if elsewhere else ""


def voice_eligibility(lead: Lead, *, now: datetime) -> str:
    """ "" when the lead may get the follow-up call now; else why not."""
    firsts = []
    for channel, missing in (("sms", "no automated text went out"), ("email", "no automated email went out")):
        first = Message.objects.filter(sent_on_path(lead, channel)).order_by("created_at").first()
        if first is None:
            return f"{missing}: voice comes only after the SMS and email paths"
        firsts.append(first.created_at)
    if Message.objects.filter(contact_id=lead.contact_id, direction="in", created_at__gt=min(firsts)).exists():
        return "the person replied"
    return _voice_consent(lead, now)


def voice_preview_check(lead: Lead, sends: list[tuple[datetime, str]], due: datetime) -> str:
    """The preview's version: earlier previewed sends count as sent."""
    for channel in ("sms", "email"):
        if not any(c == channel for _, c in sends) and not Message.objects.filter(sent_on_path(lead, channel)).exists():
            return f"no automated {'text' if channel == 'sms' else 'email'} would have gone out before the call"
    return _voice_consent(lead, due)


def voice_step(enrollment: Enrollment, lead: Lead, step: Step, now: datetime) -> str:
    """The sequence engine's runner for a `voice` step."""
    reason = voice_eligibility(lead, now=now)
    if reason:
        receipt_write(
            business=lead.business,
            lead=lead,
            subject=enrollment.public_id,
            actor=ACTOR,
            action="voice.skipped",
            reason=reason,
            after={"step": step.index + 1, "template": step.template},
        )
        return f"skipped: {reason}"
    return message_step(enrollment, lead, step, now)


# --- the call's TwiML and what it records -------------------------------------------------


def twiml_url(name: str, message: Message) -> str:
    return settings.PUBLIC_BASE_URL.rstrip("/") + reverse(name, args=[message.public_id])


def followup_message(public_id: str) -> Message | None:
    return (
        Message.objects.select_related("business", "lead__business", "lead__contact", "lead__owner__user", "enrollment")
        .filter(public_id=public_id, direction="out", channel="voice")
        .first()
    )


def voicemail_text(message: Message) -> str:
    """The approved voicemail for this call, or "" (then the machine gets nothing)."""
    assert message.lead is not None
    for key in (f"{message.template_key}_voicemail", "voicemail"):
        try:
            template = template_for_automation(message.business, key, channel="voice")
            return template_render(template, step_context(message.lead))
        except TemplateError:
            continue
    return ""


def owner_of(lead: Lead) -> TeamMember | None:
    return lead.owner if lead.owner is not None and lead.owner.is_active else business_manager(lead.business_id)


def owner_phone(lead: Lead) -> str:
    owner = owner_of(lead)
    raw = owner.phone if owner is not None else ""
    return (phone_to_e164(raw, lead.business.region) or "") if raw else ""


def _owner_name(lead: Lead) -> str:
    owner = owner_of(lead)
    if owner is None:
        return "our team"
    return (owner.display_name or owner.user.get_username()).split()[0]


def prompt(message: Message, key: str) -> str:
    """One of the call's prompts, from the business's playbook (its approved
    voice template `key`, else our wording); `{owner_first_name}` is whoever
    pressing 1 would reach."""
    assert message.lead is not None
    context = {**step_context(message.lead), "owner_first_name": _owner_name(message.lead)}
    return voice_prompt(message.business, key, context)


def answer_twiml(message: Message, call: Call | None) -> VoiceResponse:
    response = VoiceResponse()
    outcome = call.outcome if call else ""
    if outcome == "voicemail":
        response.say(voicemail_text(message))
        response.hangup()
        return response
    if outcome == "machine_skipped":
        response.hangup()  # no approved voicemail: nothing is left on the machine
        return response
    assert message.lead is not None
    gather = response.gather(
        num_digits=1, action=twiml_url("followup-voice-gather", message), method="POST", timeout=GATHER_SECONDS
    )
    gather.say(message.body)
    gather.say(prompt(message, "voice_menu"))
    response.say(prompt(message, "voice_goodbye"))
    response.hangup()
    return response


def gather_twiml(message: Message, call: Call | None) -> VoiceResponse:
    response = VoiceResponse()
    outcome = call.outcome if call else ""
    assert message.lead is not None
    if outcome == "connecting":
        dial = response.dial(
            action=twiml_url("followup-voice-dial", message),
            method="POST",
            timeout=DIAL_SECONDS,
            caller_id=message.from_number or None,
        )
        dial.number(owner_phone(message.lead))
        return response
    if outcome == "callback_task":
        response.say(prompt(message, "voice_callback"))
    elif outcome == "opted_out":
        response.say(prompt(message, "voice_opted_out"))
    else:
        response.say(prompt(message, "voice_goodbye"))
    response.hangup()
    return response


def dial_twiml(message: Message, call: Call | None) -> VoiceResponse:
    response = VoiceResponse()
    if call is None or call.outcome != "connected":
        response.say(prompt(message, "voice_no_answer"))
        response.hangup()
    return response


def _call_for(message: Message, params: dict[str, str], at: datetime) -> Call:
    """The Call row of this follow-up call (the dispatcher makes it when the
    call is placed; made here if Twilio's request wins the race). Locked."""
    call, _ = Call.objects.get_or_create(
        provider_sid=params["CallSid"],
        defaults={
            "business": message.business,
            "lead": message.lead,
            "contact": message.contact,
            "direction": "out",
            "status": params.get("CallStatus", "in-progress")[:20],
            "from_number": message.from_number,
            "to": message.to,
            "started_at": at,
            "enrollment": message.enrollment,
        },
    )
    return Call.objects.select_for_update().get(pk=call.pk)


def _set_outcome(call: Call, outcome: str, *, allowed_from: tuple[str, ...], reason: str, **more: Any) -> bool:
    """Move the call's outcome forward (a replayed earlier request never moves it back)."""
    if call.outcome not in allowed_from:
        return False
    before = call.outcome
    call.outcome = outcome
    fields = ["outcome"]
    if "answered_by" in more:
        call.answered_by = str(more["answered_by"])[:32]
        fields.append("answered_by")
    call.save(update_fields=fields)
    receipt_write(
        business=call.business,
        lead=call.lead,
        subject=call.public_id,
        actor=ACTOR,
        action="call.outcome",
        reason=reason,
        before={"outcome": before},
        after={"outcome": outcome, **more},
    )
    return True


def _event_parts(event: InboundEvent) -> tuple[Message, dict[str, str]]:
    params = form_params(event)
    if not params.get("CallSid"):
        raise MalformedPayload("no CallSid")
    message = followup_message(str(event.headers.get(MESSAGE_HEADER, "")))
    if message is None or message.lead is None:
        raise MalformedPayload(f"no follow-up call {event.headers.get(MESSAGE_HEADER)!r}")
    return message, params


def _process_answer(event: InboundEvent) -> str:
    message, params = _event_parts(event)
    call = _call_for(message, params, event.received_at)
    answered_by = params.get("AnsweredBy", "")
    if answered_by in MACHINES:
        outcome = "voicemail" if voicemail_text(message) else "machine_skipped"
        reason = "an answering machine: the approved voicemail" if outcome == "voicemail" else "no approved voicemail"
    else:
        outcome, reason = "answered", "a person answered: the approved script"
    _set_outcome(call, outcome, allowed_from=("",), reason=reason, answered_by=answered_by or "unknown")
    return InboundEvent.Status.PROCESSED


def _call_back_task(call: Call, lead: Lead, why: str) -> Task:
    return task_ensure(
        lead=lead,
        title=f"Call back {lead.contact.name or call.to} (follow-up call: {why})"[:300],
        due_at=timezone.now(),
        actor=ACTOR,
        kind=CALL_BACK,
        owner=owner_of(lead),
        reason=why,
        any_title=True,  # one call back at a time, whatever the last call's outcome
    )


def _process_gather(event: InboundEvent) -> str:
    message, params = _event_parts(event)
    lead = message.lead
    assert lead is not None
    call = _call_for(message, params, event.received_at)
    digits = params.get("Digits", "").strip()
    waiting = ("", "answered", "no_input")
    if digits == "9":
        _revoke_voice(message, call, event)
        enrollments_stop(contact=lead.contact, reason="opt_out", actor=ACTOR)
        _set_outcome(call, "opted_out", allowed_from=waiting, reason="pressed 9: no more calls", digits=digits)
    elif digits == "1" and owner_phone(lead):
        _set_outcome(call, "connecting", allowed_from=waiting, reason="pressed 1: connecting the owner", digits=digits)
    elif digits == "1":
        task = _call_back_task(call, lead, "the owner has no phone on record")
        _set_outcome(
            call,
            "callback_task",
            allowed_from=waiting,
            reason="pressed 1; nobody to connect",
            digits=digits,
            task=task.public_id,
        )
    else:
        _set_outcome(call, "no_input", allowed_from=("", "answered"), reason="no choice made", digits=digits)
    return InboundEvent.Status.PROCESSED


def _revoke_voice(message: Message, call: Call, event: InboundEvent) -> None:
    point = message.contact_point
    if point is None or ConsentEvent.objects.filter(contact_point=point, evidence__call=call.provider_sid).exists():
        return  # a replay of the same key press
    consent_record(
        contact_point=point,
        channel="voice",
        granted=False,
        basis="keypress",
        actor=ACTOR,
        inbound_event=event,
        evidence={"call": call.provider_sid, "digits": "9", "message": message.public_id},
    )


def _process_dial(event: InboundEvent) -> str:
    message, params = _event_parts(event)
    lead = message.lead
    assert lead is not None
    call = _call_for(message, params, event.received_at)
    status = params.get("DialCallStatus", "")
    if status in CONNECTED_DIAL:
        _set_outcome(call, "connected", allowed_from=("connecting",), reason="the owner picked up", dial=status)
    else:
        task = _call_back_task(call, lead, f"the owner's phone was {status or 'not answered'}")
        _set_outcome(
            call,
            "callback_task",
            allowed_from=("connecting",),
            reason=f"dial {status}",
            dial=status,
            task=task.public_id,
        )
    return InboundEvent.Status.PROCESSED


def register() -> None:
    CHANNEL_RUNNERS.register("voice", voice_step)
    CHANNEL_PREVIEWS.register("voice", voice_preview_check)
    handler_register(Provider.TWILIO, KIND_ANSWER, _process_answer)
    handler_register(Provider.TWILIO, KIND_GATHER, _process_gather)
    handler_register(Provider.TWILIO, KIND_DIAL, _process_dial)
