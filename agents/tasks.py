"""django-q2 task entry points: thin wrappers that call one service."""

from __future__ import annotations

from django.conf import settings

from agents.capture.processing import event_process, inbound_events_sweep
from agents.outbound.dispatch import message_dispatch as _message_dispatch
from agents.outbound.dispatch import messages_reconcile
from approvals.services import approvals_expire
from crm.services.timers import timers_run_due


def run_timers() -> dict[str, int]:
    result = timers_run_due()
    swept = inbound_events_sweep()
    reconciled = messages_reconcile() if settings.SEND_MODE == "live" else {}
    expired = approvals_expire()
    return {
        "claimed": result.claimed,
        "done": result.done,
        "failed": result.failed,
        "events_swept": swept,
        "approvals_expired": expired,
        **reconciled,
    }


def process_inbound_event(event_id: int) -> str:
    return event_process(event_id)


def message_dispatch(message_id: int) -> str:
    return _message_dispatch(message_id)


def first_response(lead_id: int) -> str:
    from agents.first_response.acknowledge import lead_first_response

    return lead_first_response(lead_id)
