"""django-q2 task entry points: thin wrappers that call one service."""

from __future__ import annotations

from django.conf import settings

from agents.capture.processing import event_process, inbound_events_sweep
from agents.outbound.dispatch import message_dispatch as _message_dispatch
from agents.outbound.dispatch import messages_reconcile
from approvals.services import approvals_expire
from crm.services.retention import raw_bodies_prune
from crm.services.timers import timers_run_due


def run_timers() -> dict[str, int]:
    from agents.reporting.alerts import alerts_scan

    alerts = alerts_scan()  # queued as timers, so this same run posts them
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
        "alerts_queued": alerts,
        **reconciled,
    }


def process_inbound_event(event_id: int) -> str:
    return event_process(event_id)


def message_dispatch(message_id: int) -> str:
    return _message_dispatch(message_id)


def orchestrate(timer_id: int) -> str:
    from agents.orchestrator import orchestrate as _orchestrate

    return _orchestrate(timer_id)


def pipeline_qa() -> dict[str, object]:
    from agents.reporting.pipeline_qa import pipeline_qa_run

    return pipeline_qa_run().as_dict()


def daily_brief() -> dict[str, int]:
    from agents.reporting.brief import TIMER_KIND, briefs_schedule

    scheduled = briefs_schedule()
    sent = timers_run_due(kinds=[TIMER_KIND])  # send now rather than at the next minute
    return {"scheduled": scheduled, "sent": sent.done, "failed": sent.failed}


def prune_raw_bodies() -> int:
    return raw_bodies_prune()
