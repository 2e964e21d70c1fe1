"""The funnel: how many leads reached each stage, by source (or owner) and
period of arrival, with the conversion from each stage to the next; speed to
lead (median and p90) by source and by owner; show rate, close rate and
no-show recovery rate. Everything is counted in SQL over sets, so the cost
does not grow with the number of rows shown.

A stage is "reached" by its own record, not by the lead's current stage, so a
lead that was booked and is now lost still counts as booked:

| stage | reached when |
|---|---|
| leads | the lead arrived in the period |
| contacted | a person reached it (`first_response_at`): an automated acknowledgement is not contact |
| booked | an appointment was made |
| held | an appointment was held |
| estimate | an estimate was sent |
| won | the lead is won, or an estimate was accepted, or a job exists |
| paid | a payment not refunded in full |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from itertools import pairwise
from typing import Any

from django.db.models import (
    Aggregate,
    CharField,
    Count,
    DecimalField,
    Exists,
    F,
    FloatField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Trunc

from agents.reporting.sql import without_jit
from agents.reporting.trace import first_source_key
from crm.models import Appointment, Estimate, Job, Lead, Payment, Refund, Stage

STAGES: list[tuple[str, str]] = [
    ("leads", "Leads"),
    ("contacted", "Contacted"),
    ("booked", "Booked"),
    ("held", "Appointment held"),
    ("estimate", "Estimate sent"),
    ("won", "Won"),
    ("paid", "Paid"),
]
STAGE_KEYS = [key for key, _ in STAGES]
PERIODS = ("day", "week", "month")
GROUPS = ("source", "owner")


class Percentile(Aggregate):
    """PostgreSQL's `percentile_cont(p) WITHIN GROUP (ORDER BY expr)`."""

    function = "percentile_cont"
    template = "%(function)s(%(percentile)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, percentile: float, **extra: Any) -> None:
        super().__init__(expression, percentile=float(percentile), **extra)


def _reached() -> dict[str, Any]:
    lead = OuterRef("pk")
    refunds = (
        Refund.objects.filter(payment_id=OuterRef("pk")).values("payment_id").annotate(t=Sum("amount")).values("t")[:1]
    )
    net_payment = Payment.objects.filter(lead_id=lead).annotate(
        refunded=Coalesce(
            Subquery(refunds), Value(Decimal("0.00")), output_field=DecimalField(max_digits=12, decimal_places=2)
        )
    )
    return {
        # The revenue report's and the brief's definition (docs/reports.md): a person reached the lead.
        "contacted": Q(first_response_at__isnull=False),
        "booked": Exists(Appointment.objects.filter(lead_id=lead)),
        "held": Exists(Appointment.objects.filter(lead_id=lead, status=Appointment.Status.HELD)),
        "estimate": Exists(
            Estimate.objects.filter(lead_id=lead, status__in=["sent", "accepted", "declined", "expired"])
        ),
        "won": Q(stage=Stage.WON)
        | Exists(Estimate.objects.filter(lead_id=lead, status="accepted"))
        | Exists(Job.objects.filter(lead_id=lead).exclude(status=Job.Status.CANCELED)),
        "paid": Exists(net_payment.filter(amount__gt=F("refunded"))),
    }


def group_key(by: str) -> Any:
    if by == "owner":
        return Coalesce(F("owner__user__username"), Value("unowned"), output_field=CharField())
    return first_source_key()


@dataclass
class FunnelRow:
    period: datetime | None
    key: str
    counts: dict[str, int]

    @property
    def conversions(self) -> list[tuple[str, float | None]]:
        """Each stage after the first, as a share of the stage before it."""
        out = []
        for prev, stage in pairwise(STAGE_KEYS):
            base = self.counts[prev]
            out.append((stage, self.counts[stage] / base if base else None))
        return out

    @property
    def close_rate(self) -> float | None:
        """Won of those whose appointment was held."""
        return self.counts["won"] / self.counts["held"] if self.counts["held"] else None


@dataclass
class SpeedRow:
    key: str
    n: int
    median_seconds: float | None
    p90_seconds: float | None


@dataclass
class Rates:
    held: int = 0
    no_show: int = 0
    no_show_leads: int = 0
    recovered: int = 0

    @property
    def show_rate(self) -> float | None:
        total = self.held + self.no_show
        return self.held / total if total else None

    @property
    def recovery_rate(self) -> float | None:
        return self.recovered / self.no_show_leads if self.no_show_leads else None


