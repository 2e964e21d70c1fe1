"""Sync as records: connections, links, the changes to carry across, and the
moments of ours that make a push.

A push is a `SyncChange` row written in the transaction of the change that
causes it (`sync_changes_booked`, called by `appointment_record`, the one
writer of appointments): it exists exactly when the booking committed, and
the sweep finds it whatever happens to the process after. Which changes a
provider takes from us is its adapter's to say (`SYNC_PUSHES`, filled at
startup by agents.sync, which works the rows); crm never imports it.

A pull is a `SyncChange` too (`sync_pull_enqueue`): a webhook names a record
of theirs, and the row waits until a worker reads it. Waiting pulls of one
record coalesce into one row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from crm.models import (
    CLOSED_STAGES,
    Appointment,
    Business,
    Contact,
    ExceptionItem,
    Lead,
    SyncChange,
    SyncConnection,
    SyncLink,
    TeamMember,
)
from crm.registry import Registry
from crm.selectors import business_manager
from crm.services.on_commit import on_commit_once
from crm.services.receipts import receipt_write

# provider -> the kinds of change of ours it takes ("booking").
SYNC_PUSHES: Registry[frozenset[str]] = Registry("sync pushes")
# Called once after the commit of a transaction that wrote changes to carry
# (agents enqueues the sync pump there); the sweep works what a lost wake left.
SYNC_WAKE: Registry[Callable[[], None]] = Registry("sync wake hook")

BOOKING = "booking"
# The manager's item when a connection needs a person (tokens refused, the app removed).
RECONNECT_EXCEPTION = "sync_reconnect"
# ... and when a change failed for good.
FAILED_EXCEPTION = "sync_failed"
# ... and when a calendar's busy times could not be read: the slots offered
# may then hold times the person is busy.
BUSY_EXCEPTION = "calendar_busy_stale"
# Our visit canceled: the event it made in a calendar is deleted.
CANCEL = "cancel"


def digest(values: dict[str, Any]) -> str:
    """sha256 of mapped fields, as compared across syncs (keys sorted,
    values as JSON text: a Decimal and its string are the same value)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


# --- what makes a change -----------------------------------------------------------------


def _sync_woken() -> None:
    for hook in SYNC_WAKE.values():
        hook()


def sync_wake() -> None:
    """Wake the pump once the current transaction commits (once per transaction)."""
    on_commit_once("sync_wake", _sync_woken)


def sync_changes_booked(appointment: Appointment) -> int:
    """A visit booked here (or in a calendar that is not the provider's):
    one push per connection of the business that takes bookings, in the
    caller's transaction; returns how many. A visit a provider sent us
    (`appointment.provider`) is not pushed back to it."""
    return _changes_pushed(appointment, BOOKING)


def sync_changes_canceled(appointment: Appointment) -> int:
    """A visit of ours canceled: one push per calendar connection that took
    it (its event is deleted there), in the caller's transaction."""
    return _changes_pushed(appointment, CANCEL)


def _changes_pushed(appointment: Appointment, kind: str) -> int:
    # A calendar is one member's: it takes the visits assigned to them.
    connections = (
        SyncConnection.objects.filter(business_id=appointment.business_id)
        .filter(Q(member__isnull=True) | Q(member_id=appointment.assigned_to_id))
        .exclude(status=SyncConnection.Status.DISCONNECTED)
    )
    made = 0
    now = timezone.now()
    for connection in connections:
        if kind not in (SYNC_PUSHES.get(connection.provider) or ()):
            continue
        # A booking is not sent back where it came from; a cancellation is
        # (a visit moved in a calendar and canceled here still has its event there).
        if kind == BOOKING and connection.provider == appointment.provider:
            continue
        try:
            with transaction.atomic():
                SyncChange.objects.create(
                    business_id=appointment.business_id,
                    connection=connection,
                    direction=SyncChange.Direction.PUSH,
                    kind=kind,
                    record=appointment.public_id,
                    lead_id=appointment.lead_id,
                    key=f"{kind}:{appointment.public_id}",
                    next_attempt_at=now,
                    created_at=now,
                )
        except IntegrityError:
            continue  # the same change recorded again: its push exists
        made += 1
    if made:
        sync_wake()
    return made


def sync_pull_enqueue(connection: SyncConnection, *, kind: str, external_id: str) -> bool:
    """A record of theirs to read: one waiting pull per record (a second
    notice while one waits changes nothing: the pull reads the record as it
    is when it runs). False when one was waiting already."""
    now = timezone.now()
    try:
        with transaction.atomic():
            SyncChange.objects.create(
                business_id=connection.business_id,
                connection=connection,
                direction=SyncChange.Direction.PULL,
                kind=kind,
                external_id=external_id[:200],
                next_attempt_at=now,
                created_at=now,
            )
    except IntegrityError:
        return False
    sync_wake()
    return True


