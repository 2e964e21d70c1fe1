"""Pipeline QA: the periodic check that nothing in the pipeline has quietly
stopped. Each condition it finds becomes one open `ExceptionItem` owned by the
business's manager; when the condition clears, the item is resolved by QA
itself on the next run.

Kinds, the record each is about, and the condition:

- `no_owner` (lead): open, not a test, older than the routing grace, no owner
- `manager_queue` (lead): open and flagged `no_eligible_owner`: routing found
  nobody, the manager holds it (with the reason)
- `missing_identity` (lead): open and flagged `missing_identity`
- `out_of_area` (lead): open and flagged `out_of_area` (the exception path: a
  person decides before booking)
- `no_next_action` (lead): open, owned, older than the grace, no next action
- `invalid_stage` (lead): the stage says something its records do not (booked
  without an appointment…)
- `stale_stage` (lead): open, unchanged longer than its stage allows
  (STALE_DAYS), and nobody is on it: no next action, or one overdue by more
  than STALE_OVERDUE
- `sla_breached` (lead): open, SLA breached, and still no first human contact
- `stuck_enrollment` (enrollment): active, but its step is overdue by an hour,
  has no due time, or its lead is closed
- `undelivered_message` (message): outbound, undelivered/failed in the last
  week, on an open lead, not delivered since (a send the sweep gave up on has
  its own `send_gave_up` item)
- `stuck_message` (message): outbound and still queued, sending or unknown
  STUCK_SEND after it was last queued or claimed: the message sweep has not
  settled it
- `unmatched_payment` (payment): unmatched or ambiguous
- `appointment_no_outcome` (appointment): scheduled or confirmed, ended more
  than two hours ago
- `job_not_invoiced` (job): completed more than a day ago, with no (non-void)
  invoice

Every check is one set-based query, and each kind is synchronised in one SQL
statement: its findings are inserted as items (INSERT … SELECT) and the open
items they no longer contain are resolved (UPDATE), so no finding is loaded
into Python however many there are. The partial unique constraint
`crm_exceptionitem_one_open_per_subject` (not luck) keeps one open item per
kind and subject when two runs overlap (the INSERT is ON CONFLICT DO NOTHING).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Case, CharField, Exists, F, Func, OuterRef, Q, QuerySet, Value, When
from django.db.models.functions import Cast, Coalesce, Concat
from django.utils import timezone

from agents.outbound.dispatch import GAVE_UP
from agents.reporting.sql import without_jit
from crm.ids import _ALPHABET, new_public_id
from crm.models import (
    CLOSED_STAGES,
    Appointment,
    Business,
    Enrollment,
    Estimate,
    ExceptionItem,
    Invoice,
    Job,
    Lead,
    Message,
    Payment,
    Stage,
)
from crm.selectors import business_managers
from crm.services.receipts import receipt_write

ACTOR = "agent:pipeline_qa"
# Routing runs right after capture, in the background: a lead younger than
# this may simply not have been routed yet.
GRACE = timedelta(minutes=15)
STALE_DAYS = {
    Stage.NEW: 1,
    Stage.ASSIGNED: 2,
    Stage.CONTACTED: 7,
    Stage.ENGAGED: 7,
    Stage.QUALIFIED: 7,
    Stage.NO_SHOW: 3,
    Stage.APPOINTMENT_HELD: 7,
    Stage.ESTIMATE_SENT: 14,
}
# A lead past its stage's days is still being worked while its next action is
# due in the future, or overdue by less than this: the owner's daily brief
# already lists overdue tasks, and a nurture lead ("call back in three weeks")
# is not a pipeline problem. Only past this does it reach the manager's queue.
STALE_OVERDUE = timedelta(days=2)
STUCK_AFTER = timedelta(hours=1)
UNDELIVERED_WINDOW = timedelta(days=7)
OUTCOME_GRACE = timedelta(hours=2)
INVOICE_GRACE = timedelta(days=1)
FAILED_SENDS = (Message.Status.UNDELIVERED, Message.Status.FAILED)
IN_FLIGHT = (Message.Status.QUEUED, Message.Status.SENDING, Message.Status.UNKNOWN)
# Longer than the message sweep needs (its bounds are minutes): a send still in
# flight after this is one the sweep cannot settle on its own.
STUCK_SEND = timedelta(minutes=30)
DETAIL_MAX = 500
BASE64 = string.ascii_uppercase + string.ascii_lowercase + string.digits + "+/"
ANALYZE_AFTER = 1000


def _text(*parts: Any) -> Concat:
    """SQL string concatenation; plain strings are literals."""
    return Concat(*[Value(p) if isinstance(p, str) else p for p in parts], output_field=CharField())


def _day(field: str) -> Func:
    # The connection's time zone is UTC (USE_TZ), as the details always said.
    return Func(F(field), Value("YYYY-MM-DD"), function="to_char", output_field=CharField())


def _minute(field: str) -> Func:
    return Func(F(field), Value("YYYY-MM-DD HH24:MI"), function="to_char", output_field=CharField())


def _found(qs: QuerySet[Any], detail: Any, *, subject: str = "public_id", lead: str = "lead_id") -> QuerySet[Any]:
    """A check's findings as rows of (business_id, subject, lead_id, detail)."""
    return (
        qs.annotate(qa_b=F("business_id"), qa_s=F(subject), qa_l=F(lead), qa_d=detail)
        .values_list("qa_b", "qa_s", "qa_l", "qa_d")
        .order_by()
    )


