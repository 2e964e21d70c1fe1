"""The sync engine: one mechanism for every system of record a contractor
runs. Adapters (agents/sync/base.py) speak each provider's API; the engine
owns the rest.

- **Changes are rows.** A push is a `SyncChange` written in the transaction
  of the booking that causes it (crm.services.sync); a pull is one written
  when a webhook names a record of theirs. The pump claims one (a
  conditional UPDATE of the first due row no other worker has locked, SKIP
  LOCKED), works it outside any transaction, and records the outcome on its
  own claim only; the sweep takes back the claims of dead workers
  (crm/work_queue.py). A change whose connection is throttled or waiting
  for a person is not claimed: it waits, counted as waiting.
- **Idempotency.** A push's key (`booking:<appointment>`) is unique per
  connection. The person and the booking it makes over there are links
  (crm.models.SyncLink): the first worker inserts the link claimed, calls
  the provider, and records the id; a second worker racing for the same
  person meets the unique row and waits (`RetryLater`) for that id, so two
  bookings of one person make one client and one request. The adapter finds
  before it creates, so a retry after a lost answer finds what the first
  try made.
- **Pulls** read their record as it is now (a webhook carries only ids) and
  apply it (agents/sync/apply.py): the version rule, the conflict rule,
  parents read first when missing (a visit before its job), receipts.
- **The reconcile loop** reads, per connection and kind, the records changed
  since the stream's cursor, page by page (`SyncConnection.cursors`): what
  a lost webhook left out arrives this way. The cursor moves after the page
  it read is applied, so a crash reads the page again and applying it again
  changes nothing.
- **Tokens.** A token about to expire is refreshed by one worker at a time
  (a claimed refresh: rotation kills the old refresh token at first use).
  A refused refresh or a revoked grant stops the connection for a person:
  status `reauthorize` and an exception item for the business's manager,
  never a silent fallback; its changes wait and go once it is connected
  again.
- **Calendars.** A Google or Microsoft calendar is one team member's
  connection (`SyncConnection.member`): the visits assigned to them are
  pushed as events (made once, moved with a reschedule, deleted with a
  cancellation); its busy blocks are read at most every BUSY_EVERY and on
  each notification, and take the member off the slots; its push channel
  is renewed before it expires. A notification is a pull without a record:
  the stream is read from its cursor (a moved or deleted event moves or
  cancels our visit through the visit mapper) and the busy times again.
- **The provider's budget.** `Throttled` sets the connection's
  `throttled_until`: its changes and its reconcile wait until then. Nothing
  sleeps in a request or a worker.

It runs on the outbound cluster (settings.WEBHOOKS_CLUSTER), beside
webhooks and conversion uploads: a slow provider never holds a worker that
processes leads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import requests
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.queue import task_enqueue
from agents.sync.adapters import INSTALLED
from agents.sync.apply import Missing, apply_gone, apply_remote, ours_of, version_newer
from agents.sync.base import (
    ADAPTERS,
    VISIT,
    AuthRefused,
    Channel,
    PullAsk,
    PushBooking,
    Pushed,
    PushPerson,
    Refused,
    Session,
    SyncAdapter,
    SyncError,
    Throttled,
    TokenExpired,
)
from agents.sync.calendar_hooks import calendar_hooks_register
from agents.sync.webhooks import notices_register
from crm.models import Appointment, SyncChange, SyncConnection, SyncLink
from crm.services.inbound_handlers import RetryLater
from crm.services.receipts import receipt_write
from crm.services.sync import (
    CANCEL,
    FAILED_EXCEPTION,
    SYNC_PUSHES,
    SYNC_WAKE,
    calendar_busy_failed,
    calendar_busy_store,
    connection_needs_person,
    digest,
    exception_open,
    exceptions_resolve,
    link_of,
    sync_pull_enqueue,
)
from crm.work_queue import Backoff, claims_take_back, pump

log = logging.getLogger(__name__)
T = TypeVar("T")

ACTOR = "agent:sync"
PUMP_FUNC = "agents.tasks.sync_pump"
PUMP_SECONDS = 40
# A change `working` this long lost its worker (a call gives up after 15 s).
STALE_CLAIM = timedelta(minutes=3)
# A link claimed this long without its id lost its worker: another may take it.
STALE_LINK = timedelta(minutes=3)
STALE_REFRESH = timedelta(minutes=1)
# An access token this close to its end is refreshed before it is used.
REFRESH_AHEAD = timedelta(minutes=2)
# Passing failures: 1 min, 4, 16, 64 min, then 4 h and 6 h, ±10%.
RETRY = Backoff(first=timedelta(minutes=1), cap=timedelta(hours=6), factor=4)
# Waiting for something of ours in flight (a client being made): short and growing.
WAIT = Backoff(first=timedelta(seconds=10), cap=timedelta(minutes=10), factor=2)
MAX_ERRORS = 10
# A parent read first (a visit's job, the job's client…), at most this deep.
MISSING_DEPTH = 4
# Each stream is read again at most this often, a bounded number of pages a run.
RECONCILE_EVERY = timedelta(minutes=15)
RECONCILE_PAGES = 10
# A new connection's streams start this long before it was made.
RECONCILE_BACKFILL = timedelta(days=1)
# A calendar's busy times are read again at most this often without a
# notification, over the days slots are offered (and one more).
BUSY_EVERY = timedelta(minutes=5)
BUSY_AHEAD = timedelta(days=15)
# A calendar's push channel is renewed this long before it expires.
CHANNEL_RENEW_AHEAD = timedelta(hours=12)


def adapter_register(adapter: SyncAdapter) -> None:
    """Everything a provider plugs in, from its adapter: its API, the
    changes of ours it takes, and its webhooks' processing."""
    ADAPTERS.register(adapter.provider, adapter)
    SYNC_PUSHES.register(adapter.provider, adapter.pushes)
    notices_register(adapter)


