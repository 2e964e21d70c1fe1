"""Running the queued notices (email and Slack) the way a worker would."""

from __future__ import annotations

from django_q.models import OrmQ

from agents.tasks import notice_deliver


def run_queued_notices() -> int:
    """Run every queued `notice_deliver` task on its queued arguments, then drop it."""
    ran = 0
    for queued in OrmQ.objects.order_by("id"):
        task = queued.task
        if task.get("func") != "agents.tasks.notice_deliver":
            continue
        notice_deliver(*task["args"], **task["kwargs"])
        queued.delete()
        ran += 1
    return ran
