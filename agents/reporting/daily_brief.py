"""The Daily Owner Brief: for one team member, only what needs their action
now, most urgent first, each with a link — and the money line.

Who sees what: an owner or manager sees their business; a setter sees only
their own leads and tasks. Items, in priority order (at most LIMIT of each
kind, then "and N more"):

1. SLA breaches — open leads whose first response is overdue and still missing;
2. fresh replies — a person wrote in the last day and nobody has answered;
3. overdue tasks — the member's own (a manager also gets unowned ones and a
   count of the team's);
4. waiting approvals — owners and managers, who decide them;
5. today's appointments — in the business's local day;
6. unmatched payments — owners and managers.

It opens with yesterday's headline numbers — new leads, booked, won,
collected — each beside the day before and the same weekday a week earlier.
They are the revenue report's figures for those local days (crm.attribution:
one definition per number, docs/reports.md), for the business (owners and
managers) or for the setter's own leads.

The money line: collected yesterday and this month (local dates) by source,
payments minus refunds, per currency. A day with nothing to do says so in one
line.

Emailed at the business's `brief_hour` (local): the hourly schedule
`leadops.daily_brief` calls `briefs_schedule`, which makes one Timer per
member and local day (dedupe key `brief:<member>:<date>`), so each member gets
at most one brief a day however often it runs; the timer runner sends it
(`brief_send`), and a failed send stays visible on the timer with its error.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, tzinfo
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Exists, OuterRef, Q, QuerySet, Sum
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone

from agents.reporting.spend import provider_name
from agents.reporting.trace import first_source_key
from approvals.models import ApprovalRequest
from crm.attribution import RevenueRow, revenue_report
from crm.figures import Figure, count_text, figure
from crm.localtime import zone_label
from crm.models import (
    CLOSED_STAGES,
    Appointment,
    Business,
    Lead,
    Message,
    Payment,
    Refund,
    Role,
    Sequence,
    Source,
    Task,
    TeamMember,
    Timer,
)
from crm.money import money_text
from crm.selectors import member_zone
from crm.services.receipts import receipt_write
from crm.services.timers import timer_handler_register

ACTOR = "agent:daily_brief"
TIMER_KIND = "reporting.brief"
LIMIT = 5
REPLY_WINDOW = timedelta(hours=24)
FULL_VIEW = (Role.OWNER, Role.MANAGER)
BRIEF_ROLES = (Role.OWNER, Role.MANAGER, Role.SETTER)
ANSWERED = ("dry_run", "queued", "sending", "sent", "delivered", "unknown")
EMPTY_LINE = "Nothing needs your action today."
# The money line's key for payments whose lead has no source.
NO_SOURCE = "unattributed"


@dataclass(frozen=True)
class BriefItem:
    priority: int
    kind: str
    title: str
    link: str
    ref: str
    at: datetime | None = None


@dataclass(frozen=True)
class MoneyLine:
    period: str  # "yesterday" or "this month"
    source: str
    currency: str
    collected: Decimal
    refunded: Decimal
    # What people call the source (spend.provider_name: "Website form"), or
    # the key itself when it names no provider; the key stays beside it.
    source_name: str = ""

    @property
    def net(self) -> Decimal:
        return self.collected - self.refunded

    @property
    def key_shown(self) -> bool:
        """Whether the key goes beside the name (not when it is the name, nor for no source)."""
        return self.source not in (self.source_name, NO_SOURCE)

    @property
    def label(self) -> str:
        """ "Website form (site)", "No source": the email's words for the source."""
        return f"{self.source_name} ({self.source})" if self.key_shown else self.source_name


# Yesterday's headline numbers: (the revenue report's figure, its label).
HEADLINES = (("leads", "New leads"), ("booked", "Booked"), ("won", "Won"), ("net", "Collected"))