def pump_enqueue() -> None:
    """A sync run on the outbound cluster's queue, after the caller's commit."""
    task_enqueue(PUMP_FUNC, group="sync", save=False, cluster=settings.WEBHOOKS_CLUSTER)


def register() -> None:
    for adapter in INSTALLED:
        adapter_register(adapter)
    calendar_hooks_register()
    SYNC_WAKE.register("sync", pump_enqueue)


# --- tokens -----------------------------------------------------------------------------------


def _fresh(conn: SyncConnection, now: datetime) -> bool:
    return bool(conn.access_token) and (conn.token_expires_at is None or conn.token_expires_at > now + REFRESH_AHEAD)


def session_open(conn: SyncConnection, *, refused: str = "") -> Session:
    """An authenticated session for the connection: its access token, or a
    new one when it is about to expire (or is `refused`, the token the
    provider just turned down). One worker refreshes at a time; the others
    wait (`RetryLater`) and then use what it stored."""
    now = timezone.now()
    if conn.status != SyncConnection.Status.ACTIVE:
        raise RetryLater(f"the connection is {conn.status}: it waits for a person to connect it again")
    adapter = ADAPTERS[conn.provider]
    if adapter.connects_with == "api_key":
        # A pasted key never expires and has no refresh: refused, it is gone
        # for good, and a person pastes a new one.
        if not conn.access_token or conn.access_token == refused:
            why = f"{adapter.name} refused the API key: paste a new one"
            connection_needs_person(conn, status=SyncConnection.Status.REAUTHORIZE, why=why, actor=ACTOR)
            raise AuthRefused(why)
        return Session(conn, conn.access_token, requests.Session())
    if _fresh(conn, now) and conn.access_token != refused:
        return Session(conn, conn.access_token, requests.Session())
    claimed = (
        SyncConnection.objects.filter(pk=conn.pk, status=SyncConnection.Status.ACTIVE)
        .filter(Q(refresh_claimed_at__isnull=True) | Q(refresh_claimed_at__lt=now - STALE_REFRESH))
        .update(refresh_claimed_at=now)
    )
    if not claimed:
        raise RetryLater("another worker is refreshing the connection's tokens")
    conn.refresh_from_db()
    if _fresh(conn, now) and conn.access_token != refused:
        # Refreshed by another worker between our read and our claim.
        SyncConnection.objects.filter(pk=conn.pk, refresh_claimed_at=now).update(refresh_claimed_at=None)
        return Session(conn, conn.access_token, requests.Session())
    try:
        tokens = adapter.tokens_refresh(conn.refresh_token)
    except AuthRefused as exc:
        connection_needs_person(conn, status=SyncConnection.Status.REAUTHORIZE, why=str(exc), actor=ACTOR)
        raise
    except BaseException:
        SyncConnection.objects.filter(pk=conn.pk, refresh_claimed_at=now).update(refresh_claimed_at=None)
        raise
    # Stored at once, alone: the old refresh token is dead from here on.
    SyncConnection.objects.filter(pk=conn.pk, refresh_claimed_at=now).update(
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token,
        token_expires_at=tokens.expires_at,
        refresh_claimed_at=None,
        updated_at=timezone.now(),
    )
    conn.access_token, conn.refresh_token, conn.token_expires_at = (
        tokens.access_token,
        tokens.refresh_token,
        tokens.expires_at,
    )
    return Session(conn, conn.access_token, requests.Session())


