"""Revenue attribution: what each source, campaign, ad and owner produced.

Every figure comes from its own records and is counted at its own time:
leads when they arrived, contacted at the first human contact, booked when
an appointment was made, held when it was held, estimates when sent, won when
the lead closed won, jobs when completed, invoiced when issued, collected when
a payment was received and refunded when the refund was made. A booking or an
estimate is never money; collected is payments only, net is collected minus
refunds. Money that no lead explains yet (an unmatched payment) still counts,
under its own key, so the report's totals reconcile to the cent with the
payments and refunds of the period.

A lead's key is read from its first or its latest source touch (owner: its
current owner).

Money is shown two ways, side by side: by the date it came in (`collected`,
`refunded`, `net`: what the period earned), and by the date of the click that
brought its lead (`collected_by_click`, `refunded_by_click`, `net_by_click`:
everything the period's clicks have earned so far, whenever it was paid; the
click is the attributed touch, the first or latest as `touch` says). Money no
lead explains has no click: it counts by payment date only.

A repeat customer is a lead whose contact had paid for an earlier job (a
payment on another lead, received before this lead came in). By default
(`repeat=exclude`) such a lead is not credited to its source, campaign or ad:
it and its money count under "(repeat customer)", so totals still reconcile;
with `repeat=include` it counts under its touch like any other. Either way
`repeat_leads` says how many of a row's leads are repeat customers. Grouped by
owner, a repeat customer stays with the owner who worked it. The report is one set-based query: every lead's key once (a
CTE that picks each lead's touch with DISTINCT ON in one sorted pass), then
one grouped SELECT per figure over its own records, joined by UNION ALL. It is
PostgreSQL SQL, written out because the ORM would compute the key with a
correlated subquery per record (seconds at 100,000 leads, see
scripts/bench_revenue.py); the values are always parameters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import Model

from crm.models import Appointment, Estimate, Invoice, Job, Lead, LeadTouch, Payment, Refund, Source, Stage, TeamMember

BY_CHOICES = ("source", "campaign", "ad", "owner")
# Every grouping the report computes: the API's, and by business (the agency
# portfolio: one row per business, keyed by its id, its unattributed money
# included; not offered to readers of the report, who pick one business).
GROUPINGS = (*BY_CHOICES, "business")
TOUCH_CHOICES = ("first", "latest")
REPEAT_CHOICES = ("exclude", "include")
# The key of repeat customers' leads when they are not credited to their touch.
REPEAT = "(repeat customer)"
# The key of money no lead explains yet (an unmatched payment and its refunds).
UNATTRIBUTED = "(unattributed)"
# The key of a lead whose touch (or owner) carries no value for the grouping.
NO_VALUE = "(none)"
ZERO = Decimal("0.00")

COUNTS = ("leads", "contacted", "booked", "held", "estimates", "won", "jobs_completed", "repeat_leads")
MONEY = ("estimates_amount", "invoiced", "collected", "refunded", "collected_by_click", "refunded_by_click")


@dataclass
class RevenueRow:
    key: str
    leads: int = 0
    contacted: int = 0
    booked: int = 0
    held: int = 0
    estimates: int = 0
    estimates_amount: Decimal = ZERO
    won: int = 0
    jobs_completed: int = 0
    invoiced: Decimal = ZERO
    collected: Decimal = ZERO
    refunded: Decimal = ZERO
    repeat_leads: int = 0
    collected_by_click: Decimal = ZERO
    refunded_by_click: Decimal = ZERO

    @property
    def net(self) -> Decimal:
        return self.collected - self.refunded

    @property
    def net_by_click(self) -> Decimal:
        return self.collected_by_click - self.refunded_by_click

    def as_dict(self) -> dict[str, Any]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["net"] = self.net
        values["net_by_click"] = self.net_by_click
        return values


@dataclass
class RevenueReport:
    currency: str
    by: str
    touch: str
    since: datetime | None
    until: datetime | None
    rows: list[RevenueRow] = field(default_factory=list)
    repeat: str = "exclude"

    @property
    def totals(self) -> RevenueRow:
        total = RevenueRow(key="total")
        for row in self.rows:
            for name in (*COUNTS, *MONEY):
                setattr(total, name, getattr(total, name) + getattr(row, name))
        return total


class ReportError(ValueError):
    """A report that cannot be computed as asked (an unknown grouping…)."""


def _tables() -> dict[str, str]:
    from django.contrib.auth import get_user_model

    models: dict[str, type[Model]] = {
        "lead": Lead,
        "touch": LeadTouch,
        "source": Source,
        "member": TeamMember,
        "user": get_user_model(),
        "appointment": Appointment,
        "estimate": Estimate,
        "job": Job,
        "invoice": Invoice,
        "payment": Payment,
        "refund": Refund,
    }
    return {name: connection.ops.quote_name(model._meta.db_table) for name, model in models.items()}


# The key of a touch, per grouping (columns of LeadTouch `t` and Source `s`).
TOUCH_VALUE = {
    "source": "COALESCE(s.key, t.provider)",
    "campaign": "COALESCE(NULLIF(t.campaign_id, ''), NULLIF(t.utm ->> 'campaign', ''))",
    "ad": "NULLIF(t.ad_id, '')",
}


def _lead_keys(bys: Sequence[str], touch: str, t: dict[str, str]) -> str:
    """The CTE `lead_key (lead_id, key_<by> for each grouping, clicked_at,
    repeat)`: every lead of the businesses once, keyed every way asked. DISTINCT
    ON picks each lead's first (or latest) touch in one sorted pass, instead
    of a correlated subquery per row; a contact's first payment is one
    grouped pass too. Keying the leads is most of a report's work, so the
    groupings a page shows side by side share it (`revenue_reports`)."""
    # Only table names and the fixed expressions above are interpolated; every
    # value (businesses, times, currency, labels) is a query parameter.
    order = "ASC" if touch == "first" else "DESC"
    values = [f"{TOUCH_VALUE[by]} AS v_{by}" for by in bys if by in TOUCH_VALUE] or ["NULL::text AS v_none"]
    repeat = "COALESCE(fp.at < l.created_at AND fp.lead_id <> l.id, FALSE)"
    owner = ""
    keys = []
    for by in bys:
        if by == "owner":
            keys.append("COALESCE(u.username, %(none)s) AS key_owner")
            owner = f"""LEFT JOIN {t["member"]} m ON m.id = l.owner_id
            LEFT JOIN {t["user"]} u ON u.id = m.user_id"""
        elif by == "business":
            keys.append("l.business_id::text AS key_business")
        else:
            keys.append(
                f"CASE WHEN %(exclude_repeat)s AND {repeat} THEN %(repeat)s ELSE COALESCE(tk.v_{by}, %(none)s) END"
                f" AS key_{by}"
            )
    # A contact's first payment, and whose it was: a lead is a repeat customer's
    # when another lead of the contact was paid before it came in.
    return f"""first_paid AS (
            SELECT DISTINCT ON (pl.contact_id) pl.contact_id, p.received_at AS at, p.lead_id
            FROM {t["payment"]} p JOIN {t["lead"]} pl ON pl.id = p.lead_id
            WHERE p.business_id = ANY(%(businesses)s)
            ORDER BY pl.contact_id, p.received_at, p.id),
        touch_key AS (
            SELECT DISTINCT ON (t.lead_id) t.lead_id, {", ".join(values)}, t.received_at AS clicked_at
            FROM {t["touch"]} t LEFT JOIN {t["source"]} s ON s.id = t.source_id
            WHERE t.business_id = ANY(%(businesses)s)
            ORDER BY t.lead_id, t.received_at {order}, t.id {order}),
        lead_key AS (
            SELECT l.id AS lead_id, {", ".join(keys)},
                COALESCE(tk.clicked_at, l.created_at) AS clicked_at, {repeat} AS repeat
            FROM {t["lead"]} l LEFT JOIN touch_key tk ON tk.lead_id = l.id
            LEFT JOIN first_paid fp ON fp.contact_id = l.contact_id
            {owner}
            WHERE l.business_id = ANY(%(businesses)s))"""  # noqa: S608


@dataclass(frozen=True)
class _Metric:
    name: str
    source: str  # FROM clause: the record as `r` (and what it needs)
    lead: str  # the lead the record belongs to (may be NULL: unattributed money)
    at: str  # when it counts; "k.clicked_at": when its lead was clicked
    where: str = "TRUE"
    distinct: bool = False  # count leads, not records
    amount: str = "NULL::numeric"  # the money each record adds to the total


# The figures counted by the date their lead was clicked: their period is
# known only once the lead is keyed.
BY_CLICK = "k.clicked_at"


def _metrics(t: dict[str, str]) -> list[_Metric]:
    # Test leads (a provider's "send test data") are no one's demand.
    lead_with = "JOIN {lead} l ON l.id = r.lead_id".format(lead=t["lead"])
    return [
        # Its total counts the repeat customers among them (see revenue_sql).
        _Metric("leads", f"{t['lead']} r", "r.id", "r.created_at", "NOT r.is_test"),
        _Metric("contacted", f"{t['lead']} r", "r.id", "r.first_response_at", "NOT r.is_test"),
        _Metric("won", f"{t['lead']} r", "r.id", "r.closed_at", f"NOT r.is_test AND r.stage = '{Stage.WON}'"),
        _Metric(
            "booked", f"{t['appointment']} r {lead_with}", "r.lead_id", "r.created_at", "NOT l.is_test", distinct=True
        ),
        _Metric(
            "held",
            f"{t['appointment']} r {lead_with}",
            "r.lead_id",
            "COALESCE(r.outcome_at, r.starts_at)",
            f"NOT l.is_test AND r.status = '{Appointment.Status.HELD}'",
            distinct=True,
        ),
        _Metric(
            "estimates",
            f"{t['estimate']} r",
            "r.lead_id",
            "r.sent_at",
            f"r.status NOT IN ('{Estimate.Status.DRAFT}', '{Estimate.Status.PENDING_APPROVAL}')",
            # Every estimate counts; only those in the report's currency add up.
            amount="CASE WHEN r.currency = %(currency)s THEN r.amount END",
        ),
        _Metric(
            "jobs_completed", f"{t['job']} r", "r.lead_id", "r.completed_at", f"r.status = '{Job.Status.COMPLETED}'"
        ),
        _Metric(
            "invoiced",
            f"{t['invoice']} r",
            "r.lead_id",
            "r.issued_at",
            f"r.currency = %(currency)s AND r.status IN ('{Invoice.Status.ISSUED}', '{Invoice.Status.PAID}')",
            amount="r.amount",
        ),
        _Metric(
            "collected",
            f"{t['payment']} r",
            "r.lead_id",
            "r.received_at",
            "r.currency = %(currency)s",
            amount="r.amount",
        ),
        _Metric(
            "refunded",
            f"{t['refund']} r JOIN {t['payment']} p ON p.id = r.payment_id",
            "p.lead_id",
            "r.refunded_at",
            "r.currency = %(currency)s",
            amount="r.amount",
        ),
        # Money by the date of its lead's click.
        _Metric(
            "collected_by_click",
            f"{t['payment']} r",
            "r.lead_id",
            BY_CLICK,
            "r.currency = %(currency)s AND r.lead_id IS NOT NULL",
            amount="r.amount",
        ),
        _Metric(
            "refunded_by_click",
            f"{t['refund']} r JOIN {t['payment']} p ON p.id = r.payment_id",
            "p.lead_id",
            BY_CLICK,
            "r.currency = %(currency)s AND p.lead_id IS NOT NULL",
            amount="r.amount",
        ),
    ]


def revenue_sql(bys: Sequence[str], touch: str, *, since: bool, until: bool, split: bool = False) -> str:
    """The whole report, grouped each way of `bys`, as one query: each
    figure's records in its own period (`facts`: metric, lead, amount, when),
    then one join of them all to the leads' keys, grouped by figure and key.
    The keyed leads are read once, not once per figure, which is most of a
    report's work on a business with many leads. With `split`, the records
    from `since` to `split` and from `split` to `until` are two periods,
    told apart by the `current` column (a page and its previous period)."""
    for by in bys:
        if by not in GROUPINGS:
            raise ReportError(f"by must be one of {', '.join(BY_CHOICES)}")
    if touch not in TOUCH_CHOICES:
        raise ReportError(f"touch must be one of {', '.join(TOUCH_CHOICES)}")
    t = _tables()

    def within(at: str) -> str:
        return (
            f"{at} IS NOT NULL"
            + (f" AND {at} >= %(since)s" if since else "")
            + (f" AND {at} < %(until)s" if until else "")
        )

    metrics = _metrics(t)
    facts = "\n            UNION ALL\n            ".join(
        f"""SELECT '{m.name}' AS metric, {m.lead} AS lead_id, r.business_id, {m.amount} AS amount,
                {"NULL::timestamptz" if m.at == BY_CLICK else m.at} AS at
            FROM {m.source}
            WHERE r.business_id = ANY(%(businesses)s)
                AND {"TRUE" if m.at == BY_CLICK else within(m.at)} AND {m.where}"""  # noqa: S608
        for m in metrics
    )
    by_click = ", ".join(f"'{m.name}'" for m in metrics if m.at == BY_CLICK)
    distinct = ", ".join(f"'{m.name}'" for m in metrics if m.distinct)
    groupings = []
    for by in bys:
        # Money no lead explains: its own row, or (by business) its business's.
        unexplained = "f.business_id::text" if by == "business" else "%(unattributed)s"
        groupings.append(
            f"""SELECT '{by}' AS grouping, {"f.at >= %(split)s" if split else "TRUE"} AS current, f.metric,
                CASE WHEN f.lead_id IS NULL THEN {unexplained} ELSE COALESCE(f.key_{by}, %(none)s) END AS key,
                CASE WHEN f.metric IN ({distinct}) THEN COUNT(DISTINCT f.lead_id) ELSE COUNT(*) END AS n,
                CASE WHEN f.metric = 'leads' THEN COUNT(*) FILTER (WHERE f.repeat) ELSE SUM(f.amount) END AS total
            FROM joined f
            GROUP BY 2, 3, 4"""  # noqa: S608
        )
    keys = ", ".join(f"k.key_{by}" for by in bys)
    return f"""WITH {_lead_keys(bys, touch, t)},
        facts AS (
            {facts}),
        joined AS (
            SELECT f.metric, f.lead_id, f.business_id, f.amount, k.repeat, {keys},
                COALESCE(f.at, k.clicked_at) AS at
            FROM facts f LEFT JOIN lead_key k ON k.lead_id = f.lead_id
            WHERE f.metric NOT IN ({by_click}) OR ({within(BY_CLICK)}))
        {" UNION ALL ".join(groupings)}"""  # noqa: S608 - table names and fixed expressions only


def revenue_report(
    business_ids: Iterable[int],
    *,
    currency: str,
    by: str = "source",
    touch: str = "first",
    since: datetime | None = None,
    until: datetime | None = None,
    repeat: str = "exclude",
) -> RevenueReport:
    """The revenue report for the given businesses, in one currency: money in
    other currencies is left out, never converted. One query, whatever the
    number of leads. `repeat`: whether repeat customers are credited to their
    touch ("include") or counted apart ("exclude", the default)."""
    return revenue_reports(
        business_ids, currency=currency, bys=(by,), touch=touch, since=since, until=until, repeat=repeat
    )[by]


def revenue_reports(
    business_ids: Iterable[int],
    *,
    currency: str,
    bys: Sequence[str],
    touch: str = "first",
    since: datetime | None = None,
    until: datetime | None = None,
    repeat: str = "exclude",
) -> dict[str, RevenueReport]:
    """The same report grouped each way of `bys` (by campaign and by source
    for the revenue page), in one query: the leads are keyed once for all."""
    bys = list(dict.fromkeys(bys))
    sql = revenue_sql(bys, touch, since=since is not None, until=until is not None)
    shape = RevenueReport(currency=currency, by="", touch=touch, since=since, until=until, repeat=repeat)
    return _reports(sql, business_ids, bys, shape, {"since": since, "until": until})[True]


def revenue_reports_and_before(
    business_ids: Iterable[int],
    *,
    currency: str,
    bys: Sequence[str],
    since: datetime,
    until: datetime,
    touch: str = "first",
    repeat: str = "exclude",
) -> tuple[dict[str, RevenueReport], dict[str, RevenueReport]]:
    """`revenue_reports` for since..until and for the period of equal length
    just before it, in the same one query: what a page's headlines compare
    with, for the price of one report (the leads are keyed once for both)."""
    bys = list(dict.fromkeys(bys))
    earlier = since - (until - since)
    sql = revenue_sql(bys, touch, since=True, until=True, split=True)
    shape = RevenueReport(currency=currency, by="", touch=touch, since=since, until=until, repeat=repeat)
    found = _reports(sql, business_ids, bys, shape, {"since": earlier, "until": until, "split": since})
    before = {by: replace(report, since=earlier, until=since) for by, report in found[False].items()}
    return found[True], before


def _reports(
    sql: str, business_ids: Iterable[int], bys: list[str], shape: RevenueReport, bounds: dict[str, Any]
) -> dict[bool, dict[str, RevenueReport]]:
    """Run a report's query; its rows by period (`current`) and grouping."""
    if shape.repeat not in REPEAT_CHOICES:
        raise ReportError(f"repeat must be one of {', '.join(REPEAT_CHOICES)}")
    params: dict[str, Any] = {
        "exclude_repeat": shape.repeat == "exclude",
        "repeat": REPEAT,
        "businesses": list(business_ids),
        "currency": shape.currency,
        "none": NO_VALUE,
        "unattributed": UNATTRIBUTED,
        **bounds,
    }
    grouped: dict[bool, dict[str, dict[str, RevenueRow]]] = {period: {by: {} for by in bys} for period in (True, False)}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for grouping, current, metric, key, count, total in cursor.fetchall():
            row = grouped[current][grouping].setdefault(key, RevenueRow(key=key))
            if metric in MONEY:
                setattr(row, metric, total if total is not None else ZERO)
            elif metric == "estimates":
                row.estimates, row.estimates_amount = count, total if total is not None else ZERO
            elif metric == "leads":
                row.leads, row.repeat_leads = count, int(total or 0)
            else:
                setattr(row, metric, count)
    reports: dict[bool, dict[str, RevenueReport]] = {True: {}, False: {}}
    for period, by_grouping in grouped.items():
        for by, rows in by_grouping.items():
            report = replace(shape, by=by)
            report.rows = sorted(rows.values(), key=lambda r: (-r.net, -r.leads, r.key))
            reports[period][by] = report
    return reports


def revenue_table(report: RevenueReport) -> list[list[Any]]:
    """The report as a table: a header, one row per key and the totals,
    counts as ints and money as Decimals (the XLSX export types them)."""
    names = ["key", *COUNTS[:5], "estimates_amount", *COUNTS[5:7], "invoiced", "collected", "refunded", "net"]
    # Added later: after the currency, so the earlier columns keep their places.
    more = ["repeat_leads", "collected_by_click", "refunded_by_click", "net_by_click"]
    lines: list[list[Any]] = [[*names, "currency", *more]]
    for row in [*report.rows, report.totals]:
        values = row.as_dict()
        lines.append([values[name] for name in names] + [report.currency] + [values[name] for name in more])
    return lines


def revenue_csv_rows(report: RevenueReport) -> list[list[str]]:
    """The report as CSV rows: the table's values as text."""
    return [[str(value) for value in line] for line in revenue_table(report)]
