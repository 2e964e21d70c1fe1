"""CallRail calls, processed: capture records the call, its lead and its
outcome (agents/capture/providers/callrail.py, `callrail_call_apply`), and
the transcript CallRail attached is stored and scored here like any other
(`call_transcript_set`), which is why this handler lives above capture."""

from __future__ import annotations

from agents.capture.providers.callrail import CALL, callrail_call_apply
from agents.reporting.call_scoring import call_transcript_set
from crm.models import InboundEvent, Provider
from crm.services.inbound_handlers import handler_register

ACTOR = "agent:call_scoring"


def _process_call(event: InboundEvent) -> str:
    call, transcript = callrail_call_apply(event)
    if call is None:
        return InboundEvent.Status.IGNORED  # an outbound call: no lead to record
    # A Call Modified delivery repeats the transcript it already gave: scored once.
    if transcript and transcript != call.transcript.strip():
        call_transcript_set(call, transcript, actor=ACTOR, source=Provider.CALLRAIL)
    return InboundEvent.Status.PROCESSED


def register() -> None:
    handler_register(Provider.CALLRAIL, CALL, _process_call)