def with_session(conn: SyncConnection, work: Callable[[Session], T]) -> T:
    """`work(session)`; an access token refused mid-way is refreshed once
    and the work tried again. Refused twice: the grant is gone."""
    session = session_open(conn)
    try:
        return work(session)
    except TokenExpired:
        session.http.close()
        # An API key refused: session_open stops the connection (nothing to refresh).
        session = session_open(conn, refused=session.access_token)
        try:
            return work(session)
        except TokenExpired as exc:
            why = f"{conn.provider} refused a freshly refreshed access token"
            connection_needs_person(conn, status=SyncConnection.Status.REAUTHORIZE, why=why, actor=ACTOR)
            raise AuthRefused(why) from exc
    finally:
        session.http.close()


# --- claiming and recording ---------------------------------------------------------------------

_CLAIM_SQL = """
UPDATE crm_syncchange SET status = 'working', attempts = attempts + 1, claimed_at = %(now)s
WHERE id = (
    SELECT c.id FROM crm_syncchange AS c JOIN crm_syncconnection AS s ON s.id = c.connection_id
    WHERE c.status = 'pending' AND c.next_attempt_at <= %(now)s
      AND s.status = 'active' AND (s.throttled_until IS NULL OR s.throttled_until <= %(now)s)
    ORDER BY c.next_attempt_at, c.id
    LIMIT 1
    FOR UPDATE OF c SKIP LOCKED
) AND status = 'pending'
RETURNING id, attempts
"""


def change_claim(*, now: datetime) -> tuple[int, int] | None:
    """Claim the next due change of a connection that may be asked: (id,
    its attempt number), or None. One statement in autocommit."""
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, {"now": now})
        row = cursor.fetchone()
    return (row[0], row[1]) if row else None


def _claimed(change: SyncChange, number: int) -> Any:
    # This worker's claim only: one the sweep took back has moved on.
    return SyncChange.objects.filter(pk=change.pk, status=SyncChange.Status.WORKING, attempts=number)


def change_work(change_id: int, number: int, *, now: datetime) -> str:
    """Work attempt `number` of a claimed change and record it; returns the
    change's status afterwards ("stale" when its claim was taken back)."""
    change = SyncChange.objects.select_related("connection__business", "business").get(pk=change_id)
    conn = change.connection
    try:
        if change.direction == SyncChange.Direction.PUSH:
            outcome = with_session(conn, lambda session: _push(session, change))
        elif not change.external_id:
            # A calendar's notification names no event: what changed is read from the stream's cursor.
            outcome = calendar_changes(conn, now=now)
        else:
            outcome = with_session(conn, lambda session: _pull(session, change.kind, change.external_id, 0))
    except Throttled as exc:
        until = now + exc.wait
        SyncConnection.objects.filter(pk=conn.pk).update(throttled_until=until)
        return _record(change, number, SyncChange.Status.PENDING, f"throttled: {exc}", now=now, due=until)
    except AuthRefused as exc:
        # Not the change's fault: it waits for the connection (not claimed until then).
        connection_needs_person(conn, status=SyncConnection.Status.REAUTHORIZE, why=str(exc), actor=ACTOR)
        return _record(change, number, SyncChange.Status.PENDING, f"waiting for a person: {exc}", now=now, due=now)
    except Refused as exc:
        return _record(change, number, SyncChange.Status.FAILED, str(exc), now=now, error=True)
    except (RetryLater, SyncError) as exc:
        waiting = isinstance(exc, RetryLater)
        return _retry(change, number, str(exc), now=now, waiting=waiting)
    except Exception as exc:  # a bug or a surprise: a passing failure, visible, never a stuck claim
        log.exception("sync change %s raised", change.public_id)
        return _retry(change, number, f"{type(exc).__name__}: {exc}", now=now, waiting=False)
    return _record(change, number, SyncChange.Status.DONE, outcome, now=now)