# --- links ----------------------------------------------------------------------------------


def link_of(connection: SyncConnection, kind: str, *, record: str = "", external_id: str = "") -> SyncLink | None:
    links = SyncLink.objects.filter(connection=connection, kind=kind)
    if record:
        return links.filter(record=record).first()
    return links.filter(external_id=external_id).first()


def record_of(link: SyncLink | None) -> str:
    return link.record if link is not None else ""


# --- the connection's state --------------------------------------------------------------------


@transaction.atomic
def connection_connect(
    business: Business,
    *,
    provider: str,
    account_id: str,
    account_name: str,
    access_token: str,
    refresh_token: str,
    expires_at: datetime | None,
    actor: str,
    member: TeamMember | None = None,
) -> SyncConnection:
    """A person connected the business's account (again), or `member`
    their calendar: the tokens kept, the connection active, its reconnect
    item resolved. A receipt, without any token in it."""
    connection, created = SyncConnection.objects.select_for_update().get_or_create(
        business=business, provider=provider, member=member, defaults={"account_id": account_id}
    )
    before = {"status": None if created else connection.status, "account": connection.account_id or None}
    connection.account_id, connection.account_name = account_id, account_name[:200]
    connection.access_token, connection.refresh_token = access_token, refresh_token
    connection.token_expires_at, connection.refresh_claimed_at = expires_at, None
    connection.status, connection.connected_by = SyncConnection.Status.ACTIVE, actor[:150]
    connection.last_error = ""
    connection.save()
    exceptions_resolve(connection, kind=RECONNECT_EXCEPTION, actor=actor)
    receipt_write(
        business=business,
        subject=connection.public_id,
        actor=actor,
        action="sync.connected",
        before=before,
        after={
            "status": "active",
            "provider": provider,
            "account": account_id,
            "member": member.public_id if member else None,
        },
    )
    return connection


@transaction.atomic
def connection_needs_person(connection: SyncConnection, *, status: str, why: str, actor: str) -> bool:
    """The provider refused our tokens, or the app was removed on their
    side: the connection waits for a person (never a silent fallback), and
    the business's manager gets an exception item saying what to do. False
    when it was in that state already."""
    now = timezone.now()
    moved = (
        SyncConnection.objects.filter(pk=connection.pk)
        .exclude(status=status)
        .update(status=status, last_error=why[:500], last_error_at=now, refresh_claimed_at=None, updated_at=now)
    )
    if not moved:
        return False
    what = "Reconnect" if status == SyncConnection.Status.REAUTHORIZE else "The app was removed; connect again to"
    exception_open(
        connection, kind=RECONNECT_EXCEPTION, detail=f"{what} {connection.provider} for {connection.business}: {why}"
    )
    receipt_write(
        business=connection.business,
        subject=connection.public_id,
        actor=actor,
        action=f"sync.{status}",
        reason=why[:300],
        before={"status": connection.status},
        after={"status": status},
    )
    connection.status = status
    return True


def exception_open(connection: SyncConnection, *, kind: str, detail: str, subject: str = "") -> None:
    """One open item per kind and subject, owned by the business's manager."""
    try:
        with transaction.atomic():
            ExceptionItem.objects.create(
                business_id=connection.business_id,
                owner=business_manager(connection.business_id),
                kind=kind,
                subject=subject or connection.public_id,
                detail=detail[:500],
                detected_at=timezone.now(),
            )
    except IntegrityError:
        pass  # already open for it: it says the same


def exceptions_resolve(connection: SyncConnection, *, kind: str, actor: str, subject: str = "") -> int:
    return ExceptionItem.objects.filter(
        business_id=connection.business_id,
        kind=kind,
        subject=subject or connection.public_id,
        status=ExceptionItem.Status.OPEN,
    ).update(status=ExceptionItem.Status.RESOLVED, resolved_at=timezone.now(), resolved_by=actor[:150])


# --- calendars' busy times ------------------------------------------------------------------


