"""One run of the `leadops.google_lsa` job: every active google_lsa source
polled, the one polled longest ago first, until the run's budget is spent
(the next run goes on); then the leads' feedback to Google."""

from __future__ import annotations

import time
from datetime import timedelta

from django.db.models import F, OuterRef, Subquery

from agents.capture.providers.google_lsa.feedback import TIMER_KIND, feedback_retry, feedback_schedule
from agents.capture.providers.google_lsa.poll import LEADS, source_poll
from crm.models import PollCursor, Provider, Source
from crm.services.timers import timers_run_due

# Inside the job's 55 s: a source's poll is two or three calls of at most
# 15 s each (agents.capture.providers.google_lsa.api), started before this.
POLL_BUDGET = timedelta(seconds=25)
# Feedback is two calls per lead: claimed one at a time, none after the
# budget, so the last one claimed still ends inside the job's timeout.
FEEDBACK_BUDGET = timedelta(seconds=10)
FEEDBACK_LIMIT = 20


def lsa_run(*, poll_budget: timedelta = POLL_BUDGET) -> dict[str, int]:
    started = time.monotonic()
    result = dict.fromkeys(("sources_polled", "sources_left", "sources_failed", "stored", "failed", "duplicates"), 0)
    last_read = PollCursor.objects.filter(source=OuterRef("pk"), name=LEADS.cursor).values("updated_at")[:1]
    sources = (
        Source.objects.filter(provider=Provider.GOOGLE_LSA, is_active=True)
        .select_related("business")
        .annotate(last_read=Subquery(last_read))
        .order_by(F("last_read").asc(nulls_first=True), "pk")
    )
    for source in sources:
        if time.monotonic() - started > poll_budget.total_seconds():
            result["sources_left"] += 1
            continue
        run = source_poll(source)
        result["sources_polled"] += 1
        result["sources_failed"] += bool(run.error)
        result["stored"] += run.stored
        result["failed"] += run.failed
        result["duplicates"] += run.duplicates
    result["feedback_scheduled"] = feedback_schedule()
    result["feedback_retried"] = feedback_retry()
    sent = timers_run_due(kinds=[TIMER_KIND], batch=1, limit=FEEDBACK_LIMIT, budget=FEEDBACK_BUDGET)
    result["feedback_done"], result["feedback_failed"] = sent.done, sent.failed
    return result