def _retry(change: SyncChange, number: int, why: str, *, now: datetime, waiting: bool) -> str:
    errors = change.errors + 1
    if errors >= MAX_ERRORS:
        return _record(change, number, SyncChange.Status.FAILED, f"{why} (after {errors} tries)", now=now, error=True)
    due = now + (WAIT if waiting else RETRY).delay(errors)
    return _record(change, number, SyncChange.Status.PENDING, why, now=now, due=due, error=True)


def _record(
    change: SyncChange,
    number: int,
    status: str,
    text: str,
    *,
    now: datetime,
    due: datetime | None = None,
    error: bool = False,
) -> str:
    fields: dict[str, Any] = {"status": status, "claimed_at": None}
    if status == SyncChange.Status.DONE:
        fields.update(outcome=text[:300], done_at=now, last_error="")
    else:
        fields["last_error"] = text[:500]
    if error:
        fields["errors"] = F("errors") + 1
    if due is not None:
        fields["next_attempt_at"] = due
    conn = change.connection
    with transaction.atomic():
        if not _claimed(change, number).update(**fields):
            return "stale"
        if status == SyncChange.Status.DONE:
            SyncConnection.objects.filter(pk=conn.pk).update(last_success_at=now)
        elif error:
            SyncConnection.objects.filter(pk=conn.pk).update(last_error=text[:500], last_error_at=now)
        if status == SyncChange.Status.FAILED:
            receipt_write(
                business=change.business,
                lead=change.lead,
                subject=change.public_id,
                actor=ACTOR,
                action="sync.failed",
                reason=text[:300],
                before={"status": SyncChange.Status.WORKING},
                after={"status": "failed", "provider": conn.provider, "direction": change.direction},
            )
            what = change.record or f"{change.kind} {change.external_id}"
            exception_open(
                conn,
                kind=FAILED_EXCEPTION,
                subject=change.public_id,
                detail=f"{conn.provider} {change.direction} of {what} failed: {text}",
            )
    return status


def _lost_claims(now: datetime) -> int:
    """Changes whose worker died between claim and record: tried again (a
    push finds what the lost try made: adapters find before they create)."""
    why = "the worker stopped before the outcome was recorded"

    def take_back(change: SyncChange) -> bool:
        return bool(
            _claimed(change, change.attempts)
            .filter(claimed_at=change.claimed_at)
            .update(
                status=SyncChange.Status.PENDING,
                claimed_at=None,
                errors=F("errors") + 1,
                next_attempt_at=now + RETRY.delay(change.errors + 1),
                last_error=why,
            )
        )

    return claims_take_back(
        SyncChange.objects.all(), claimed=SyncChange.Status.WORKING, now=now, after=STALE_CLAIM, take_back=take_back
    )


def change_replay(change: SyncChange, *, actor: str) -> bool:
    """A failed change tried again from now, with a fresh allowance; its
    exception item resolved. False for one that is not failed."""
    moved = SyncChange.objects.filter(pk=change.pk, status=SyncChange.Status.FAILED).update(
        status=SyncChange.Status.PENDING, errors=0, next_attempt_at=timezone.now(), last_error=""
    )
    if moved:
        exceptions_resolve(change.connection, kind=FAILED_EXCEPTION, subject=change.public_id, actor=actor)
        pump_enqueue()
    return bool(moved)


