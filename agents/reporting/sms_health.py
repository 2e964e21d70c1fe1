"""SMS health: whether a business's texts reach people, and what makes them
opt out — the figures carriers watch before they filter or suspend a 10DLC
sender.

Over a window (the last 7 days by default), per business and per sending
number:

- **sent**: texts handed to the carrier (Twilio took them);
- **delivery rate**: delivered ÷ the texts whose fate is known (delivered,
  undelivered or failed) — a text still "sent" is not counted either way;
- **carrier errors**, grouped by Twilio's code: 30003 unreachable, 30005
  unknown number, 30006 landline, 30007 filtered (carrier spam filtering),
  30008 unknown error, 21610 opted out at the carrier, anything else "other";
- **opt-outs per 100 texts**: SMS revocations (STOP, plain words, a carrier
  opt-out) of the business's people in the window, per 100 texts sent;
- **reply rate**: the people texted who wrote back within a day.

An opt-out is laid at the door of the last automated text the person got
before it (within OPT_OUT_BLAME): its template and, for a sequence's step,
the sequence and the step's number — so the figures by template and by step
say which automation drives people away. A person-to-person text is never
blamed: a person answering a person is not what carriers filter.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from agents.followup.sequences.pauses import sequence_pause
from crm.models import Business, ConsentEvent, Message, Sequence
from crm.services.exceptions import manager_exception_open

WINDOW = timedelta(days=7)
OPT_OUT_BLAME = timedelta(days=7)
REPLY_WITHIN = timedelta(days=1)
HANDED_OVER = (Message.Status.SENT, Message.Status.DELIVERED, Message.Status.UNDELIVERED, Message.Status.FAILED)
FINAL = (Message.Status.DELIVERED, Message.Status.UNDELIVERED, Message.Status.FAILED)
ERROR_GROUPS = {
    "30003": "unreachable",
    "30005": "unknown number",
    "30006": "landline",
    "30007": "filtered",
    "30008": "unknown error",
    "21610": "opted out at the carrier",
}
FILTERED = "30007"


def _rate(part: int, whole: int, per: int = 1) -> float | None:
    return part * per / whole if whole else None


@dataclass
class Row:
    """The figures of one number, template or sequence step."""

    key: str
    sent: int = 0
    delivered: int = 0
    final: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    opt_outs: int = 0

    @property
    def delivery_rate(self) -> float | None:
        return _rate(self.delivered, self.final)

    @property
    def opt_outs_per_100(self) -> float | None:
        return _rate(self.opt_outs, self.sent, 100)

    @property
    def filtered_rate(self) -> float | None:
        return _rate(self.errors.get(FILTERED, 0), self.sent)

    def error_groups(self) -> list[tuple[str, str, int]]:
        """(code, its name, count), most first; codes outside ERROR_GROUPS as "other"."""
        return sorted(
            ((code, ERROR_GROUPS.get(code, "other"), n) for code, n in self.errors.items()),
            key=lambda item: (-item[2], item[0]),
        )


@dataclass
class Health:
    business: Business
    since: datetime
    until: datetime
    total: Row
    numbers: list[Row]
    templates: list[Row]
    steps: list[Row]  # key: "<sequence> step <n>"
    texted: int = 0
    replied: int = 0

    @property
    def reply_rate(self) -> float | None:
        return _rate(self.replied, self.texted)


def step_of(idempotency_key: str | None, sequences: dict[str, str]) -> str:
    """ "<sequence key> step <n>" (counting from 1) for a sequence step's text, else ""."""
    parts = (idempotency_key or "").split(":")
    if len(parts) != 3 or parts[0] != "seq" or not parts[2].isdigit():
        return ""
    sequence = sequences.get(parts[1])
    return f"{sequence} step {int(parts[2]) + 1}" if sequence else ""


