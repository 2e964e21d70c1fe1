"""The record of periodic runs: one `PeriodicRun` row per job, upserted at the end
of each run, so a health check can tell per job when it last succeeded."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import F
from django.utils import timezone

from crm.models import PeriodicRun

ERROR_LIMIT = 4000


def periodic_run_record(
    name: str, *, started_at: datetime, result: dict[str, Any] | None = None, error: str | None = None
) -> None:
    """Record one finished run of `name`: a success with its counts, or a
    failure with its error (the last success is kept). One statement after
    the first run; autocommit, outside whatever the job did."""
    now = timezone.now()
    changes: dict[str, Any] = {"started_at": started_at, "runs": F("runs") + 1}
    if error is None:
        changes.update(succeeded_at=now, result=result or {})
    else:
        changes.update(failed_at=now, error=error[:ERROR_LIMIT])
    if PeriodicRun.objects.filter(name=name).update(**changes):
        return
    changes["runs"] = 1
    # Two first runs at once (two clusters): the unique name makes the second an update.
    PeriodicRun.objects.update_or_create(name=name, defaults=changes)