def _open_leads() -> QuerySet[Lead]:
    return Lead.objects.exclude(stage__in=CLOSED_STAGES).filter(is_test=False)


def _no_owner(now: datetime) -> QuerySet[Any]:
    qs = _open_leads().filter(owner__isnull=True, created_at__lt=now - GRACE)
    reason = Case(When(routing_reason="", then=Value("")), default=_text(": ", F("routing_reason")))
    return _found(qs, _text("no owner", reason), lead="pk")


def _flagged(flag: str, text: str) -> Callable[[datetime], QuerySet[Any]]:
    """Open leads carrying an exception flag a person must clear (routing's
    manager queue, missing identity, out of area)."""

    def check(now: datetime) -> QuerySet[Any]:
        qs = _open_leads().filter(exceptions__contains=[flag])
        reason = Case(When(routing_reason="", then=Value("")), default=_text(": ", F("routing_reason")))
        detail = _text(text, reason) if flag == "no_eligible_owner" else Value(text, output_field=CharField())
        return _found(qs, detail, lead="pk")

    return check


def _no_next_action(now: datetime) -> QuerySet[Any]:
    qs = _open_leads().filter(owner__isnull=False, next_action="", created_at__lt=now - GRACE)
    return _found(qs, _text("stage ", F("stage"), ", owned, but no next action"), lead="pk")


def _invalid_stage(now: datetime) -> QuerySet[Any]:
    lead = OuterRef("pk")
    appt = Appointment.objects.filter(lead_id=lead)
    upcoming = appt.filter(status__in=[Appointment.Status.SCHEDULED, Appointment.Status.CONFIRMED])
    held = appt.filter(status=Appointment.Status.HELD)
    sent = Estimate.objects.filter(lead_id=lead, status__in=["sent", "accepted", "declined", "expired"])
    sold = (
        Exists(Estimate.objects.filter(lead_id=lead, status="accepted"))
        | Exists(Job.objects.filter(lead_id=lead))
        | Exists(Payment.objects.filter(lead_id=lead))
    )
    reasons = {
        Stage.BOOKED: ("booked, but no scheduled appointment", ~Exists(upcoming) & ~Exists(held)),
        Stage.APPOINTMENT_HELD: ("appointment held, but no appointment was held", ~Exists(held)),
        Stage.ESTIMATE_SENT: ("estimate sent, but no estimate was sent", ~Exists(sent)),
        Stage.WON: ("won, but no accepted estimate, job or payment", ~sold),
    }
    # One query: a UNION ALL of one simple branch per stage (an OR of the
    # four would plan as correlated subplans per lead).
    branches = [
        _found(Lead.objects.filter(stage=stage, is_test=False).filter(missing), Value(text), lead="pk")
        for stage, (text, missing) in reasons.items()
    ]
    return branches[0].union(*branches[1:], all=True)


def _stale_stage(now: datetime) -> QuerySet[Any]:
    stale = Q()
    for stage, days in STALE_DAYS.items():
        stale |= Q(stage=stage, updated_at__lt=now - timedelta(days=days))
    idle = Q(next_action_due_at__isnull=True) | Q(next_action_due_at__lt=now - STALE_OVERDUE)
    qs = _open_leads().filter(stale & idle)
    action = Case(
        When(next_action_due_at__isnull=True, then=Value("no next action")),
        default=_text("next action overdue since ", _day("next_action_due_at")),
    )
    return _found(qs, _text(F("stage"), " and unchanged since ", _day("updated_at"), "; ", action), lead="pk")


def _sla_breached(now: datetime) -> QuerySet[Any]:
    qs = _open_leads().filter(sla_breached_at__isnull=False, first_response_at__isnull=True)
    return _found(qs, _text("first response due was missed at ", _minute("sla_breached_at"), " UTC"), lead="pk")


