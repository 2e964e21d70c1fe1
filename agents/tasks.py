"""django-q2 task entry points: thin wrappers that call one service.

The periodic jobs (agents.schedules) each record their run in a `PeriodicRun` row
(`_job`): the queue health check reads when each last succeeded.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from django.utils import timezone

from agents.capture.processing import event_process, inbound_events_sweep
from agents.outbound.dispatch import message_dispatch as _message_dispatch
from crm.services.periodic_runs import periodic_run_record
from crm.services.timers import timer_run, timers_run_due

log = logging.getLogger(__name__)
R = TypeVar("R")

# Per run: the event sweep may fetch from Meta's Graph for each event (ten
# seconds' read timeout, retried), so it takes a few at a time; the others
# are database work or one quick provider call per row.
EVENT_SWEEP_BATCH = 25
MESSAGE_SWEEP_BATCH = 100
# A model call may take (LLM_MAX_RETRIES + 1) × its timeouts, at most 55 s
# (leadops.settings): the AI job starts no call after 20 s of its 80.
AI_SWEEP_LIMIT = 20
AI_SWEEP_BUDGET = timedelta(seconds=20)


def _job(name: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Record each run of the job `name`: its counts on success, its error
    on failure (a timeout included: django-q2 raises it as SystemExit)."""

    def wrap(run: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(run)
        def recorded(*args: Any, **kwargs: Any) -> R:
            started = timezone.now()
            try:
                result = run(*args, **kwargs)
            except BaseException as exc:
                try:
                    periodic_run_record(name, started_at=started, error=f"{type(exc).__name__}: {exc}")
                except Exception:
                    log.exception("job %s: its failure could not be recorded", name)
                raise
            periodic_run_record(
                name, started_at=started, result=result if isinstance(result, dict) else {"result": result}
            )
            return result

        return recorded

    return wrap


@_job("leadops.timers")
def run_timers() -> dict[str, int]:
    """Due timers, except the kinds that call the network (their own jobs)."""
    result = timers_run_due()
    return {"claimed": result.claimed, "done": result.done, "failed": result.failed}


@_job("leadops.event_sweep")
def events_sweep() -> dict[str, int]:
    return {"events_swept": inbound_events_sweep(batch=EVENT_SWEEP_BATCH)}


@_job("leadops.messages_sweep")
def messages_sweep() -> dict[str, int]:
    from agents.outbound.reconcile import messages_reconcile

    return messages_reconcile(batch=MESSAGE_SWEEP_BATCH)


@_job("leadops.seal_receipts")
def seal_receipts() -> dict[str, int]:
    """What an after-commit seal left unsealed (a process killed between
    its commit and its seal)."""
    from crm.services.receipts import receipts_seal

    return {"receipts_sealed": receipts_seal()}


@_job("leadops.export_receipt_checkpoint")
def export_receipt_checkpoint() -> dict[str, int]:
    from crm.services.receipt_checkpoints import checkpoint_export_scheduled

    return {"checkpoints_exported": checkpoint_export_scheduled()}


@_job("leadops.approvals_expire")
def approvals_expire() -> dict[str, int]:
    from approvals.services import approvals_expire as _approvals_expire

    return {"approvals_expired": _approvals_expire()}


@_job("leadops.alerts")
def alerts() -> dict[str, int]:
    from agents.reporting.alerts import alerts_run

    return alerts_run()


@_job("leadops.pipeline_qa")
def pipeline_qa() -> dict[str, object]:
    from agents.reporting.pipeline_qa import pipeline_qa_run

    return pipeline_qa_run().as_dict()


@_job("leadops.webhooks_sweep")
def webhooks_sweep() -> dict[str, int]:
    """On the webhooks cluster: what no pump did, lost claims, the day-long
    failures, then the retries due (agents.webhooks.delivery)."""
    from agents.webhooks.delivery import webhooks_sweep as _webhooks_sweep

    return _webhooks_sweep()


def webhooks_pump() -> dict[str, int]:
    """On the webhooks cluster: number new events, then send what is due."""
    from agents.webhooks.delivery import webhooks_pump as _webhooks_pump

    return _webhooks_pump()


@_job("leadops.conversions_sweep")
def conversions_sweep() -> dict[str, int]:
    """On the outbound (webhooks) cluster: lost claims, then the conversion
    uploads due (agents.conversions.delivery)."""
    from agents.conversions.delivery import conversions_sweep as _conversions_sweep

    return _conversions_sweep()


def conversions_pump() -> dict[str, int]:
    """On the outbound cluster: number new events, then upload what is due."""
    from agents.conversions.delivery import conversions_pump as _conversions_pump

    return _conversions_pump()


@_job("leadops.spend_pull")
def spend_pull() -> dict[str, int]:
    """Daily: each ad account's campaign spend for the last days
    (agents.conversions.spend)."""
    from agents.conversions.spend import spend_pull_due

    return spend_pull_due()


@_job("leadops.reviews_pull")
def reviews_pull() -> dict[str, int]:
    """Each connected business's Google reviews read when due, then the
    approved replies whose post was lost (agents.reviews.pull, agents.reviews.replies)."""
    from agents.reviews.pull import reviews_sweep
    from agents.reviews.replies import replies_post_due

    counts = reviews_sweep()
    counts["replies_posted"] = replies_post_due(limit=3)
    return counts


def review_reply_post(review_id: int) -> str:
    """A review's approved reply posted to Google (agents.reviews.replies)."""
    from agents.reviews.replies import review_reply_post as _post

    return _post(review_id).reply_status


@_job("leadops.sync_sweep")
def sync_sweep() -> dict[str, int]:
    """On the outbound cluster: lost claims, each connection's streams
    reconciled when due, then the pushes and pulls due (agents.sync.engine)."""
    from agents.sync.engine import sync_sweep as _sync_sweep

    return _sync_sweep()


def sync_pump() -> dict[str, int]:
    """On the outbound cluster: the pushes and pulls due."""
    from agents.sync.engine import sync_pump as _sync_pump

    return _sync_pump()


@_job("leadops.google_lsa")
def google_lsa() -> dict[str, int]:
    """Google Local Services leads (no webhook): each active source polled,
    then the leads' feedback to Google (agents.capture.providers.google_lsa)."""
    from agents.capture.providers.google_lsa.run import lsa_run

    return lsa_run()


@_job("leadops.yelp_sync")
def yelp_sync() -> dict[str, int]:
    """Yelp threads a person read, marked read at Yelp; each source's daily
    resync of its lead ids (agents.capture.providers.yelp_sync)."""
    from agents.capture.providers.yelp_sync import yelp_sync as _yelp_sync

    return _yelp_sync()


@_job("leadops.daily_brief")
def daily_brief() -> dict[str, int]:
    from agents.reporting.daily_brief import TIMER_KIND, briefs_schedule

    scheduled = briefs_schedule()
    sent = timers_run_due(kinds=[TIMER_KIND])  # send now rather than at the next run
    return {"scheduled": scheduled, "sent": sent.done, "failed": sent.failed}


@_job("leadops.sms_health")
def sms_health() -> dict[str, int]:
    """Each business's texts against its SMS health limits: a sequence whose
    texts drive opt-outs or carrier filtering is paused (agents.reporting.sms_health)."""
    from agents.reporting.sms_health import sms_health_sweep

    return sms_health_sweep(now=timezone.now())


@_job("leadops.invitations_sweep")
def invitations_sweep() -> dict[str, int]:
    """Invitations whose email never went out, sent again (crm.services.invitations)."""
    from crm.services.invitations import invitations_sweep as sweep

    return sweep(now=timezone.now())


@_job("leadops.backup")
def backup() -> dict[str, Any]:
    """A backup of the database when one is due (crm.services.backups)."""
    from crm.services.backups import backup_due

    made = backup_due(now=timezone.now())
    return {"backup": made.path.name if made else "", "bytes": made.size if made else 0}


@_job("leadops.prune_rate_limits")
def prune_rate_limits() -> dict[str, int]:
    from agents.capture.ratelimit import counters_prune

    return {"counters_deleted": counters_prune()}


@_job("leadops.prune_raw_bodies")
def prune_raw_bodies() -> int:
    from crm.services.retention import raw_bodies_prune

    return raw_bodies_prune()


def process_inbound_event(event_id: int) -> str:
    return event_process(event_id)


def message_dispatch(message_id: int) -> str:
    return _message_dispatch(message_id)


def twilio_copies_erase(business_id: int, messages: list[str], recordings: list[str]) -> dict[str, Any]:
    from agents.outbound.provider_copies import twilio_copies_erase as _erase

    done = _erase(business_id, messages, recordings)
    return {"messages": done.messages, "recordings": done.recordings, "gone": done.gone, "dry_run": done.dry_run}


def notice_deliver(email: str, subject: str, text: str, slack_url: str = "") -> None:
    from agents.notify import notice_deliver as _notice_deliver

    _notice_deliver(email, subject, text, slack_url=slack_url)


@_job("leadops.ai")
def ai_sweep() -> dict[str, int]:
    """Model readings and call transcriptions whose fast path was lost (a failed enqueue, a worker
    that died): one at a time, claiming no more after AI_SWEEP_BUDGET, so the
    last call it starts still ends inside the job's timeout."""
    from agents.ai import explain, inbound
    from agents.reporting.call_scoring import TRANSCRIBE_KIND

    kinds = [inbound.TIMER_KIND, inbound.RECEPTION_TIMER, explain.TIMER_KIND, TRANSCRIBE_KIND]
    run = timers_run_due(kinds=kinds, batch=1, limit=AI_SWEEP_LIMIT, budget=AI_SWEEP_BUDGET)
    return {"claimed": run.claimed, "done": run.done, "failed": run.failed}


def ai_inbound(timer_id: int) -> str:
    """The fast path of one model reading (agents.ai.inbound) or after-hours
    reception (agents.booking.receptionist): run its timer now."""
    return timer_run(timer_id)


def orchestrate(timer_id: int) -> str:
    from agents.orchestrator import orchestrate as _orchestrate

    return _orchestrate(timer_id)


def call_transcribe(timer_id: int) -> str:
    """The fast path of one call's transcription (agents.reporting.call_transcription)."""
    return timer_run(timer_id)
