"""The lead trace: seven questions every lead's record must answer, each with
the public ids of the evidence, and the first one it cannot answer — the break.

1. source — where did the lead come from? A touch naming a configured source
   or a stored provider delivery. A lead typed in by hand with neither has no
   attribution: the money it makes cannot be traced to what paid for it.
2. may_contact — can a channel contact it? `agents.consent.policy.consent_decide`
   for a person's send, on every valid phone (sms, voice), email and
   Instagram handle (a DM within Meta's 24-hour window).
3. next_action_owner — who owns the next action? An open lead needs an owner
   and a next action with a due time; a closed lead needs none.
4. stop_rule — what stops the sequence? Nothing running, or a path that ended
   with its reason, answers it; a path still running although a stop rule
   applies (closed, hold, paused, revoked, replied, goal reached) is the break.
5. appointment_happened — an appointment held (or, without one, a completed job).
6. job_completed — a job completed.
7. payment_collected — a payment not refunded in full.

`leak_audit` asks the same seven questions of many leads at once in SQL
(`trace_break_annotation`), and counts first breaks by period and source;
a test holds the two to the same answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, tzinfo
from decimal import Decimal
from typing import Any

from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Count,
    DecimalField,
    Exists,
    F,
    Func,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Trunc
from django.utils import timezone

from agents.consent.policy import CONVERSATION_WINDOW, MESSAGING_WINDOW, consent_decide
from agents.reporting.sql import without_jit
from crm.localtime import moment_words
from crm.models import (
    CLOSED_STAGES,
    Appointment,
    Call,
    ConsentState,
    ConsentStatus,
    ContactPoint,
    Enrollment,
    Job,
    Lead,
    LeadTouch,
    Message,
    Payment,
    Receipt,
    Refund,
    Task,
)

QUESTIONS: list[tuple[str, str]] = [
    ("source", "Where did the lead come from?"),
    ("may_contact", "Can this channel contact it?"),
    ("next_action_owner", "Who owns the next action?"),
    ("stop_rule", "What stops the sequence?"),
    ("appointment_happened", "Did the appointment happen?"),
    ("job_completed", "Was the job completed?"),
    ("payment_collected", "Was the payment collected?"),
]
KEYS = [key for key, _ in QUESTIONS]
RUNNING = (Enrollment.Status.ACTIVE, Enrollment.Status.WAITING)
# Reminders run while the lead is booked and talking to us; every other path
# stops on a reply.
REPLY_DOES_NOT_STOP = ("appointment",)
CHANNELS_BY_KIND = {
    "phone": ("sms", "voice"),
    "email": ("email",),
    "instagram": ("instagram",),
    # A marketplace thread: answered there unless the person revoked it.
    "thumbtack": ("thumbtack",),
    "yelp": ("yelp",),
}


@dataclass(frozen=True)
class Answer:
    key: str
    question: str
    answer: str
    ok: bool
    evidence: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Trace:
    lead: str
    questions: list[Answer]

    @property
    def first_break(self) -> str | None:
        return next((a.key for a in self.questions if not a.ok), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "lead": self.lead,
            "questions": [asdict(a) for a in self.questions],
            "first_break": self.first_break,
        }


def _ask(key: str, answer: str, ok: bool, evidence: Iterable[str] = ()) -> Answer:
    return Answer(key, dict(QUESTIONS)[key], answer, ok, [e for e in evidence if e])


def _when(at: datetime | None, tz: tzinfo = UTC) -> str:
    """A time for the answer's reader. The API's answers speak UTC, dated in
    full ("2026-12-04 15:00 UTC") for a program to keep; a page passes its
    viewer's zone and gets the page's own words, dated, as a sentence
    needs them ("on Dec 3, 9:00 AM CST")."""
    if at is None:
        return "—"
    if tz is UTC:
        return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    return moment_words(at, tz, relative=False)


def _source(lead: Lead, tz: tzinfo) -> Answer:
    touches = list(lead.touches.select_related("source", "inbound_event").order_by("received_at", "id"))
    traced = [t for t in touches if t.source_id or t.inbound_event_id]
    if traced:
        first = traced[0]
        where = first.source.key if first.source else first.provider
        campaign = f", campaign {first.campaign_id}" if first.campaign_id else ""
        more = f" (+{len(touches) - 1} later touch{'es' if len(touches) > 2 else ''})" if len(touches) > 1 else ""
        evidence = [first.public_id, first.inbound_event.public_id if first.inbound_event else ""]
        return _ask(
            "source", f"{first.channel} via {where}{campaign} on {_when(first.received_at, tz)}{more}", True, evidence
        )
    if touches:
        return _ask(
            "source",
            f"entered by hand ({touches[0].provider}); no source or provider delivery on record",
            False,
            [t.public_id for t in touches],
        )
    return _ask("source", "no source touch on record", False)


def _may_contact(lead: Lead, now: datetime) -> Answer:
    points = [p for p in lead.contact.points.all() if p.is_valid and p.kind in CHANNELS_BY_KIND]
    if not points:
        return _ask("may_contact", "no valid phone, email or Instagram handle on record", False)
    states = {
        (s.contact_point_id, s.channel): s.last_event.public_id
        for s in ConsentState.objects.filter(contact_point__in=points).select_related("last_event")
    }
    spoke = (
        Message.objects.filter(contact_point__in=points, direction="in", created_at__gte=now - CONVERSATION_WINDOW)
        .order_by("-created_at")
        .values_list("public_id", flat=True)
        .first()
    )
    parts, evidence, allowed = [], [], False
    for point in points:
        for channel in CHANNELS_BY_KIND[point.kind]:
            decision = consent_decide(point, channel, automated=False, now=now)
            allowed = allowed or decision.allowed
            verdict = "yes" if decision.allowed else f"no ({decision.reason})"
            parts.append(f"{channel} to {point.value}: {verdict}, {decision.basis}")
            evidence.append(states.get((point.pk, channel), ""))
            if decision.basis in ("inbound_conversation", "messaging_window"):
                evidence.append(spoke or "")
    return _ask("may_contact", "; ".join(parts), allowed, dict.fromkeys(evidence))


def _next_action_owner(lead: Lead, tz: tzinfo) -> Answer:
    if not lead.is_open:
        closed = (
            Receipt.objects.filter(lead=lead, action="lead.stage_changed")
            .order_by("-id")
            .values_list("public_id", flat=True)
            .first()
        )
        return _ask(
            "next_action_owner",
            f"closed as {lead.stage} on {_when(lead.closed_at, tz)}; nothing is due",
            True,
            [closed or ""],
        )
    task = (
        Task.objects.filter(lead=lead, kind="next_action", status=Task.Status.OPEN)
        .values_list("public_id", flat=True)
        .first()
    )
    if lead.owner is None:
        why = f" ({lead.routing_reason})" if lead.routing_reason else ""
        return _ask("next_action_owner", f"nobody: the lead has no owner{why}", False, [task or ""])
    owner = lead.owner.user.get_username()
    if not lead.next_action or lead.next_action_due_at is None:
        return _ask("next_action_owner", f"{owner} owns it, but no next action is set", False, [lead.owner.public_id])
    return _ask(
        "next_action_owner",
        f"{owner}: {lead.next_action}, due {_when(lead.next_action_due_at, tz)}",
        True,
        [lead.owner.public_id, task or ""],
    )


def _stop_rule(lead: Lead, tz: tzinfo) -> Answer:
    enrollments = list(lead.enrollments.select_related("sequence").order_by("-created_at", "-pk"))
    running = [e for e in enrollments if e.status in RUNNING]
    for enrollment in running:
        why, proof = _should_have_stopped(lead, enrollment)
        if why:
            return _ask(
                "stop_rule",
                f"{enrollment.sequence.key} ({enrollment.public_id}) is still {enrollment.status} although {why}",
                False,
                [enrollment.public_id, proof],
            )
    if running:
        e = running[0]
        goals = f"; its goal stages: {', '.join(e.sequence.goal_stages)}" if e.sequence.goal_stages else ""
        return _ask(
            "stop_rule",
            f"{e.sequence.key} ({e.status}) stops on a reply, booking, sale, opt-out, complaint, hold or "
            f"disqualification{goals}",
            True,
            [e.public_id],
        )
    if enrollments:
        e = enrollments[0]
        return _ask(
            "stop_rule",
            f"{e.sequence.key} {e.status}{': ' + e.stop_reason if e.stop_reason else ''} on {_when(e.ended_at, tz)}",
            True,
            [e.public_id],
        )
    return _ask("stop_rule", "no automated sequence has run; there is nothing to stop", True)


def _should_have_stopped(lead: Lead, enrollment: Enrollment) -> tuple[str, str]:
    """The stop rule that applies to a running enrollment, and its evidence."""
    if not lead.is_open:
        return f"the lead is {lead.stage}", ""
    if lead.hold:
        return "the lead is on hold", ""
    if lead.contact.automation_paused:
        return f"automation is paused for the person ({lead.contact.automation_paused_reason or 'no reason'})", ""
    if lead.stage in (enrollment.sequence.goal_stages or []):
        return f"the lead reached its goal stage {lead.stage}", ""
    revoked = (
        ConsentState.objects.filter(contact_point__contact_id=lead.contact_id, status=ConsentStatus.REVOKED)
        .values_list("last_event__public_id", flat=True)
        .first()
    )
    if revoked:
        return "the person revoked consent", revoked
    if enrollment.sequence.trigger not in REPLY_DOES_NOT_STOP:
        reply = (
            Message.objects.filter(lead=lead, direction="in", created_at__gt=enrollment.created_at)
            .values_list("public_id", flat=True)
            .first()
        )
        if reply:
            return "the person replied", reply
    return "", ""


def _appointment(lead: Lead, now: datetime, tz: tzinfo) -> Answer:
    appointments = list(lead.appointments.order_by("-starts_at", "-pk"))
    held = [a for a in appointments if a.status == Appointment.Status.HELD]
    if held:
        return _ask(
            "appointment_happened", f"held on {_when(held[0].starts_at, tz)}", True, [a.public_id for a in held]
        )
    completed = lead.jobs.filter(status=Job.Status.COMPLETED).order_by("completed_at").first()
    if completed is not None:
        return _ask(
            "appointment_happened",
            f"no appointment on record, but job {completed.public_id} was completed",
            True,
            [completed.public_id],
        )
    if not appointments:
        return _ask("appointment_happened", "no appointment was booked", False)
    latest = appointments[0]
    if latest.status == Appointment.Status.NO_SHOW:
        text = f"no-show on {_when(latest.starts_at, tz)}"
    elif latest.status == Appointment.Status.CANCELED:
        text = f"canceled (was for {_when(latest.starts_at, tz)})"
    elif latest.ends_at > now:
        text = f"booked for {_when(latest.starts_at, tz)}; not happened yet"
    else:
        text = f"was due {_when(latest.starts_at, tz)}; no outcome recorded"
    return _ask("appointment_happened", text, False, [a.public_id for a in appointments])


def _job(lead: Lead, tz: tzinfo) -> Answer:
    jobs = list(lead.jobs.order_by("-created_at", "-pk"))
    done = [j for j in jobs if j.status == Job.Status.COMPLETED]
    if done:
        return _ask(
            "job_completed", f"completed on {_when(done[0].completed_at, tz)}", True, [j.public_id for j in done]
        )
    if jobs:
        return _ask("job_completed", f"job {jobs[0].status}; not completed", False, [j.public_id for j in jobs])
    return _ask("job_completed", "no job on record", False)


def _payment(lead: Lead) -> Answer:
    payments = list(lead.payments.prefetch_related("refunds").order_by("received_at", "pk"))
    net: dict[str, Decimal] = {}
    evidence: list[str] = []
    collected = False
    for p in payments:
        refunded = sum((r.amount for r in p.refunds.all()), Decimal("0.00"))
        net[p.currency] = net.get(p.currency, Decimal("0.00")) + p.amount - refunded
        collected = collected or p.amount > refunded
        evidence += [p.public_id, *(r.public_id for r in p.refunds.all())]
    if payments:
        amounts = ", ".join(f"{amount} {currency}" for currency, amount in sorted(net.items()))
        verdict = "collected" if collected else "refunded in full"
        return _ask("payment_collected", f"{verdict}: net {amounts}", collected, evidence)
    invoices = list(lead.invoices.exclude(status="void").order_by("-created_at"))
    if invoices:
        inv = invoices[0]
        return _ask(
            "payment_collected",
            f"invoice {inv.number or inv.public_id} for {inv.amount} {inv.currency} is {inv.status}; no payment",
            False,
            [i.public_id for i in invoices],
        )
    return _ask("payment_collected", "no payment on record", False)


def lead_trace(lead: Lead, *, now: datetime | None = None, tz: tzinfo = UTC) -> Trace:
    """The seven answers for one lead, times said in `tz`. A bounded number of
    queries: one or two per question, plus the consent checks per contact
    point and channel."""
    now = now or timezone.now()
    return Trace(
        lead=lead.public_id,
        questions=[
            _source(lead, tz),
            _may_contact(lead, now),
            _next_action_owner(lead, tz),
            _stop_rule(lead, tz),
            _appointment(lead, now, tz),
            _job(lead, tz),
            _payment(lead),
        ],
    )


def lead_for_trace(leads: QuerySet[Lead], public_id: str) -> Lead | None:
    """The lead, loaded with what every question reads (scope it first)."""
    return (
        leads.select_related("business", "contact", "owner__user")
        .prefetch_related("contact__points")
        .filter(public_id=public_id)
        .first()
    )


# ------------------------------------------------------------ in SQL, for many


class JsonbHasKey(Func):
    """`jsonb_exists(list, text)`: is the text an element of a JSON list (the `?` operator)."""

    function = "jsonb_exists"
    output_field = BooleanField()


def _checks(now: datetime) -> dict[str, Any]:
    """Each question as a boolean SQL expression over Lead, by the same rules
    as the functions above."""
    since = now - CONVERSATION_WINDOW
    contact = OuterRef("contact_id")
    valid_points = ContactPoint.objects.filter(contact_id=contact, is_valid=True)
    granted = Exists(
        ConsentState.objects.filter(
            contact_point__contact_id=contact, contact_point__is_valid=True, status=ConsentStatus.GRANTED
        ).filter(
            Q(contact_point__kind="phone", channel__in=["sms", "voice"])
            | Q(contact_point__kind="email", channel="email")
        )
    )

    def state(channel: str, status: str) -> Exists:
        return Exists(ConsentState.objects.filter(contact_point_id=OuterRef("pk"), channel=channel, status=status))

    # consent_decide: no state (or unknown) on a channel, and an inbound text
    # or call from that phone within the window, allows sms and voice.
    conversation = Exists(
        valid_points.filter(kind="phone")
        .filter(
            Exists(Message.objects.filter(contact_point_id=OuterRef("pk"), direction="in", created_at__gte=since))
            | Exists(
                Call.objects.filter(
                    contact_id=OuterRef("contact_id"),
                    direction="in",
                    from_number=OuterRef("value"),
                    started_at__gte=since,
                )
            )
        )
        .filter(~state("sms", ConsentStatus.REVOKED) | ~state("voice", ConsentStatus.REVOKED))
    )
    running = Enrollment.objects.filter(lead_id=OuterRef("pk"), status__in=RUNNING)
    replied_since_start = Exists(
        Message.objects.filter(lead_id=OuterRef("lead_id"), direction="in", created_at__gt=OuterRef("created_at"))
    )
    revoked = Exists(
        ConsentState.objects.filter(
            contact_point__contact_id=OuterRef("lead__contact_id"), status=ConsentStatus.REVOKED
        )
    )
    should_stop = running.filter(
        Q(lead__stage__in=CLOSED_STAGES)
        | Q(lead__hold=True)
        | Q(lead__contact__automation_paused=True)
        | Q(JsonbHasKey(F("sequence__goal_stages"), F("lead__stage")))
        | Q(revoked)
        | (~Q(sequence__trigger__in=REPLY_DOES_NOT_STOP) & Q(replied_since_start))
    )
    refunded = Coalesce(
        Subquery(
            Refund.objects.filter(payment_id=OuterRef("pk"))
            .values("payment_id")
            .annotate(total=Sum("amount"))
            .values("total")[:1]
        ),
        Value(Decimal("0.00")),
        output_field=DecimalField(max_digits=12, decimal_places=2),
    )
    completed_job = Exists(Job.objects.filter(lead_id=OuterRef("pk"), status=Job.Status.COMPLETED))
    # consent_decide: a DM from the handle within Meta's window, and no
    # revocation of DMs, allows an Instagram reply.
    dm_window = Exists(
        valid_points.filter(kind="instagram")
        .filter(
            Exists(
                Message.objects.filter(
                    contact_point_id=OuterRef("pk"), direction="in", created_at__gt=now - MESSAGING_WINDOW
                )
            )
        )
        .filter(~state("instagram", ConsentStatus.REVOKED))
    )
    # consent_decide: a marketplace thread is answered there unless revoked.
    thread = Exists(valid_points.filter(kind="thumbtack").filter(~state("thumbtack", ConsentStatus.REVOKED))) | Exists(
        valid_points.filter(kind="yelp").filter(~state("yelp", ConsentStatus.REVOKED))
    )
    return {
        "source": Exists(
            LeadTouch.objects.filter(lead_id=OuterRef("pk")).filter(
                Q(source__isnull=False) | Q(inbound_event__isnull=False)
            )
        ),
        "may_contact": granted | conversation | dm_window | thread,
        "next_action_owner": Q(stage__in=CLOSED_STAGES)
        | (Q(owner__isnull=False) & ~Q(next_action="") & Q(next_action_due_at__isnull=False)),
        "stop_rule": ~Exists(should_stop),
        "appointment_happened": Exists(
            Appointment.objects.filter(lead_id=OuterRef("pk"), status=Appointment.Status.HELD)
        )
        | completed_job,
        "job_completed": completed_job,
        "payment_collected": Exists(
            Payment.objects.filter(lead_id=OuterRef("pk")).annotate(refunded=refunded).filter(amount__gt=F("refunded"))
        ),
    }


def trace_break_annotation(now: datetime | None = None) -> Case:
    """A SQL expression over Lead: the key of its first break, or NULL."""
    checks = _checks(now or timezone.now())
    return Case(
        *[When(~Q(checks[key]), then=Value(key)) for key in KEYS],
        default=Value(None),
        output_field=CharField(),
    )


def first_source_key(lead_ref: str = "pk", default: str = "unknown") -> Coalesce:
    """The lead's first touch: its source key, else its provider (`lead_ref`
    names the lead's id on the outer query: "pk" over Lead, "lead_id" over a
    payment)."""
    first = LeadTouch.objects.filter(lead_id=OuterRef(lead_ref)).order_by("received_at", "id")
    return Coalesce(
        Subquery(first.values("source__key")[:1]),
        Subquery(first.values("provider")[:1]),
        Value(default),
        output_field=CharField(),
    )


@dataclass(frozen=True)
class LeakRow:
    period: datetime | None
    source: str
    leads: int
    breaks: dict[str, int]

    @property
    def unbroken(self) -> int:
        return self.breaks.get("", 0)


@dataclass(frozen=True)
class LeakAudit:
    rows: list[LeakRow]
    totals: dict[str, int]
    leads: int


def leak_audit(
    leads: QuerySet[Lead],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    period: str = "month",
    tz: Any = None,
    now: datetime | None = None,
) -> LeakAudit:
    """First breaks counted by period (of arrival) and source, in one query
    (and one to turn JIT off, see agents.reporting.sql). Test leads are not
    counted: nothing was promised to a provider's test submission."""
    leads = leads.filter(is_test=False)
    if since:
        leads = leads.filter(created_at__gte=since)
    if until:
        leads = leads.filter(created_at__lt=until)
    grouped = (
        leads.annotate(
            brk=trace_break_annotation(now),
            src=first_source_key(),
            period=Trunc("created_at", period, tzinfo=tz),
        )
        .values("period", "src", "brk")
        .annotate(n=Count("pk"))
        .order_by()
    )
    table: dict[tuple[Any, str], dict[str, int]] = {}
    totals: dict[str, int] = dict.fromkeys([*KEYS, ""], 0)
    with without_jit():
        grouped_rows = list(grouped)
    for row in grouped_rows:
        key = row["brk"] or ""
        cell = table.setdefault((row["period"], row["src"]), {})
        cell[key] = cell.get(key, 0) + row["n"]
        totals[key] += row["n"]
    rows = [
        LeakRow(period=p, source=s, leads=sum(breaks.values()), breaks=breaks)
        for (p, s), breaks in sorted(table.items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or 0, kv[0][1]))
    ]
    return LeakAudit(rows=rows, totals=totals, leads=sum(totals.values()))


def lead_first_breaks(leads: QuerySet[Lead], *, now: datetime | None = None) -> dict[str, str | None]:
    """Each lead's first break, computed in SQL (for checks and the API of many)."""
    with without_jit():
        return dict(leads.annotate(brk=trace_break_annotation(now)).values_list("public_id", "brk"))
