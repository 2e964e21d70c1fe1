"""The cluster's periodic jobs, registered by name so that migrating again
(or on another host) never duplicates one.

Each job is its own task with its own timeout (django-q2 takes `timeout` from
the schedule's `q_options`) and does a bounded batch per run (agents.tasks),
so a slow provider stalls one job, not the others. Every timeout stays below
Q_CLUSTER's `retry` (90 s): a task still running at `retry` would be handed to
a second worker. `overdue_after` is when the health check calls a job overdue.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings


@dataclass(frozen=True)
class Job:
    name: str
    func: str
    minutes: int  # runs every this many minutes
    timeout: int  # seconds
    overdue_after: timedelta
    # The cluster whose scheduler runs it, on its own queue; None: the default one.
    cluster: str | None = None

    def schedule_fields(self) -> dict[str, Any]:
        return {
            "func": self.func,
            "schedule_type": "I",
            "minutes": self.minutes,
            "kwargs": repr({"q_options": {"timeout": self.timeout}}),
            "cluster": self.cluster,
        }


JOBS: list[Job] = [
    # Due timer rows (SLA checks, sequence steps, reminders, orchestrator steps).
    Job("leadops.timers", "agents.tasks.run_timers", 1, 55, timedelta(minutes=3)),
    # Inbound events whose enqueue was lost, whose retry is due or whose worker died.
    Job("leadops.event_sweep", "agents.tasks.events_sweep", 1, 55, timedelta(minutes=5)),
    # Messages stuck sending, unknown, or queued with a lost enqueue (agents.outbound.reconcile).
    Job("leadops.messages_sweep", "agents.tasks.messages_sweep", 1, 55, timedelta(minutes=5)),
    # Language-model readings of inbound messages whose fast path was lost
    # (agents.ai.inbound); nothing to do unless LLM_PROVIDER is set.
    Job("leadops.ai", "agents.tasks.ai_sweep", 1, 80, timedelta(minutes=5)),
    Job("leadops.approvals_expire", "agents.tasks.approvals_expire", 5, 55, timedelta(minutes=15)),
    # The safety net of the after-commit seal of receipts (crm.services.receipts).
    Job("leadops.seal_receipts", "agents.tasks.seal_receipts", 1, 55, timedelta(minutes=5)),
    # Each chain's head to RECEIPT_CHECKPOINT_TO, when it is set (crm.services.receipt_checkpoints).
    Job("leadops.export_receipt_checkpoint", "agents.tasks.export_receipt_checkpoint", 60, 80, timedelta(hours=3)),
    # Slack alerts: the scan, then the posts (the only Slack calls of the periodic work).
    Job("leadops.alerts", "agents.tasks.alerts", 1, 55, timedelta(minutes=5)),
    Job("leadops.pipeline_qa", "agents.tasks.pipeline_qa", 15, 80, timedelta(minutes=45)),
    # Google Local Services leads, which come by polling, not by webhook, and
    # the feedback Google is told about them (agents.capture.providers.google_lsa).
    Job("leadops.google_lsa", "agents.tasks.google_lsa", 1, 55, timedelta(minutes=5)),
    # Yelp: threads a person read marked read at Yelp, and once a day per
    # source the lead ids listed for what a webhook missed (agents.capture.providers.yelp_sync).
    Job("leadops.yelp_sync", "agents.tasks.yelp_sync", 5, 80, timedelta(minutes=30)),
    # Hourly: each business's brief goes out on the first run at or after its
    # local `brief_hour`, once per member and day (agents.reporting.daily_brief).
    Job("leadops.daily_brief", "agents.tasks.daily_brief", 60, 80, timedelta(hours=3)),
    # Hourly: sequences whose texts drive opt-outs or carrier filtering past
    # the business's limits are paused (agents.reporting.sms_health).
    Job("leadops.sms_health", "agents.tasks.sms_health", 60, 80, timedelta(hours=3)),
    # Daily: each ad account's campaign spend for the last three days (the
    # first pull of an account, thirty), a bounded run (agents.conversions.spend).
    Job("leadops.spend_pull", "agents.tasks.spend_pull", 24 * 60, 80, timedelta(hours=50)),
    # Google reviews: each connected business's read every few hours, and an
    # approved reply whose post was lost posted (agents.reviews.pull, agents.reviews.replies).
    Job("leadops.reviews_pull", "agents.tasks.reviews_pull", 15, 80, timedelta(hours=1)),
    # Team members' invitations that never went out, sent again (crm.services.invitations).
    Job("leadops.invitations_sweep", "agents.tasks.invitations_sweep", 15, 80, timedelta(hours=1)),
    # Hourly: a backup when the newest is BACKUP_SCHEDULE_HOURS old (0, the
    # default: never; crm.services.backups).
    Job("leadops.backup", "agents.tasks.backup", 60, 80, timedelta(hours=3)),
    # Rate-limit counters of windows gone by, kept in the database cache table
    # (agents.capture.ratelimit; Redis expires its own).
    Job("leadops.prune_rate_limits", "agents.tasks.prune_rate_limits", 1, 55, timedelta(minutes=5)),
    # Hourly, a bounded batch each run (crm.services.retention).
    Job("leadops.prune_raw_bodies", "agents.tasks.prune_raw_bodies", 60, 80, timedelta(hours=3)),
    # Outbound webhooks, on their own cluster (agents.webhooks.delivery): lost
    # claims, day-long failures, the retries due. Overdue when that cluster
    # does not run.
    Job(
        "leadops.webhooks_sweep",
        "agents.tasks.webhooks_sweep",
        1,
        55,
        timedelta(minutes=5),
        cluster=settings.WEBHOOKS_CLUSTER,
    ),
    # Conversion uploads to Google Ads and Meta, on the same outbound cluster
    # (agents.conversions.delivery): lost claims, then what is due.
    Job(
        "leadops.conversions_sweep",
        "agents.tasks.conversions_sweep",
        1,
        55,
        timedelta(minutes=5),
        cluster=settings.WEBHOOKS_CLUSTER,
    ),
    # The systems of record (Jobber…), on the same outbound cluster
    # (agents.sync.engine): lost claims, the reconcile loop, then what is due.
    Job(
        "leadops.sync_sweep",
        "agents.tasks.sync_sweep",
        1,
        55,
        timedelta(minutes=5),
        cluster=settings.WEBHOOKS_CLUSTER,
    ),
]
JOBS_BY_NAME = {job.name: job for job in JOBS}
assert len(JOBS_BY_NAME) == len(JOBS), "two jobs share a name"
# Schedules of ours are named `leadops.*`; one that is no longer a job (the old
# combined `leadops.run_timers`) is deleted on migrate, so a deployed site
# never runs both it and the jobs that replaced it.
PREFIX = "leadops."


def schedules_ensure() -> None:
    from django_q.models import Schedule

    Schedule.objects.filter(name__startswith=PREFIX).exclude(name__in=list(JOBS_BY_NAME)).delete()
    for job in JOBS:
        Schedule.objects.update_or_create(name=job.name, defaults=job.schedule_fields())


def schedules_ensure_on_migrate(**kwargs: Any) -> None:
    schedules_ensure()
