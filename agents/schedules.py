"""The cluster's periodic schedules, registered by name so that migrating
again (or on another host) never duplicates one."""

from __future__ import annotations

from typing import Any

SCHEDULES: list[dict[str, Any]] = [
    {
        "name": "leadops.run_timers",
        "func": "agents.tasks.run_timers",
        "schedule_type": "I",  # minutes
        "minutes": 1,
    },
    {
        # The safety net of the after-commit seal (crm.services.receipts).
        "name": "leadops.seal_receipts",
        "func": "crm.tasks.seal_receipts",
        "schedule_type": "I",
        "minutes": 1,
    },
    {
        # To RECEIPT_CHECKPOINT_TO, when it is set.
        "name": "leadops.export_receipt_checkpoint",
        "func": "crm.tasks.export_receipt_checkpoint",
        "schedule_type": "H",
    },
    {
        "name": "leadops.pipeline_qa",
        "func": "agents.tasks.pipeline_qa",
        "schedule_type": "I",
        "minutes": 15,
    },
    {
        # Hourly: each business's brief goes out on the first run at or after
        # its local `brief_hour`, once per member and day (agents.reporting.brief).
        "name": "leadops.daily_brief",
        "func": "agents.tasks.daily_brief",
        "schedule_type": "H",
    },
    {
        # Hourly, a bounded batch each run (crm.services.retention).
        "name": "leadops.prune_raw_bodies",
        "func": "agents.tasks.prune_raw_bodies",
        "schedule_type": "H",
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