@dataclass
class Brief:
    member: TeamMember
    business: Business
    local_date: Any
    items: list[BriefItem] = field(default_factory=list)
    more: dict[str, tuple[int, str]] = field(default_factory=dict)
    money: list[MoneyLine] = field(default_factory=list)
    # The zone the items' times are in, named ("America/Denver (MST)").
    zone_label: str = "UTC"
    # Yesterday's numbers, each against the day before and the same weekday a week earlier.
    headlines: list[Figure] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.items

    @property
    def headlines_label(self) -> str:
        return "Yesterday" if self.member.role in FULL_VIEW else "Yesterday, your leads"

    def money_by_period(self) -> dict[str, list[MoneyLine]]:
        out: dict[str, list[MoneyLine]] = {"yesterday": [], "this month": []}
        for line in self.money:
            out[line.period].append(line)
        return out


KINDS = {
    "sla": (1, "SLA breached"),
    # Automated texts the SMS health check stopped (agents.reporting.sms_health).
    "paused": (1, "Paused automated texts"),
    "reply": (2, "Fresh replies"),
    "task": (3, "Overdue tasks"),
    "approval": (4, "Waiting approvals"),
    "appointment": (5, "Today's appointments"),
    "payment": (6, "Unmatched payments"),
}


def _lead_link(pk: int) -> str:
    return reverse("admin:crm_lead_change", args=[pk])


def _local(business: Business, now: datetime) -> datetime:
    return now.astimezone(ZoneInfo(business.timezone or "UTC"))


def _day_bounds(local: datetime) -> tuple[datetime, datetime]:
    start = local.replace(hour=0, minute=0, second=0, microsecond=0)
    # Aware arithmetic on one tzinfo is wall-clock: the next local midnight,
    # however long the day is (DST changes).
    return start, start + timedelta(days=1)


def _leads_q(member: TeamMember, prefix: str = "") -> Q:
    p = f"{prefix}__" if prefix else ""
    q = Q(**{f"{p}business_id": member.business_id})
    if member.role not in FULL_VIEW:
        q &= Q(**{f"{p}owner_id": member.pk})
    return q


def _take(brief: Brief, kind: str, qs: QuerySet[Any], make: Any, *, more_link: str = "") -> None:
    rows = list(qs[: LIMIT + 1])
    priority, _ = KINDS[kind]
    for row in rows[:LIMIT]:
        title, link, ref, at = make(row)
        brief.items.append(BriefItem(priority, kind, title, link, ref, at))
    if len(rows) > LIMIT:
        brief.more[kind] = (qs.count() - LIMIT, more_link)


def _name(contact: Any, fallback: str) -> str:
    return contact.name if contact is not None and contact.name else fallback


