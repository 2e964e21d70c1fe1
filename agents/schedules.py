"""The cluster's periodic schedules, registered by name so that migrating
again (or on another host) never duplicates one."""

from __future__ import annotations

from typing import Any

SCHEDULES = [
    {
        "name": "leadops.run_timers",
        "func": "agents.tasks.run_timers",
        "schedule_type": "I",  # minutes
        "minutes": 1,
    },
]


def schedules_ensure() -> None:
    from django_q.models import Schedule

    for spec in SCHEDULES:
        name = spec["name"]
        defaults = {k: v for k, v in spec.items() if k != "name"}
        Schedule.objects.update_or_create(name=name, defaults=defaults)


def schedules_ensure_on_migrate(**kwargs: Any) -> None:
    schedules_ensure()
