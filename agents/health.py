"""Is the task cluster alive? Judged by the one thing it must keep doing:
running the `leadops.run_timers` schedule every minute."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

# Three missed runs of a one-minute schedule: the cluster is down or stuck.
STALE_AFTER = timedelta(minutes=3)


@dataclass(frozen=True)
class QueueHealth:
    alive: bool
    last_run_at: datetime | None
    queued: int

    def as_dict(self) -> dict[str, object]:
        return {
            "alive": self.alive,
            "last_run_timers_at": self.last_run_at.isoformat() if self.last_run_at else None,
            "queued_tasks": self.queued,
        }


def queue_health(now: datetime | None = None) -> QueueHealth:
    from django_q.brokers import get_broker
    from django_q.models import Success

    now = now or timezone.now()
    last = (
        Success.objects.filter(func="agents.tasks.run_timers")
        .order_by("-stopped")
        .values_list("stopped", flat=True)
        .first()
    )
    # From the configured broker: the OrmQ table stays empty with Redis.
    queued = int(get_broker().queue_size() or 0)
    return QueueHealth(alive=bool(last and now - last < STALE_AFTER), last_run_at=last, queued=queued)