def brief_build(member: TeamMember, *, now: datetime | None = None, zone: tzinfo | None = None) -> Brief:
    """The brief for one member at `now`, its times in `zone` (default the
    member's: the email; the page passes its reader's). Days are the
    business's. A fixed number of queries."""
    now = now or timezone.now()
    business = member.business
    local = _local(business, now)
    shown = zone or member_zone(member)
    today_start, today_end = _day_bounds(local)
    brief = Brief(member=member, business=business, local_date=local.date(), zone_label=zone_label(shown, at=now))
    full = member.role in FULL_VIEW
    open_leads = Lead.objects.filter(_leads_q(member)).exclude(stage__in=CLOSED_STAGES).filter(is_test=False)

    sla = (
        open_leads.filter(sla_breached_at__isnull=False, first_response_at__isnull=True)
        .select_related("contact")
        .order_by("sla_breached_at", "pk")
    )
    _take(
        brief,
        "sla",
        sla,
        lambda lead: (
            f"First response overdue: {_name(lead.contact, lead.public_id)} ({lead.public_id})",
            _lead_link(lead.pk),
            lead.public_id,
            lead.sla_breached_at,
        ),
        more_link=reverse("admin:crm_lead_changelist"),
    )

    answered = Message.objects.filter(
        lead_id=OuterRef("lead_id"), direction="out", created_at__gt=OuterRef("created_at"), status__in=ANSWERED
    )
    replies = (
        Message.objects.filter(direction="in", created_at__gte=now - REPLY_WINDOW, lead__in=open_leads)
        .exclude(Exists(answered))
        .select_related("lead__contact")
        .order_by("created_at", "pk")
    )
    _take(
        brief,
        "reply",
        replies,
        lambda m: (
            f"Reply from {_name(m.lead.contact, m.lead.public_id)}: “{m.body[:80]}”",
            reverse("workspace:thread", args=[m.lead.public_id]),
            m.public_id,
            m.created_at,
        ),
        more_link=reverse("admin:crm_message_changelist") + "?direction__exact=in",
    )

    tasks = Task.objects.filter(business_id=business.pk, status=Task.Status.OPEN, due_at__lt=now)
    mine = Q(owner_id=member.pk) | (Q(owner__isnull=True) if full else Q(pk__in=[]))
    _take(
        brief,
        "task",
        tasks.filter(mine).select_related("lead").order_by("due_at", "pk"),
        lambda t: (
            f"Overdue since {t.due_at.astimezone(shown):%a %H:%M}: {t.title}",
            _lead_link(t.lead_id) if t.lead_id else reverse("admin:crm_task_change", args=[t.pk]),
            t.public_id,
            t.due_at,
        ),
        more_link=reverse("admin:crm_task_changelist") + "?status__exact=open",
    )
    if full:
        others = tasks.exclude(mine).count()
        if others:
            brief.items.append(
                BriefItem(
                    3,
                    "task",
                    f"{others} overdue task{pluralize(others)} on the rest of the team",
                    reverse("admin:crm_task_changelist") + "?status__exact=open",
                    "",
                    None,
                )
            )

    if full:
        approvals = ApprovalRequest.objects.filter(
            business_id=business.pk, status=ApprovalRequest.Status.PENDING
        ).order_by("created_at", "pk")
        _take(
            brief,
            "approval",
            approvals,
            lambda a: (
                f"Decide: {a.summary}",
                reverse("admin:approvals_approvalrequest_change", args=[a.pk]),
                a.public_id,
                a.created_at,
            ),
            more_link=reverse("admin:approvals_approvalrequest_changelist"),
        )

    if full:
        paused = Sequence.objects.filter(business_id=business.pk, paused_at__isnull=False).order_by("paused_at", "pk")
        health = reverse("sms-health") + f"?business={business.slug}"
        _take(
            brief,
            "paused",
            paused,
            lambda s: (f"Texts paused: the {s.key} sequence — {s.paused_reason}", health, s.public_id, s.paused_at),
            more_link=health,
        )

    appointments = Appointment.objects.filter(
        business_id=business.pk,
        starts_at__gte=today_start,
        starts_at__lt=today_end,
        status__in=[Appointment.Status.SCHEDULED, Appointment.Status.CONFIRMED],
    )
    if not full:
        appointments = appointments.filter(Q(lead__owner_id=member.pk) | Q(assigned_to_id=member.pk))
    _take(
        brief,
        "appointment",
        appointments.select_related("lead__contact").order_by("starts_at", "pk"),
        lambda a: (
            f"{a.starts_at.astimezone(shown):%H:%M} appointment: {_name(a.lead.contact, a.lead.public_id)}"
            + (f" at {a.location}" if a.location else ""),
            _lead_link(a.lead_id),
            a.public_id,
            a.starts_at,
        ),
    )

    if full:
        unmatched = Payment.objects.filter(
            business_id=business.pk, match_status__in=[Payment.MatchStatus.UNMATCHED, Payment.MatchStatus.AMBIGUOUS]
        ).order_by("received_at", "pk")
        _take(
            brief,
            "payment",
            unmatched,
            lambda p: (
                f"Match payment {money_text(p.amount, p.currency, region=business.region or 'US')}"
                f" ({p.match_status}, {p.provider})",
                reverse("admin:crm_payment_change", args=[p.pk]),
                p.public_id,
                p.received_at,
            ),
            more_link=reverse("admin:crm_payment_changelist"),
        )

    brief.items.sort(key=lambda i: i.priority)
    month_start = today_start.replace(day=1)
    yesterday_start = today_start - timedelta(days=1)
    brief.headlines = headlines(member, yesterday_start)
    brief.money = _named(
        business,
        [
            *money_lines(member, "yesterday", yesterday_start, today_start),
            *money_lines(member, "this month", month_start, today_end),
        ],
    )
    return brief