@dataclass
class Funnel:
    rows: list[FunnelRow]
    total: FunnelRow
    by_key: list[FunnelRow]
    speed_by_source: list[SpeedRow]
    speed_by_owner: list[SpeedRow]
    rates: Rates
    by: str
    period: str
    notes: list[str] = field(default_factory=list)


def _count_stages(qs: QuerySet[Lead], group: list[str]) -> list[dict[str, Any]]:
    reached = _reached()
    flags = {f"r_{k}": v for k, v in reached.items()}
    aggregates = {"leads": Count("pk")} | {k: Count("pk", filter=Q(**{f"r_{k}": True})) for k in reached}
    return list(qs.annotate(**flags).values(*group).annotate(**aggregates).order_by())


def _speed(qs: QuerySet[Lead], key: Any) -> list[SpeedRow]:
    rows = (
        qs.filter(speed_to_lead_seconds__isnull=False)
        .annotate(k=key)
        .values("k")
        .annotate(
            n=Count("pk"),
            median=Percentile("speed_to_lead_seconds", 0.5),
            p90=Percentile("speed_to_lead_seconds", 0.9),
        )
        .order_by("k")
    )
    return [SpeedRow(r["k"], r["n"], r["median"], r["p90"]) for r in rows]


def _rates(qs: QuerySet[Lead]) -> Rates:
    """Show and no-show recovery counts in one query over the appointments."""
    # Recovered: after a no-show, the lead still had an appointment held (or
    # was won) — the no-show recovery path did its job. A lead counts once
    # however many no-shows it had (COUNT DISTINCT lead).
    later_held = Appointment.objects.filter(
        lead_id=OuterRef("lead_id"), status=Appointment.Status.HELD, starts_at__gt=OuterRef("starts_at")
    )
    no_show = Q(status=Appointment.Status.NO_SHOW)
    recovered = Q(Exists(later_held)) | Q(lead__stage=Stage.WON)
    counted = Appointment.objects.filter(lead__in=qs.values("pk")).aggregate(
        held=Count("pk", filter=Q(status=Appointment.Status.HELD)),
        no_show=Count("pk", filter=no_show),
        no_show_leads=Count("lead_id", distinct=True, filter=no_show),
        recovered=Count("lead_id", distinct=True, filter=no_show & recovered),
    )
    return Rates(**counted)


def funnel_report(
    leads: QuerySet[Lead],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    period: str = "month",
    by: str = "source",
    tz: Any = None,
) -> Funnel:
    """The funnel over `leads` (already scoped to what the user may see) that
    arrived in [since, until): five queries (JIT off, the stages, speed by
    source and by owner, the rates), whatever the number of leads."""
    if period not in PERIODS:
        raise ValueError(f"period must be one of {', '.join(PERIODS)}")
    if by not in GROUPS:
        raise ValueError(f"by must be one of {', '.join(GROUPS)}")
    # A provider's test lead (Google's "send test data") is stored and visible,
    # but it is not demand: like routing, sends and QA, the funnel skips it.
    leads = leads.filter(is_test=False)
    if since:
        leads = leads.filter(created_at__gte=since)
    if until:
        leads = leads.filter(created_at__lt=until)
    keyed = leads.annotate(k=group_key(by), p=Trunc("created_at", period, tzinfo=tz))
    with without_jit():
        rows = [
            FunnelRow(period=r["p"], key=r["k"], counts={s: r[s] for s in STAGE_KEYS})
            for r in _count_stages(keyed, ["p", "k"])
        ]
        speed_by_source = _speed(leads, first_source_key())
        speed_by_owner = _speed(leads, group_key("owner"))
        rates = _rates(leads)
    rows.sort(key=lambda r: (r.period is None, r.period or 0, r.key))
    by_key: dict[str, FunnelRow] = {}
    for row in rows:
        acc = by_key.setdefault(row.key, FunnelRow(None, row.key, dict.fromkeys(STAGE_KEYS, 0)))
        for s in STAGE_KEYS:
            acc.counts[s] += row.counts[s]
    total = FunnelRow(None, "all", {s: sum(r.counts[s] for r in rows) for s in STAGE_KEYS})
    return Funnel(
        rows=rows,
        total=total,
        by_key=sorted(by_key.values(), key=lambda r: (-r.counts["leads"], r.key)),
        speed_by_source=speed_by_source,
        speed_by_owner=speed_by_owner,
        rates=rates,
        by=by,
        period=period,
    )
