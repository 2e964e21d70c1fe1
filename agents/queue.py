"""Enqueue a django-q2 task once the caller's transaction has committed.

After commit, so a worker never looks for a row that is not there yet, with
either broker (the database or Redis), and never runs work for a change that
rolled back. Robust: a broker that refuses the enqueue (Redis down, a broken
connection) is logged, never raised, because the change it follows is already
committed — a webhook stays accepted (its answer is not turned into a 500)
and a task's transaction is not reported failed after it succeeded. Every
enqueue is for work whose state lives in PostgreSQL (an event `received`, a
timer `pending`, a message `queued`), so the periodic sweeps find what a lost
enqueue left behind.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

from django.db import transaction

log = logging.getLogger(__name__)


@cache
def _broker(cluster: str | None = None) -> Any:
    # One per process and queue: django-q2 builds a new broker (for Redis, a
    # new connection pool) on every enqueue otherwise. Made on first use, so
    # a forked server worker makes its own.
    from django_q.brokers import get_broker

    return get_broker(cluster)


def task_enqueue(
    func: str, *args: Any, group: str, save: bool = True, timeout: int | None = None, cluster: str | None = None
) -> None:
    """Enqueue `func(*args)` in `group` when the current transaction commits
    (at once outside one); a failure to enqueue is logged, not raised.
    `save=False` keeps no result row when the task succeeds (failures are
    kept): for tasks whose own row records the outcome. `timeout`: this
    task's own limit in seconds, instead of the cluster's. `cluster`: the
    queue of another cluster (settings.WEBHOOKS_CLUSTER), whose own
    `qcluster` runs it; the default queue otherwise."""
    options: dict[str, Any] = {"group": group, "save": save}
    if timeout is not None:
        options["timeout"] = timeout
    if cluster is not None:
        options["cluster"] = cluster

    def enqueue() -> None:
        from django_q.tasks import async_task

        try:
            async_task(func, *args, q_options={**options, "broker": _broker(cluster)})
        except Exception:
            # The task's name only: its arguments may name a person (a log is
            # no place for personal data, and erasure cannot reach it).
            log.exception("could not enqueue %s; the periodic sweep will pick it up", func)

    transaction.on_commit(enqueue, robust=True)


def tasks_forget(forgetting: Any) -> None:
    """Erase a forgotten person from django-q's rows (crm.services.forget):
    a queued task (ORM broker) or a finished one whose arguments or result
    name them (a notice's text, an address) is deleted, not redacted (its
    pickle is django-q's). A queued notice about them is never sent then;
    what the task would have done for them no longer applies. With the Redis
    broker, tasks still queued there expire with Redis (docs/security.md)."""
    from django_q.models import OrmQ, Schedule, Task
    from django_q.signing import BadSignature, SignedPackage

    def mentions(value: Any) -> bool:
        text = repr(value)
        return forgetting.redact(text) != text

    finished = [t.pk for t in Task.objects.all().iterator() if mentions((t.args, t.kwargs, t.result, t.name))]
    Task.objects.filter(pk__in=finished).delete()
    forgetting.count("django_q_task", len(finished))
    queued = []
    for row in OrmQ.objects.all().iterator():
        try:
            package = SignedPackage.loads(row.payload)
        except (BadSignature, ValueError, TypeError):
            continue  # not ours to read
        if mentions((package.get("args"), package.get("kwargs"))):
            queued.append(row.pk)
    OrmQ.objects.filter(pk__in=queued).delete()
    forgetting.count("django_q_ormq", len(queued))
    scheduled = [s.pk for s in Schedule.objects.all().iterator() if mentions((s.args, s.kwargs, s.name))]
    Schedule.objects.filter(pk__in=scheduled).delete()
    forgetting.count("django_q_schedule", len(scheduled))


def register() -> None:
    from crm.services.forget import forget_eraser_register

    forget_eraser_register("django_q", tasks_forget)