def _named(business: Business, lines: list[MoneyLine]) -> list[MoneyLine]:
    """Each line with its source's name (one query for all of them)."""
    keys = {line.source for line in lines}
    providers = dict(Source.objects.filter(business_id=business.pk, key__in=keys).values_list("key", "provider"))
    names = {key: provider_name(key, providers) or key for key in keys}
    names[NO_SOURCE] = "No source"
    return [replace(line, source_name=names[line.source]) for line in lines]


def _figures(member: TeamMember, start: datetime) -> RevenueRow:
    """The revenue report's figures for the local day from `start`: the
    business's totals, or a setter's own row (by owner)."""
    end = start + timedelta(days=1)  # wall-clock arithmetic on the local zone: the next midnight, DST or not
    business = member.business
    if member.role in FULL_VIEW:
        return revenue_report([business.pk], currency=business.currency, since=start, until=end).totals
    report = revenue_report([business.pk], currency=business.currency, by="owner", since=start, until=end)
    mine = [row for row in report.rows if row.key == member.user.get_username()]
    return mine[0] if mine else RevenueRow(key=member.user.get_username())


def headlines(member: TeamMember, yesterday_start: datetime) -> list[Figure]:
    """Yesterday's headline numbers beside the day before and the same
    weekday a week earlier: three queries, one per day."""
    days = [_figures(member, yesterday_start - timedelta(days=n)) for n in (0, 1, 7)]
    day_before = f"{yesterday_start - timedelta(days=1):%A}"
    last_week = f"last {yesterday_start - timedelta(days=7):%A}"
    business = member.business

    def money(value: int | Decimal | None) -> str:
        return money_text(value, business.currency, region=business.region or "US", whole=True)

    out = []
    for key, label in HEADLINES:
        value, before, week = (getattr(day, key) for day in days)
        fmt = money if key == "net" else count_text
        out.append(figure(key, label, value, (before, day_before), (week, last_week), fmt=fmt))
    return out


def money_lines(member: TeamMember, period: str, since: datetime, until: datetime) -> list[MoneyLine]:
    """Payments minus refunds in [since, until), by the lead's first source and currency."""
    payments = (
        Payment.objects.filter(business_id=member.business_id, received_at__gte=since, received_at__lt=until)
        .annotate(src=first_source_key("lead_id", default=NO_SOURCE))
        .values("src", "currency")
        .annotate(total=Sum("amount"))
        .order_by()
    )
    refunds = (
        Refund.objects.filter(business_id=member.business_id, refunded_at__gte=since, refunded_at__lt=until)
        .annotate(src=first_source_key("payment__lead_id", default=NO_SOURCE))
        .values("src", "currency")
        .annotate(total=Sum("amount"))
        .order_by()
    )
    if member.role not in FULL_VIEW:
        payments = payments.filter(lead__owner_id=member.pk)
        refunds = refunds.filter(payment__lead__owner_id=member.pk)
    cells: dict[tuple[str, str], list[Decimal]] = {}
    for row in payments:
        cells.setdefault((row["src"], row["currency"]), [Decimal("0.00"), Decimal("0.00")])[0] += row["total"]
    for row in refunds:
        cells.setdefault((row["src"], row["currency"]), [Decimal("0.00"), Decimal("0.00")])[1] += row["total"]
    return [
        MoneyLine(period, src, currency, paid, refunded) for (src, currency), (paid, refunded) in sorted(cells.items())
    ]