# --- pushing ------------------------------------------------------------------------------------


def _push(session: Session, change: SyncChange) -> str:
    appointment = (
        Appointment.objects.select_related("lead__contact", "lead__service_line", "lead__business")
        .filter(business_id=change.business_id, public_id=change.record)
        .first()
    )
    if appointment is None:
        return f"skipped: {change.record} is not an appointment of this business"
    adapter = ADAPTERS[session.connection.provider]
    if adapter.booking_kind == VISIT:
        return _push_visit(session, adapter, change, appointment)
    lead, contact = appointment.lead, appointment.lead.contact
    client_id = ""
    if adapter.person_kind is not None:
        points = list(contact.points.filter(is_valid=True).values_list("kind", "value"))
        person = PushPerson(
            record=contact.public_id,
            first_name=contact.first_name,
            last_name=contact.last_name,
            emails=tuple(v for k, v in points if k == "email"),
            phones=tuple(v for k, v in points if k == "phone"),
            address=", ".join(part for part in (contact.address, contact.postal_code) if part),
        )
        client_id = _ensure(session, adapter.person_kind, contact.public_id, None, person, ours_of("client", contact))
    service = lead.service_line.name if lead.service_line else "Service request"
    # The visit's time as the shop reads it, in its own zone.
    local = appointment.starts_at.astimezone(ZoneInfo(lead.business.timezone))
    booking = PushBooking(
        record=lead.public_id,
        client_id=client_id,
        title=f"{service}: visit {local:%a %d %b %Y %H:%M %Z} (LeadOps {lead.public_id})",
        starts_at=appointment.starts_at,
        ends_at=appointment.ends_at,
        location=appointment.location,
        notes=appointment.notes,
    )
    request_id = _ensure(session, adapter.booking_kind, lead.public_id, lead, booking, {})
    return f"{adapter.booking_kind} {request_id} for {lead.public_id}" + (f", client {client_id}" if client_id else "")


def _push_visit(session: Session, adapter: SyncAdapter, change: SyncChange, appointment: Appointment) -> str:
    """A visit of ours as an event in a person's calendar: made once (the
    link is the appointment's), moved when ours was rescheduled from one it
    made (the link follows the new appointment), deleted when ours was
    canceled."""
    conn, lead = session.connection, appointment.lead
    if change.kind == CANCEL:
        link = link_of(conn, VISIT, record=appointment.public_id)
        if link is None or not link.external_id:
            return f"skipped: {appointment.public_id} made no event in {conn.provider}"
        adapter.remove(session, link.external_id)
        _pushed_receipt(conn, lead, appointment.public_id, f"event {link.external_id} deleted", link.external_id)
        return f"event {link.external_id} deleted"
    service = lead.service_line.name if lead.service_line else "Service visit"
    name = " ".join(part for part in (lead.contact.first_name, lead.contact.last_name) if part)
    booking = PushBooking(
        record=appointment.public_id,
        client_id="",
        title=f"{service}: {name}" if name else service,
        starts_at=appointment.starts_at,
        ends_at=appointment.ends_at,
        location=appointment.location or ", ".join(p for p in (lead.contact.address, lead.contact.postal_code) if p),
        notes=appointment.notes,
        link=f"{settings.PUBLIC_BASE_URL}/app/leads/{lead.public_id}/",
    )
    old = appointment.rescheduled_from
    moved = link_of(conn, VISIT, record=old.public_id) if old is not None else None
    if moved is not None and moved.external_id:
        pushed = adapter.move(session, moved.external_id, booking)
        SyncLink.objects.filter(pk=moved.pk).update(
            record=appointment.public_id,
            remote_version=pushed.version,
            local_digest=digest(ours_of(VISIT, appointment)),
            synced_at=timezone.now(),
        )
        _pushed_receipt(conn, lead, appointment.public_id, f"event {moved.external_id} moved", moved.external_id)
        return f"event {moved.external_id} moved to {appointment.public_id}"
    event_id = _ensure(session, VISIT, appointment.public_id, lead, booking, ours_of(VISIT, appointment))
    return f"event {event_id} for {appointment.public_id}"


