"""Uploading conversions: claim an upload, build its request, send it
outside any transaction, record the platform's answer.

It runs on the outbound cluster (settings.WEBHOOKS_CLUSTER, beside the
webhooks), never on the queue that processes leads:

- `conversions_pump` (task `agents.tasks.conversions_pump`, enqueued after
  the commit of a sequencer run that made uploads) numbers new outbox events
  first (which makes their uploads: crm.services.conversions), then claims
  and sends due uploads until none is left or its time is up;
- `conversions_sweep` (job `leadops.conversions_sweep`, every minute) takes
  back claims whose worker died, then runs a pump for what is due.

A claim is one conditional UPDATE (pending → sending) of the first due
upload no concurrent claim has locked (SKIP LOCKED); a restatement is not
claimable before the paid upload it restates is finished. Concurrent pumps
and sweeps therefore send an upload once; a worker killed mid-call leaves a
claim the sweep records as `lost` and retries, and the platform recognizes
the retry (Google by the order id or transaction id, Meta by the event id).
A Google account goes by the Google Ads API or the Data Manager API, as its
`api` says (`platform_of`).

After an answer: `sent`; Google's `not_yet` tried again (1 h, doubling to a
day) until the click's window ends, then failed; a passing failure retried
with exponential backoff and jitter, failed after the upload's error limit;
a refusal failed at once. A failed upload opens an exception item for the
manager; a replay that then goes through resolves it. With
CONVERSIONS_MODE=dry_run nothing is sent: the request that would have gone
is recorded, as `dry_run` (a platform with a `check`, the Data Manager
API's validate_only, has Google validate it first). Every final outcome
writes a receipt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.module_loading import import_string

from agents.conversions.base import Answer, Built, Skip
from agents.conversions.meta import meta_build, meta_send
from agents.queue import task_enqueue
from crm.models import ConversionAttempt, ConversionPlatform, ConversionUpload
from crm.services.conversions import (
    CONVERSIONS_WAKE,
    DATA_MANAGER_API,
    conversion_failed_open,
    conversion_failed_resolve,
    google_api,
)
from crm.services.outbox import outbox_sequence_all
from crm.services.receipts import receipt_write
from crm.work_queue import Backoff, claims_take_back, pump

log = logging.getLogger(__name__)
Outcome = ConversionAttempt.Outcome
ACTOR = "agent:conversions"
PUMP_FUNC = "agents.tasks.conversions_pump"
PUMP_SECONDS = 40
# An upload `sending` this long lost its worker (a call gives up after 20 s).
STALE_CLAIM = timedelta(minutes=2)
# Passing failures: 1 min, 4 min, 16 min, 64 min, 4.3 h, then 12 h, ±10%:
# eight tries span more than a day.
BACKOFF_FIRST = timedelta(minutes=1)
BACKOFF_FACTOR = 4
BACKOFF_CAP = timedelta(hours=12)
# Google's "not yet": 1 h, doubling, at most a day apart, until the window ends.
NOT_YET_FIRST = timedelta(hours=1)
NOT_YET_CAP = timedelta(days=1)
# A conversion taken within the click's window and not judged yet is asked
# about this long after the window ends.
PROCESSING_GRACE = timedelta(days=7)
JITTER = 0.1


@dataclass(frozen=True)
class Platform:
    build: Callable[..., Built]
    send: Callable[[ConversionUpload, Built], Answer]
    name: str
    # Dry run: a call the platform takes without acting on it (Google's
    # validate_only); None: nothing is sent at all.
    check: Callable[[ConversionUpload, Built], Answer] | None = None


def _on_call(path: str) -> Callable[..., Any]:
    """The function at `path`, imported at its first call: the Google Ads
    libraries take seconds to load, and every process (each web worker,
    cluster and command) imports this module at startup."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return import_string(path)(*args, **kwargs)

    return call


_GOOGLE, _DATA_MANAGER = "agents.conversions.google", "agents.conversions.data_manager"
PLATFORMS = {
    ConversionPlatform.GOOGLE: Platform(
        _on_call(f"{_GOOGLE}.google_build"), _on_call(f"{_GOOGLE}.google_send"), "Google Ads"
    ),
    ConversionPlatform.META: Platform(meta_build, meta_send, "Meta"),
}
# A Google account whose `api` is data_manager.
DATA_MANAGER = Platform(
    _on_call(f"{_DATA_MANAGER}.data_manager_build"),
    _on_call(f"{_DATA_MANAGER}.data_manager_send"),
    "Google Ads (Data Manager API)",
    _on_call(f"{_DATA_MANAGER}.data_manager_check"),
)


