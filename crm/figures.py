"""Headline figures: the few numbers a page or the daily brief opens with,
each beside the same number for the periods it is compared with.

One type for every page and the brief's email, so a change reads the same
everywhere ("+3 vs the 7 days before", "−$120 vs Tuesday"). It lives here,
below the reports and the brief, because both build them; the markup is
`templates/leadops/reports/_headlines.html`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

Number = int | Decimal | None


def count_text(value: Number) -> str:
    return "—" if value is None else f"{value:,}"


@dataclass(frozen=True)
class Change:
    """The figure against one earlier period."""

    previous: Number
    against: str  # "the 7 days before", "Tuesday", "last Wednesday"
    text: str  # "+3", "−$120", "same", or "—" when either side is missing
    trend: str  # up, down or flat


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    value: Number
    text: str
    changes: tuple[Change, ...] = ()
    # Opt-outs, breaks and cost per booking are better lower: their rise is bad news.
    lower_is_better: bool = False

    @property
    def trend(self) -> str:
        """Colours the arrow (never the only signal: the change is signed):
        against the last comparison given, the widest (a week for the brief)."""
        return self.changes[-1].trend if self.changes else "flat"

    @property
    def tone(self) -> str:
        """good, bad or flat: colours the arrow, which points the way the number went."""
        if self.trend == "flat":
            return "flat"
        return "good" if (self.trend == "up") != self.lower_is_better else "bad"

    @property
    def change(self) -> str:
        """The first comparison's change; "" for a figure compared with nothing."""
        return self.changes[0].text if self.changes else ""

    @property
    def is_zero(self) -> bool:
        """Nothing on any side: the brief's email leaves such a day out."""
        return not any([self.value, *(c.previous for c in self.changes)])


def figure(
    key: str,
    label: str,
    value: Number,
    *compared: tuple[Number, str],
    fmt: Callable[[Number], str] = count_text,
    delta_fmt: Callable[[Number], str] | None = None,
    lower_is_better: bool = False,
) -> Figure:
    """`value` against each `(previous, against)`, all formatted with `fmt`
    (money, counts, ratios) and the changes with `delta_fmt` when a change
    is not written like the figure (a rate changes by points: "92%", "+3 pts");
    a change is signed so it reads without colour. A queue read as it stands
    now is compared with nothing."""
    changes = tuple(_change(value, previous, against, delta_fmt or fmt) for previous, against in compared)
    return Figure(key, label, value, fmt(value), changes, lower_is_better)


def rate(value: float | None) -> Decimal | None:
    """A float rate (0.923) as a figure's value: exact enough to compare."""
    return None if value is None else Decimal(str(round(value, 4)))


def _change(value: Number, previous: Number, against: str, fmt: Callable[[Number], str]) -> Change:
    if value is None or previous is None:
        return Change(previous, against, "—", "flat")
    delta = Decimal(value) - Decimal(previous)
    if not delta:
        return Change(previous, against, "same", "flat")
    sign = "+" if delta > 0 else "\u2212"
    shown = abs(delta) if isinstance(value, Decimal) or isinstance(previous, Decimal) else int(abs(delta))
    return Change(previous, against, sign + fmt(shown), "up" if delta > 0 else "down")


def before_words(length: timedelta) -> str:
    """The previous period of equal length, as the headlines name it."""
    days = length.days
    return f"the {days} days before" if days > 1 else "the day before" if days == 1 else "the period before"