def _stuck_enrollment(now: datetime) -> QuerySet[Any]:
    qs = Enrollment.objects.filter(status=Enrollment.Status.ACTIVE).filter(
        Q(next_step_due_at__lt=now - STUCK_AFTER) | Q(next_step_due_at__isnull=True) | Q(lead__stage__in=CLOSED_STAGES)
    )
    why = Case(
        When(lead__stage__in=CLOSED_STAGES, then=_text("still active on a ", F("lead__stage"), " lead")),
        When(next_step_due_at__isnull=True, then=Value("active with no next step due")),
        default=_text("step overdue since ", _minute("next_step_due_at"), " UTC"),
        output_field=CharField(),
    )
    return _found(qs, _text(F("sequence__key"), ": ", why))


def _undelivered(now: datetime) -> QuerySet[Any]:
    delivered_since = Message.objects.filter(
        lead_id=OuterRef("lead_id"),
        channel=OuterRef("channel"),
        direction="out",
        status=Message.Status.DELIVERED,
        created_at__gt=OuterRef("created_at"),
    )
    qs = (
        Message.objects.filter(direction="out", status__in=FAILED_SENDS, created_at__gte=now - UNDELIVERED_WINDOW)
        .filter(lead__isnull=False)
        .exclude(lead__stage__in=CLOSED_STAGES)
        .exclude(error_code=GAVE_UP)
        .exclude(Exists(delivered_since))
    )
    detail = Func(
        _text(F("channel"), " ", F("status"), " ", F("error_code")), function="btrim", output_field=CharField()
    )
    return _found(qs, detail)


def _stuck_message(now: datetime) -> QuerySet[Any]:
    # Whatever its lead: a send in flight is a side effect nobody has settled.
    since = Coalesce("claimed_at", "queued_at", "created_at")
    qs = (
        Message.objects.filter(direction="out", status__in=IN_FLIGHT)
        .alias(since=since)
        .filter(since__lt=now - STUCK_SEND)
    )
    detail = _text(
        F("channel"),
        " ",
        F("status"),
        " since ",
        _minute("since"),
        " UTC, ",
        Cast("attempts", CharField()),
        " dispatch attempt(s)",
    )
    return _found(qs, detail)


def _unmatched_payment(now: datetime) -> QuerySet[Any]:
    qs = Payment.objects.filter(match_status__in=[Payment.MatchStatus.UNMATCHED, Payment.MatchStatus.AMBIGUOUS])
    detail = _text(
        F("match_status"),
        ": ",
        Cast("amount", CharField()),
        " ",
        F("currency"),
        " from ",
        F("provider"),
        " on ",
        _day("received_at"),
    )
    return _found(qs, detail)


def _appointment_no_outcome(now: datetime) -> QuerySet[Any]:
    qs = Appointment.objects.filter(
        status__in=[Appointment.Status.SCHEDULED, Appointment.Status.CONFIRMED], ends_at__lt=now - OUTCOME_GRACE
    )
    return _found(qs, _text("ended ", _minute("ends_at"), " UTC, still ", F("status")))


def _job_not_invoiced(now: datetime) -> QuerySet[Any]:
    invoiced = Invoice.objects.filter(job_id=OuterRef("pk")).exclude(status=Invoice.Status.VOID)
    qs = Job.objects.filter(status=Job.Status.COMPLETED, completed_at__lt=now - INVOICE_GRACE).exclude(Exists(invoiced))
    return _found(qs, _text("completed ", _day("completed_at"), ", no invoice"))


CHECKS: dict[str, Callable[[datetime], QuerySet[Any]]] = {
    "no_owner": _no_owner,
    "manager_queue": _flagged("no_eligible_owner", "no eligible owner: the manager holds it"),
    "missing_identity": _flagged("missing_identity", "no usable phone, email or handle"),
    "out_of_area": _flagged("out_of_area", "outside every service area: decide before booking"),
    "no_next_action": _no_next_action,
    "invalid_stage": _invalid_stage,
    "stale_stage": _stale_stage,
    "sla_breached": _sla_breached,
    "stuck_enrollment": _stuck_enrollment,
    "undelivered_message": _undelivered,
    "stuck_message": _stuck_message,
    "unmatched_payment": _unmatched_payment,
    "appointment_no_outcome": _appointment_no_outcome,
    "job_not_invoiced": _job_not_invoiced,
}
QA_KINDS = list(CHECKS)