def platform_of(upload: ConversionUpload) -> Platform:
    """The platform path an upload goes by: its account's, read at each try
    (an account switched to another API sends its pending uploads there)."""
    if google_api(upload.account) == DATA_MANAGER_API:
        return DATA_MANAGER
    return PLATFORMS[ConversionPlatform(upload.platform)]


def conversions_mode() -> str:
    return str(settings.CONVERSIONS_MODE)


# The wait after the n-th passing failure, and after Google's n-th "not yet".
RETRY = Backoff(first=BACKOFF_FIRST, cap=BACKOFF_CAP, factor=BACKOFF_FACTOR, jitter=JITTER)
NOT_YET = Backoff(first=NOT_YET_FIRST, cap=NOT_YET_CAP, factor=2, jitter=JITTER)


# --- claiming ---------------------------------------------------------------------------

_CLAIM_SQL = """
UPDATE crm_conversionupload SET status = 'sending', attempts = attempts + 1, claimed_at = %(now)s
WHERE id = (
    SELECT u.id FROM crm_conversionupload AS u
    WHERE u.status = 'pending' AND u.next_attempt_at <= %(now)s
      AND (u.restates_id IS NULL OR EXISTS (
          SELECT 1 FROM crm_conversionupload AS p
          WHERE p.id = u.restates_id AND p.status IN ('sent', 'failed', 'skipped', 'dry_run')))
    ORDER BY u.next_attempt_at, u.id
    LIMIT 1
    FOR UPDATE OF u SKIP LOCKED
) AND status = 'pending'
RETURNING id, attempts
"""


def upload_claim(*, now: datetime) -> tuple[int, int] | None:
    """Claim the next due upload: (id, its attempt number), or None. One
    statement in autocommit: every other worker sees the claim at once."""
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, {"now": now})
        row = cursor.fetchone()
    return (row[0], row[1]) if row else None


# --- one attempt ------------------------------------------------------------------------


def upload_attempt(upload_id: int, number: int, *, now: datetime) -> str:
    """Make attempt `number` of a claimed upload and record it; returns the
    upload's status afterwards ("stale" when its claim was taken back)."""
    upload = ConversionUpload.objects.select_related("account", "business", "lead__contact", "touch", "restates").get(
        pk=upload_id
    )
    platform = platform_of(upload)
    try:
        built = platform.build(upload, now=now)
    except Skip as skip:
        return _record(upload, number, Answer("skipped", "", str(skip)), None, now=now)
    except Exception as exc:  # a record it cannot build from: a passing failure, visible, never a stuck claim
        log.exception("conversion upload %s: the request could not be built", upload.public_id)
        return _record(upload, number, Answer("retry", type(exc).__name__, str(exc)[:500]), None, now=now)
    send = platform.send if conversions_mode() == "live" else platform.check
    if send is None:
        answer = Answer("dry_run", "", f"dry run: nothing sent to {platform.name}")
        return _record(upload, number, answer, built, now=now)
    try:
        answer = send(upload, built)
    except Exception as exc:  # a bug or an SDK surprise: recorded as a passing failure, never a lost claim
        log.exception("conversion upload %s: the send raised", upload.public_id)
        answer = Answer("retry", type(exc).__name__, str(exc)[:500])
    return _record(upload, number, answer, built, now=now)


def _claimed(upload: ConversionUpload, number: int) -> Any:
    # This worker's claim only: one the sweep took back has moved on.
    return ConversionUpload.objects.filter(pk=upload.pk, status=ConversionUpload.Status.SENDING, attempts=number)


def _record(upload: ConversionUpload, number: int, answer: Answer, built: Built | None, *, now: datetime) -> str:
    fields: dict[str, Any] = {"last_code": answer.code[:120], "last_error": answer.message[:500]}
    if built is not None:
        fields.update(payload=built.payload, value_amount=built.value, currency=built.currency)
    fields["response"] = answer.response
    outcome = answer.outcome
    status = {
        "sent": ConversionUpload.Status.SENT,
        "failed": ConversionUpload.Status.FAILED,
        "skipped": ConversionUpload.Status.SKIPPED,
        "dry_run": ConversionUpload.Status.DRY_RUN,
    }.get(outcome, ConversionUpload.Status.PENDING)
    if outcome == "not_yet":
        due = now + NOT_YET.delay(max(upload.attempts - upload.errors, 1))
        ends = upload.window_ends_at
        if ends is not None and answer.processing:
            ends += PROCESSING_GRACE
        if ends is None or due > ends:
            status = ConversionUpload.Status.FAILED
            why = (
                f"still not processed {PROCESSING_GRACE.days} days after the click's 90-day window ended"
                if answer.processing
                else "still not found when the click's 90-day window ended"
            )
            fields["last_error"] = f"{answer.message} ({why})"[:500]
        else:
            fields["next_attempt_at"] = due
    elif outcome == "retry":
        errors = upload.errors + 1
        fields["errors"] = F("errors") + 1
        if errors >= upload.error_limit:
            status = ConversionUpload.Status.FAILED
            fields["last_error"] = f"{answer.message} (after {errors} failed tries)"[:500]
        else:
            fields["next_attempt_at"] = now + RETRY.delay(errors)
    if status == ConversionUpload.Status.SENT:
        fields["sent_at"] = now
    elif status == ConversionUpload.Status.DRY_RUN:
        fields["sent_at"] = None
    with transaction.atomic():
        if not _claimed(upload, number).update(status=status, claimed_at=None, **fields):
            return "stale"
        ConversionAttempt.objects.create(
            upload=upload,
            number=number,
            at=now,
            outcome=outcome,
            code=answer.code[:120],
            message=answer.message[:500],
            duration_ms=answer.duration_ms or None,
            response=answer.response,
        )
        if status in ConversionUpload.FINAL:
            _finished(upload, status, fields.get("last_error", ""), built)
    return status