def sms_health(business: Business, *, until: datetime, window: timedelta = WINDOW) -> Health:
    """The business's SMS health over the `window` before `until`."""
    since = until - window
    texts: list[dict[str, Any]] = [
        dict(row)
        for row in Message.objects.filter(
            business=business,
            channel="sms",
            direction="out",
            status__in=HANDED_OVER,
            created_at__gte=since - OPT_OUT_BLAME,
            created_at__lt=until,
        )
        .order_by("created_at", "pk")
        .values(
            "pk",
            "contact_point_id",
            "from_number",
            "template_key",
            "automated",
            "idempotency_key",
            "status",
            "error_code",
            "created_at",
            "enrollment__public_id",
            "enrollment__sequence__key",
        )
    ]
    sequences = {
        t["enrollment__public_id"]: t["enrollment__sequence__key"] for t in texts if t["enrollment__public_id"]
    }
    total = Row("all")
    numbers: dict[str, Row] = {}
    templates: dict[str, Row] = {}
    steps: dict[str, Row] = {}
    texted: set[int] = set()
    for text in texts:
        if text["created_at"] < since:
            continue  # read only to blame an opt-out early in the window
        rows = [total, numbers.setdefault(text["from_number"] or "—", Row(text["from_number"] or "—"))]
        if text["automated"] and text["template_key"]:
            rows.append(templates.setdefault(text["template_key"], Row(text["template_key"])))
        step = step_of(text["idempotency_key"], sequences)
        if step:
            rows.append(steps.setdefault(step, Row(step)))
        for row in rows:
            row.sent += 1
            row.delivered += text["status"] == Message.Status.DELIVERED
            row.final += text["status"] in FINAL
            if text["error_code"]:
                row.errors[text["error_code"]] += 1
        if text["contact_point_id"]:
            texted.add(text["contact_point_id"])
    _opt_outs(business, texts, sequences, since, until, total, numbers, templates, steps)
    replied = set(
        Message.objects.filter(
            business=business,
            channel="sms",
            direction="in",
            contact_point_id__in=texted,
            created_at__gte=since,
            created_at__lt=until + REPLY_WITHIN,
        ).values_list("contact_point_id", flat=True)
    )
    return Health(
        business=business,
        since=since,
        until=until,
        total=total,
        numbers=sorted(numbers.values(), key=lambda r: -r.sent),
        templates=sorted(templates.values(), key=lambda r: (-(r.opt_outs_per_100 or 0), -r.sent)),
        steps=sorted(steps.values(), key=lambda r: (-(r.opt_outs_per_100 or 0), -r.sent)),
        texted=len(texted),
        replied=len(replied),
    )


def _opt_outs(
    business: Business,
    texts: list[dict[str, Any]],
    sequences: dict[str, str],
    since: datetime,
    until: datetime,
    total: Row,
    numbers: dict[str, Row],
    templates: dict[str, Row],
    steps: dict[str, Row],
) -> None:
    """Each SMS revocation in the window counted for the business and for
    the number, template and step of the last automated text before it."""
    revocations = ConsentEvent.objects.filter(
        Q(business=business), channel="sms", action="revoke", at__gte=since, at__lt=until
    ).values_list("contact_point_id", "at")
    by_point: defaultdict[int | None, list[dict[str, Any]]] = defaultdict(list)
    for text in texts:
        by_point[text["contact_point_id"]].append(text)
    for point, at in revocations:
        total.opt_outs += 1
        before = [t for t in by_point.get(point, []) if t["automated"] and at - OPT_OUT_BLAME <= t["created_at"] <= at]
        if not before:
            continue
        last = before[-1]
        number = numbers.get(last["from_number"] or "—")
        if number is not None:
            number.opt_outs += 1
        if last["template_key"] in templates:
            templates[last["template_key"]].opt_outs += 1
        step = step_of(last["idempotency_key"], sequences)
        if step in steps:
            steps[step].opt_outs += 1


# --- the limits, and the brake --------------------------------------------------------------