# One statement per kind. `found` is the check (business, subject, lead,
# detail); `manager` is crm.selectors.business_managers. New findings become
# open items owned by the manager (a public id per row: this run's ULID time
# part, then 16 random Crockford characters: 12 random bytes of a
# gen_random_uuid, skipping its version and variant bits, in base64, each of
# the 64 base64 characters mapped onto one of the 32 Crockford ones, two to
# one, so each keeps 5 random bits: 80 in all, as new_public_id);
# ON CONFLICT absorbs an overlapping run's insert of the same item; open items
# of the kind that are no longer found are resolved. Both write
# RETURNING business_id, counted per business for the receipts. `found` is
# NOT MATERIALIZED so that each use is planned on its own: resolving probes
# the check by the subject's unique public id (a nested loop over an unindexed
# CTE would be quadratic while the new items are not yet analyzed).
SYNC_SQL = """
WITH found AS NOT MATERIALIZED ({found}),
manager AS ({managers}),
opened AS (
    INSERT INTO crm_exceptionitem
        (public_id, business_id, lead_id, owner_id, kind, subject, detail, status, detected_at, resolved_by)
    SELECT
        %s || translate(
            encode(substring(r.bytes FROM 1 FOR 6) || substring(r.bytes FROM 10 FOR 6), 'base64'), %s, %s
        ),
        f.qa_b, f.qa_l, manager.pk, %s, f.qa_s, left(f.qa_d, {detail_max}), 'open', %s, ''
    FROM found f
    -- Naming f.qa_s makes the lateral correlated: a fresh uuid for every row.
    CROSS JOIN LATERAL (SELECT uuid_send(gen_random_uuid()) AS bytes, f.qa_s) AS r
    LEFT JOIN manager ON manager.business_id = f.qa_b
    WHERE NOT EXISTS (
        SELECT 1 FROM crm_exceptionitem e
        WHERE e.status = 'open' AND e.kind = %s AND e.business_id = f.qa_b AND e.subject = f.qa_s
    )
    ON CONFLICT DO NOTHING
    RETURNING business_id
),
resolved AS (
    UPDATE crm_exceptionitem e SET status = 'resolved', resolved_at = %s, resolved_by = %s
    WHERE e.status = 'open' AND e.kind = %s
      AND NOT EXISTS (SELECT 1 FROM found f WHERE f.qa_b = e.business_id AND f.qa_s = e.subject)
    RETURNING business_id
)
SELECT 'opened', business_id, count(*) FROM opened GROUP BY business_id
UNION ALL
SELECT 'resolved', business_id, count(*) FROM resolved GROUP BY business_id
"""


@dataclass
class QaRun:
    opened: dict[str, int] = field(default_factory=dict)
    resolved: dict[str, int] = field(default_factory=dict)
    open_total: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"opened": self.opened, "resolved": self.resolved, "open": self.open_total}


def _sync(kind: str, now: datetime) -> list[tuple[str, int, int]]:
    """Open the kind's new findings and resolve its cleared items, in SQL."""
    found_sql, found_params = CHECKS[kind](now).query.sql_with_params()
    managers_sql, managers_params = business_managers().values("business_id", "pk").query.sql_with_params()
    sql = SYNC_SQL.format(found=found_sql, managers=managers_sql, detail_max=DETAIL_MAX)
    # The ULID time part: the first 10 characters after the prefix.
    time_part = new_public_id("exc")[: len("exc_") + 10]
    params = [
        *found_params,
        *managers_params,
        time_part,
        BASE64,
        _ALPHABET * 2,
        kind,
        now,
        kind,
        now,
        ACTOR,
        kind,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(what, business_id, n) for what, business_id, n in cursor.fetchall()]


def pipeline_qa_run(*, now: datetime | None = None, kinds: list[str] | None = None) -> QaRun:
    """Run every check (or `kinds`): open an item for each new finding, resolve
    the open QA items whose condition has cleared. Safe to run concurrently:
    a second opener of the same item is absorbed by the partial unique
    constraint, and a resolve is a conditional update from `open`."""
    now = now or timezone.now()
    run = QaRun()
    per_business: dict[int, dict[str, dict[str, int]]] = {}
    for kind in kinds or QA_KINDS:
        with without_jit():
            changes = _sync(kind, now)
        if sum(n for what, _, n in changes if what == "opened") >= ANALYZE_AFTER:
            # Thousands of new rows the planner has no statistics for yet: the
            # next kind's "already open?" anti-join would otherwise be planned
            # as a nested loop over "one" row (quadratic), until autovacuum
            # gets to the table.
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE crm_exceptionitem")
        for what, business_id, n in changes:
            counts = run.opened if what == "opened" else run.resolved
            counts[kind] = counts.get(kind, 0) + n
            per_business.setdefault(business_id, {}).setdefault(what, {})[kind] = n
    _receipts(per_business)
    run.open_total = ExceptionItem.objects.filter(kind__in=QA_KINDS, status=ExceptionItem.Status.OPEN).count()
    return run


def _receipts(per_business: dict[int, dict[str, dict[str, int]]]) -> None:
    # One receipt per business and run that changed something: the items
    # themselves are the per-record trail, this says who opened and closed them.
    for business in Business.objects.filter(pk__in=list(per_business)):
        receipt_write(
            business=business,
            actor=ACTOR,
            action="qa.run",
            subject=business.public_id,
            after=per_business[business.pk],
        )