def _finished(upload: ConversionUpload, status: str, why: str, built: Built | None) -> None:
    after: dict[str, Any] = {"status": status, "kind": upload.kind, "platform": upload.platform}
    if built is not None and built.value is not None:
        after.update(value=str(built.value), currency=built.currency)
    receipt_write(
        business=upload.business,
        lead=upload.lead,
        subject=upload.public_id,
        actor=ACTOR,
        action=f"conversion.{status}",
        reason=why[:300],
        before={"status": ConversionUpload.Status.SENDING},
        after=after,
    )
    if status == ConversionUpload.Status.FAILED:
        platform = platform_of(upload).name
        conversion_failed_open(
            upload, f"{platform} did not take {upload.kind} of {upload.lead.public_id} ({upload.public_id}): {why}"
        )
    elif status == ConversionUpload.Status.SENT:
        conversion_failed_resolve(upload, actor=ACTOR)  # a replay went through: its item is settled


# --- running ------------------------------------------------------------------------------


def pump_enqueue() -> None:
    """An upload run on the outbound cluster's queue, after the caller's commit."""
    task_enqueue(PUMP_FUNC, group="conversions", save=False, cluster=settings.WEBHOOKS_CLUSTER)


def conversions_pump(*, now: datetime | None = None, seconds: float = PUMP_SECONDS) -> dict[str, int]:
    """Number new events (making their uploads), then send what is due until
    nothing is or `seconds` have passed (then a fresh run is enqueued). `now`
    fixes the clock claims and retries go by (tests)."""
    clock: Callable[[], datetime] = (lambda: now) if now is not None else timezone.now
    counts = {"sequenced": outbox_sequence_all()}

    def refill() -> bool:
        numbered = outbox_sequence_all()  # events committed since the run began
        counts["sequenced"] += numbered
        return bool(numbered)

    run = pump(
        lambda: upload_claim(now=clock()),
        lambda claimed: upload_attempt(*claimed, now=clock()),
        seconds=seconds,
        refill=refill,
    )
    if not run.finished:
        pump_enqueue()
    return {**counts, **run.outcomes}


def _lost_claims(now: datetime) -> int:
    """Uploads whose worker died between claim and record: the try counts as
    a passing failure (the platform may have it: the retry says the same key)."""
    why = "the worker stopped before the answer was recorded"

    def take_back(upload: ConversionUpload) -> bool:
        number = upload.attempts
        errors = upload.errors + 1
        out = errors >= upload.error_limit
        moved = (
            _claimed(upload, number)
            .filter(claimed_at=upload.claimed_at)
            .update(
                status=ConversionUpload.Status.FAILED if out else ConversionUpload.Status.PENDING,
                errors=F("errors") + 1,
                claimed_at=None,
                next_attempt_at=now + RETRY.delay(errors),
                last_error=why,
            )
        )
        if moved:
            ConversionAttempt.objects.create(upload=upload, number=number, at=now, outcome=Outcome.LOST, message=why)
            if out:
                _finished(upload, ConversionUpload.Status.FAILED, why, None)
        return bool(moved)

    rows = ConversionUpload.objects.select_related("business", "lead")
    return claims_take_back(
        rows, claimed=ConversionUpload.Status.SENDING, now=now, after=STALE_CLAIM, take_back=take_back
    )


def conversions_sweep(*, now: datetime | None = None, seconds: float = PUMP_SECONDS) -> dict[str, int]:
    """The periodic job: take back dead workers' claims, then send what is due."""
    counts = {"lost": _lost_claims(now or timezone.now())}
    counts.update(conversions_pump(now=now, seconds=seconds))
    return counts


def register() -> None:
    CONVERSIONS_WAKE.register("conversions", pump_enqueue)