def _pushed_receipt(conn: SyncConnection, lead: Any, record: str, reason: str, external_id: str) -> None:
    receipt_write(
        business=conn.business,
        lead=lead,
        subject=record,
        actor=f"{ACTOR}:{conn.provider}",
        action="sync.pushed",
        reason=reason,
        after={"provider": conn.provider, "kind": VISIT, "external_id": external_id},
    )


def _ensure(
    session: Session,
    kind: str,
    record: str,
    lead: Any,
    item: PushPerson | PushBooking,
    ours: dict[str, Any],
) -> str:
    """Their id for our record: the link's, else made there once. The link
    row is claimed first (its unique (connection, kind, record) lets one
    worker through), the provider is called outside any transaction, and
    the id recorded on that claim only."""
    conn = session.connection
    link = _link_claim(conn, kind, record, lead)
    if link.external_id:
        return link.external_id
    adapter = ADAPTERS[conn.provider]
    try:
        pushed: Pushed = adapter.push(session, item)
    except BaseException:
        SyncLink.objects.filter(pk=link.pk, external_id__isnull=True, claimed_at=link.claimed_at).delete()
        raise
    now = timezone.now()
    try:
        with transaction.atomic():
            recorded = SyncLink.objects.filter(pk=link.pk, claimed_at=link.claimed_at).update(
                external_id=pushed.external_id,
                remote_version=pushed.version,
                local_digest=digest(ours),
                claimed_at=None,
                synced_at=now,
            )
            if not recorded:
                raise RetryLater(f"the claim on our {kind} link was taken over")
            receipt_write(
                business=conn.business,
                lead=lead,
                subject=record,
                actor=f"{ACTOR}:{conn.provider}",
                action="sync.pushed",
                reason=f"{kind} {pushed.external_id} in {conn.provider}",
                after={"provider": conn.provider, "kind": kind, "external_id": pushed.external_id},
            )
    except IntegrityError:
        # Their record is another record's of ours already (one client of
        # theirs for two contacts of ours): used, and left linked to the first.
        SyncLink.objects.filter(pk=link.pk, external_id__isnull=True).delete()
    return pushed.external_id


def _link_claim(conn: SyncConnection, kind: str, record: str, lead: Any) -> SyncLink:
    now = timezone.now()
    try:
        with transaction.atomic():
            return SyncLink.objects.create(connection=conn, kind=kind, record=record, lead=lead, claimed_at=now)
    except IntegrityError:
        pass
    link = SyncLink.objects.get(connection=conn, kind=kind, record=record)
    if link.external_id:
        return link
    if link.claimed_at is not None and link.claimed_at > now - STALE_LINK:
        raise RetryLater(f"another push is making this {kind} in {conn.provider} right now")
    # Its worker died mid-push: take the claim over (the adapter finds what it may have made).
    if not SyncLink.objects.filter(pk=link.pk, external_id__isnull=True, claimed_at=link.claimed_at).update(
        claimed_at=now
    ):
        raise RetryLater(f"another push took over this {kind}")
    link.claimed_at = now
    return link


# --- pulling --------------------------------------------------------------------------------------


def _pull(session: Session, kind: str, external_id: str, depth: int) -> str:
    """Read one record of theirs and apply it; a parent it hangs from that
    is not here yet is read first."""
    adapter = ADAPTERS[session.connection.provider]
    page = adapter.pull(session, PullAsk(kind, external_id=external_id))
    if not page.items or page.items[0].gone:
        return apply_gone(session.connection, kind, external_id)
    remote = page.items[0]
    for _ in range(MISSING_DEPTH):
        try:
            return apply_remote(session.connection, remote)
        except Missing as missing:
            if depth >= MISSING_DEPTH:
                raise RetryLater(f"{missing} (read {depth} parents deep)") from missing
            _pull(session, missing.kind, missing.external_id, depth + 1)
    raise RetryLater(f"{kind} {external_id}: its parents are still not all here")