def brief_text(brief: Brief, *, base_url: str | None = None) -> str:
    """The brief as plain text (the email). An empty day is one line."""
    base = (settings.PUBLIC_BASE_URL if base_url is None else base_url).rstrip("/")
    lines: list[str] = []
    if brief.is_empty:
        lines.append(EMPTY_LINE)
    else:
        lines.append(f"{brief.business.name} — {brief.local_date:%A %d %B %Y}: {_things(len(brief.items))} now.")
        for n, item in enumerate(brief.items, 1):
            lines.append(f"{n}. [{KINDS[item.kind][1]}] {item.title} — {base}{item.link}")
        for kind, (count, link) in brief.more.items():
            lines.append(f"   …and {count} more {KINDS[kind][1].lower()}" + (f": {base}{link}" if link else ""))
        lines.append(f"Times in {brief.zone_label}.")
    headline = headline_text(brief)
    if headline:
        # Right under the first line: the numbers an owner asks first.
        lines.insert(1, headline)
    for period, money in brief.money_by_period().items():
        if money:
            parts = [
                f"{m.label} {m.net} {m.currency}" + (f" (refunds {m.refunded})" if m.refunded else "") for m in money
            ]
            lines.append(f"Collected {period}: " + "; ".join(parts))
    return "\n".join(lines)


def _things(count: int) -> str:
    return "1 thing needs you" if count == 1 else f"{count} things need you"


def headline_text(brief: Brief) -> str:
    """Yesterday's headline numbers in words; "" for a business with no
    figures on any of the three days (an empty day stays one line)."""
    if all(h.is_zero for h in brief.headlines):
        return ""
    return "Yesterday: " + "; ".join(
        f"{h.label.lower()} {h.text} (" + ", ".join(f"{c.text} vs {c.against}" for c in h.changes) + ")"
        for h in brief.headlines
    )


def _recipients(business: Business) -> QuerySet[TeamMember]:
    return TeamMember.objects.filter(business=business, is_active=True, role__in=BRIEF_ROLES).select_related("user")


def briefs_schedule(*, now: datetime | None = None) -> int:
    """Make today's brief timer for every member of every business whose
    local hour has reached its `brief_hour`; returns how many were new.
    Idempotent: the dedupe key is one per member and local day."""
    now = now or timezone.now()
    created = 0
    for business in Business.objects.all():
        local = _local(business, now)
        if local.hour < business.brief_hour:
            continue
        day = local.date().isoformat()
        timers = [
            Timer(
                business=business,
                kind=TIMER_KIND,
                due_at=now,
                payload={"member": m.pk, "date": day},
                dedupe_key=f"brief:{m.public_id}:{day}",
            )
            for m in _recipients(business)
            if m.email or m.user.email
        ]
        existing = set(
            Timer.objects.filter(dedupe_key__in=[t.dedupe_key for t in timers]).values_list("dedupe_key", flat=True)
        )
        fresh = [t for t in timers if t.dedupe_key not in existing]
        Timer.objects.bulk_create(fresh, ignore_conflicts=True)
        created += len(fresh)
    return created


def brief_send(timer: Timer) -> None:
    """The timer handler: build and email one member's brief, with a receipt."""
    member = TeamMember.objects.select_related("business", "user").get(pk=timer.payload["member"])
    if not member.is_active:
        return
    brief = brief_build(member)
    email = member.email or member.user.email
    subject = f"Daily brief — {member.business.name} — {timer.payload.get('date', '')}"
    send_mail(subject, brief_text(brief), None, [email])
    receipt_write(
        business=member.business,
        actor=ACTOR,
        action="brief.sent",
        subject=member.public_id,
        after={"date": timer.payload.get("date"), "items": len(brief.items), "to": email},
    )


def register() -> None:
    timer_handler_register(TIMER_KIND, brief_send, own_job=True)  # sends email: the brief job runs it
