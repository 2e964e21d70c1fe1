"""Is the task cluster doing its work? Judged per periodic job (agents.schedules)
by when it last succeeded (its `PeriodicRun` row): a job whose last success is
older than its `overdue_after` — or that never succeeded — is overdue, and
any overdue job turns the check red. `alive` is the timer job's own verdict:
it runs every minute, so it is the cluster's pulse."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from agents.schedules import JOBS
from crm.models import PeriodicRun

PULSE = "leadops.timers"


@dataclass(frozen=True)
class JobHealth:
    name: str
    last_succeeded_at: datetime | None
    last_failed_at: datetime | None
    error: str
    overdue: bool

    def as_dict(self) -> dict[str, object]:
        failed_last = bool(
            self.last_failed_at and (self.last_succeeded_at is None or self.last_failed_at > self.last_succeeded_at)
        )
        return {
            "last_succeeded_at": self.last_succeeded_at.isoformat() if self.last_succeeded_at else None,
            "overdue": self.overdue,
            "last_error": self.error[:300] if failed_last else "",
        }


@dataclass(frozen=True)
class QueueHealth:
    jobs: list[JobHealth]
    queued: int
    queued_webhooks: int = 0  # on the webhooks cluster's own queue

    @property
    def alive(self) -> bool:
        return not any(job.overdue for job in self.jobs if job.name == PULSE)

    @property
    def healthy(self) -> bool:
        return not any(job.overdue for job in self.jobs)

    def as_dict(self) -> dict[str, object]:
        return {
            "alive": self.alive,
            "healthy": self.healthy,
            "overdue": [job.name for job in self.jobs if job.overdue],
            "jobs": {job.name: job.as_dict() for job in self.jobs},
            "queued_tasks": self.queued,
            "queued_webhook_tasks": self.queued_webhooks,
        }


def queue_health(now: datetime | None = None) -> QueueHealth:
    from django_q.brokers import get_broker

    now = now or timezone.now()
    runs = {run.name: run for run in PeriodicRun.objects.filter(name__in=[job.name for job in JOBS])}
    jobs = []
    for job in JOBS:
        run = runs.get(job.name)
        last = run.succeeded_at if run else None
        jobs.append(
            JobHealth(
                name=job.name,
                last_succeeded_at=last,
                last_failed_at=run.failed_at if run else None,
                error=run.error if run else "",
                overdue=last is None or now - last > job.overdue_after,
            )
        )
    # From the configured broker: the OrmQ table stays empty with Redis.
    return QueueHealth(
        jobs=jobs,
        queued=int(get_broker().queue_size() or 0),
        queued_webhooks=int(get_broker(settings.WEBHOOKS_CLUSTER).queue_size() or 0),
    )