def reconcile(
    conn: SyncConnection, *, now: datetime, pages: int = RECONCILE_PAGES, every: timedelta = RECONCILE_EVERY
) -> int:
    """Read each stream of the connection from its cursor, at most `pages`
    pages, applying what changed; returns how many records were read. A
    record that cannot be applied yet (a parent missing) becomes a pull of
    its own, which reads its parents first. Read at most once per `every`."""
    adapter = ADAPTERS[conn.provider]
    claimed = (
        SyncConnection.objects.filter(pk=conn.pk, status=SyncConnection.Status.ACTIVE)
        .filter(Q(reconciled_at__isnull=True) | Q(reconciled_at__lte=now - every))
        .filter(Q(throttled_until__isnull=True) | Q(throttled_until__lte=now))
        .update(reconciled_at=now)
    )
    if not claimed:
        return 0
    read = 0
    start = (conn.created_at - RECONCILE_BACKFILL).isoformat()

    def streams(session: Session) -> int:
        nonlocal pages
        count = 0
        for kind in adapter.pulls:
            cursor = dict(conn.cursors.get(kind) or {})
            while pages > 0:
                pages -= 1
                since = str(cursor.get("since") or start)
                page = adapter.pull(session, PullAsk(kind, since=since, after=str(cursor.get("after") or "")))
                newest = since
                for remote in page.items:
                    count += 1
                    try:
                        if remote.gone:
                            apply_gone(conn, kind, remote.external_id)
                        else:
                            apply_remote(conn, remote)
                    except (Missing, RetryLater, IntegrityError):
                        # A parent first, or a worker on it now: a pull of its own does it.
                        sync_pull_enqueue(conn, kind=kind, external_id=remote.external_id)
                    except Exception:
                        # One record that breaks stops neither the page nor the cursor:
                        # its pull retries it and, failing, shows it to a person.
                        log.exception("sync: %s %s could not be applied", kind, remote.external_id)
                        sync_pull_enqueue(conn, kind=kind, external_id=remote.external_id)
                    if version_newer(remote.version, newest):
                        newest = remote.version
                if page.more:
                    cursor = {"since": since, "after": page.cursor}
                else:
                    cursor = {"since": page.since or newest, "after": ""}
                _cursor_move(conn, kind, cursor)
                if not page.more:
                    break
        return count

    try:
        read = with_session(conn, streams)
    except Throttled as exc:
        SyncConnection.objects.filter(pk=conn.pk).update(throttled_until=now + exc.wait)
        return read
    except (RetryLater, SyncError) as exc:
        SyncConnection.objects.filter(pk=conn.pk).update(last_error=f"reconcile: {exc}"[:500], last_error_at=now)
        return read
    SyncConnection.objects.filter(pk=conn.pk).update(last_success_at=timezone.now())
    return read


def _cursor_move(conn: SyncConnection, kind: str, cursor: dict[str, str]) -> None:
    """One stream's cursor, set in place (the other streams' are left as
    they are in the row, whatever this worker read before)."""
    with transaction.atomic():
        locked = SyncConnection.objects.select_for_update().get(pk=conn.pk)
        locked.cursors = {**locked.cursors, kind: cursor}
        SyncConnection.objects.filter(pk=conn.pk).update(cursors=locked.cursors)
        conn.cursors = locked.cursors


# --- calendars ----------------------------------------------------------------------------------


def calendar_changes(conn: SyncConnection, *, now: datetime) -> str:
    """A calendar said something changed: its events read from the
    stream's cursor (a moved or deleted event moves or cancels our visit),
    and its busy times read again."""
    read = reconcile(conn, now=now, every=timedelta(0))
    refreshed = calendar_busy_refresh(conn, now=now, force=True)
    conn.refresh_from_db(fields=["last_error"])
    if not refreshed:
        raise SyncError(f"busy times not read: {conn.last_error}")
    return f"{read} events read; busy times read"