ACTOR = "agent:sms_health"
EXCEPTION_KIND = "sms_health"
# Past these, in the window, a sequence's texts pause it (the business file's
# policy.sms_health overrides each): opt-outs per 100 texts sent, texts
# filtered by carriers (30007) as a percent of texts sent, and the texts a
# step must have sent before its rates are judged at all.
DEFAULT_LIMITS = {"opt_outs_per_100": 1.0, "filtered_percent": 2.0, "min_sends": 20.0}


def limits_of(business: Business) -> dict[str, float]:
    return {**DEFAULT_LIMITS, **(business.sms_health or {})}


def over_limits(row: Row, limits: dict[str, float]) -> str:
    """Why the row's texts are past a limit ("" when they are not, or when
    too few were sent to judge)."""
    if row.sent < limits["min_sends"]:
        return ""
    why = []
    per_100 = row.opt_outs_per_100 or 0.0
    if per_100 > limits["opt_outs_per_100"]:
        why.append(f"{per_100:.1f} opt-outs per 100 texts (limit {limits['opt_outs_per_100']:g})")
    filtered = (row.filtered_rate or 0.0) * 100
    if filtered > limits["filtered_percent"]:
        why.append(f"{filtered:.1f}% filtered by carriers (limit {limits['filtered_percent']:g}%)")
    return " and ".join(why)


@dataclass(frozen=True)
class Brake:
    """A sequence the check paused (or found paused), and why."""

    sequence: str
    step: int
    template: str
    why: str
    paused_now: bool


def sms_health_check(business: Business, *, now: datetime) -> list[Brake]:
    """Pause each sequence one of whose text steps is past a limit, and tell
    the manager which template and step did it (one open item per
    sequence). Person-to-person texts are never paused: only the automated
    paths whose own texts crossed the line. A template past a limit that no
    sequence sends (the first acknowledgement, a missed-call text) is told
    to the manager, not paused: the first answer to a person who asked is
    not the carriers' worry, and its wording is a person's to fix."""
    health = sms_health(business, until=now)
    limits = limits_of(business)
    brakes = []
    for row in health.steps:
        why = over_limits(row, limits)
        if not why:
            continue
        key, _, number = row.key.rpartition(" step ")
        sequence = Sequence.objects.select_related("business").filter(business=business, key=key).first()
        if sequence is None:
            continue
        steps = sequence.steps or []
        index = int(number) - 1
        template = str(steps[index].get("template") or "") if 0 <= index < len(steps) else ""
        reason = f"step {number} ({template or 'no template'}): {why} over the last {WINDOW.days} days"
        paused_now = sequence_pause(sequence, reason=reason, actor=ACTOR, now=now)
        if paused_now:
            manager_exception_open(
                business_id=business.pk,
                kind=EXCEPTION_KIND,
                subject=sequence.public_id,
                detail=f"Sequence {sequence.key} paused: {reason}. Fix the template, then resume it.",
            )
        brakes.append(Brake(sequence.key, int(number), template, why, paused_now))
    in_sequences = {brake.template for brake in brakes}
    for row in health.templates:
        why = over_limits(row, limits)
        if why and row.key not in in_sequences and not _sent_by_a_sequence(business, row.key):
            manager_exception_open(
                business_id=business.pk,
                kind=EXCEPTION_KIND,
                subject=f"template:{row.key}"[:64],
                detail=f"Template {row.key}: {why} over the last {WINDOW.days} days. Review its wording.",
            )
    return brakes


def _sent_by_a_sequence(business: Business, template: str) -> bool:
    return any(
        step.get("template") == template
        for steps in Sequence.objects.filter(business=business).values_list("steps", flat=True)
        for step in steps or []
    )


def sms_health_sweep(*, now: datetime) -> dict[str, int]:
    """The periodic job: every business checked; how many sequences it paused."""
    paused = 0
    for business in Business.objects.order_by("pk"):
        paused += sum(brake.paused_now for brake in sms_health_check(business, now=now))
    return {"paused": paused}