def calendar_busy_store(
    connection: SyncConnection, blocks: list[tuple[datetime, datetime]], *, now: datetime, actor: str
) -> None:
    """A calendar's busy blocks as just read: kept for the slots, and the
    item that said they could not be read resolved."""
    busy = [[start.isoformat(), end.isoformat()] for start, end in sorted(blocks)]
    SyncConnection.objects.filter(pk=connection.pk).update(busy=busy, busy_checked_at=now, updated_at=now)
    connection.busy, connection.busy_checked_at = busy, now
    exceptions_resolve(connection, kind=BUSY_EXCEPTION, actor=actor)
    exceptions_resolve(
        connection, kind=BUSY_EXCEPTION, actor=actor, subject=f"{connection.public_id}:{connection.member_id}"
    )


def calendar_busy_failed(connection: SyncConnection, *, why: str, now: datetime) -> None:
    """A calendar's busy times could not be read: said on the connection
    and to the manager (the slots go on with the blocks read last)."""
    SyncConnection.objects.filter(pk=connection.pk).update(last_error=why[:500], last_error_at=now)
    who = connection.member or connection.business
    detail = (
        f"{connection.provider} busy times of {who} could not be read: {why}. Slots may be offered while they are busy."
    )
    exception_open(connection, kind=BUSY_EXCEPTION, detail=detail)
    if connection.member_id is not None:
        # The person whose calendar it is sees it too: they are the one who can fix it.
        try:
            with transaction.atomic():
                ExceptionItem.objects.create(
                    business_id=connection.business_id,
                    owner_id=connection.member_id,
                    kind=BUSY_EXCEPTION,
                    subject=f"{connection.public_id}:{connection.member_id}",
                    detail=detail[:500],
                    detected_at=now,
                )
        except IntegrityError:
            pass  # already open for them


def calendar_busy(member_ids: list[int]) -> dict[int, list[tuple[datetime, datetime]]]:
    """The busy blocks of these members' connected calendars (one query)."""
    found: dict[int, list[tuple[datetime, datetime]]] = {}
    rows = SyncConnection.objects.filter(member_id__in=member_ids).exclude(status=SyncConnection.Status.DISCONNECTED)
    for member_id, busy in rows.values_list("member_id", "busy"):
        for start, end in busy or ():
            found.setdefault(member_id, []).append((datetime.fromisoformat(start), datetime.fromisoformat(end)))
    return found


# --- what the provider's version writes of ours ------------------------------------------------


@transaction.atomic
def contact_names_set(contact: Contact, *, first_name: str, last_name: str, actor: str, reason: str) -> bool:
    """Set a contact's name from a system of record (their client was
    renamed); a receipt with the old and the new. False when nothing changed."""
    locked = Contact.objects.select_for_update().get(pk=contact.pk)
    before = {"first_name": locked.first_name, "last_name": locked.last_name}
    after = {"first_name": first_name[:100], "last_name": last_name[:100]}
    if before == after:
        return False
    Contact.objects.filter(pk=locked.pk).update(**after, updated_at=timezone.now())
    receipt_write(
        business=locked.business,
        subject=locked.public_id,
        actor=actor,
        action="contact.updated",
        reason=reason,
        before=before,
        after=after,
    )
    contact.first_name, contact.last_name = after["first_name"], after["last_name"]
    return True


def lead_of_contact(contact_id: int) -> Lead | None:
    """The lead a record of a contact's belongs to when nothing names one:
    the newest open lead, else the newest."""
    leads = Lead.objects.select_related("business", "contact").filter(contact_id=contact_id)
    return (
        leads.exclude(stage__in=CLOSED_STAGES).order_by("-created_at").first() or leads.order_by("-created_at").first()
    )


# --- status -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConnectionStatus:
    connection: SyncConnection
    waiting: int
    failed: int

    @property
    def healthy(self) -> bool:
        return self.connection.status == SyncConnection.Status.ACTIVE and not self.failed


def _statuses(rows: Any) -> list[ConnectionStatus]:
    rows = rows.select_related("business", "member").annotate(
        waiting=Count("changes", filter=Q(changes__status__in=["pending", "working"])),
        failed=Count("changes", filter=Q(changes__status="failed")),
    )
    return [ConnectionStatus(c, c.waiting, c.failed) for c in rows.order_by("business__name", "provider")]


def connection_statuses(business_ids: frozenset[int] | None) -> list[ConnectionStatus]:
    """Each connection of these businesses (None: every business) with its
    records waiting and failed: one query."""
    rows = SyncConnection.objects.all()
    if business_ids is not None:
        rows = rows.filter(business_id__in=business_ids)
    return _statuses(rows)


def connection_statuses_of_members(member_ids: list[int]) -> list[ConnectionStatus]:
    """The calendars these team members connected: one query."""
    return _statuses(SyncConnection.objects.filter(member_id__in=member_ids)) if member_ids else []
