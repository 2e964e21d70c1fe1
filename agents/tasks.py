"""django-q2 task entry points: thin wrappers that call one service."""

from __future__ import annotations

from crm.services.timers import timers_run_due


def run_timers() -> dict[str, int]:
    result = timers_run_due()
    return {"claimed": result.claimed, "done": result.done, "failed": result.failed}
