"""django-q2 task entry points: thin wrappers that call one service."""

from __future__ import annotations

from agents.capture.processing import event_process, inbound_events_sweep
from crm.services.timers import timers_run_due


def run_timers() -> dict[str, int]:
    result = timers_run_due()
    swept = inbound_events_sweep()
    return {"claimed": result.claimed, "done": result.done, "failed": result.failed, "events_swept": swept}


def process_inbound_event(event_id: int) -> str:
    return event_process(event_id)