def calendar_busy_refresh(conn: SyncConnection, *, now: datetime, force: bool = False) -> bool:
    """A person's calendar busy blocks, read again when older than
    BUSY_EVERY (or `force`). A failure is never silent: the connection
    says it, the manager and the person get an item, and a refused grant
    stops the connection for a person (session_open)."""
    if not force and conn.busy_checked_at is not None and conn.busy_checked_at > now - BUSY_EVERY:
        return False
    adapter = ADAPTERS[conn.provider]
    try:
        blocks = with_session(conn, lambda session: adapter.busy(session, now, now + BUSY_AHEAD))
    except RetryLater as exc:
        if conn.status == SyncConnection.Status.ACTIVE:
            return False  # another worker is refreshing the tokens: the next run reads
        calendar_busy_failed(conn, why=str(exc), now=now)
        return False
    except SyncError as exc:
        calendar_busy_failed(conn, why=str(exc) or type(exc).__name__, now=now)
        return False
    # Our own visits' events are busy there too, but each already holds its
    # place in its slot here (a rule's capacity counts it): not counted twice.
    ours = set(
        Appointment.objects.filter(
            business_id=conn.business_id,
            assigned_to_id=conn.member_id,
            status__in=(Appointment.Status.SCHEDULED, Appointment.Status.CONFIRMED),
        ).values_list("starts_at", "ends_at")
    )
    blocks = [block for block in blocks if block not in ours]
    calendar_busy_store(conn, blocks, now=now, actor=f"{ACTOR}:{conn.provider}")
    return True


def calendar_watch(conn: SyncConnection, *, now: datetime) -> bool:
    """The calendar's push channel, made or renewed before it expires
    (Google's last at most a week, Microsoft's three days). A failure is
    said on the connection; the 5-minute busy refresh goes on meanwhile."""
    if conn.channel_id and conn.channel_expires_at and conn.channel_expires_at > now + CHANNEL_RENEW_AHEAD:
        return False
    adapter = ADAPTERS[conn.provider]
    current = (
        Channel(conn.channel_id, conn.channel_token, conn.channel_resource_id, conn.channel_expires_at)
        if conn.channel_id and conn.channel_expires_at
        else None
    )
    address = f"{settings.PUBLIC_BASE_URL}/{adapter.hook_path}"
    try:
        channel = with_session(conn, lambda session: adapter.watch(session, address=address, current=current))
    except (SyncError, RetryLater) as exc:
        SyncConnection.objects.filter(pk=conn.pk).update(last_error=f"watch: {exc}"[:500], last_error_at=now)
        return False
    SyncConnection.objects.filter(pk=conn.pk).update(
        channel_id=channel.id,
        channel_token=channel.token,
        channel_resource_id=channel.resource_id,
        channel_expires_at=channel.expires_at,
        updated_at=timezone.now(),
    )
    conn.channel_id, conn.channel_token = channel.id, channel.token
    conn.channel_resource_id, conn.channel_expires_at = channel.resource_id, channel.expires_at
    return True


# --- running --------------------------------------------------------------------------------------


def sync_pump(*, now: datetime | None = None, seconds: float = PUMP_SECONDS) -> dict[str, int]:
    """Work due changes until none is or `seconds` have passed (then a
    fresh run is enqueued). `now` fixes the clock (tests)."""
    clock: Callable[[], datetime] = (lambda: now) if now is not None else timezone.now
    run = pump(lambda: change_claim(now=clock()), lambda claimed: change_work(*claimed, now=clock()), seconds=seconds)
    if not run.finished:
        pump_enqueue()
    return dict(run.outcomes)


def sync_sweep(*, now: datetime | None = None, seconds: float = PUMP_SECONDS) -> dict[str, int]:
    """The periodic job: dead workers' claims taken back, each active
    connection's streams reconciled when due, then the changes due."""
    at = now or timezone.now()
    counts = {"lost": _lost_claims(at), "reconciled": 0}
    for conn in SyncConnection.objects.select_related("business", "member").filter(status=SyncConnection.Status.ACTIVE):
        if conn.provider in ADAPTERS:
            counts["reconciled"] += reconcile(conn, now=at)
            if ADAPTERS[conn.provider].per_member:
                calendar_watch(conn, now=at)
                calendar_busy_refresh(conn, now=at)
    counts.update(sync_pump(now=now, seconds=seconds))
    return counts
