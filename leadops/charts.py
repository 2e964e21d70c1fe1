"""Charts drawn on the server as inline SVG: no script, no outside asset, and
readable without colour (each bar carries its number)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from crm.figures import Figure, figure, rate

BAR_HEIGHT = 22
GAP = 8
LABEL_WIDTH = 150
CHART_WIDTH = 620


def bar_chart(
    bars: Sequence[tuple[str, float, str]], *, chart_id: str, title: str, unit: str = "", color: str = "#417690"
) -> SafeString:
    """Horizontal bars, one per (label, value, caption), scaled to the largest
    value; the caption is printed at the bar's end (e.g. "120 · 45%").

    Labels are user data (source keys, campaign names): every piece goes
    through `format_html`. The picture is followed by a visually hidden table
    of the same rows, so a screen reader reads figures, not an image; with
    no rows there is no picture, only a sentence saying so."""
    if not bars:
        return format_html('<p class="chart-empty" id="{}">No data for this period.</p>', chart_id)
    peak = max((value for _, value, _ in bars), default=0) or 1
    plot = CHART_WIDTH - LABEL_WIDTH - 90
    height = len(bars) * (BAR_HEIGHT + GAP) + GAP + 24
    rows = []
    for n, (label, value, caption) in enumerate(bars):
        y = 24 + GAP + n * (BAR_HEIGHT + GAP)
        width = max(1.0, plot * value / peak) if value else 0
        rows.append(
            format_html(
                '<g class="bar" data-label="{}" data-value="{}">'
                '<text x="{}" y="{}" text-anchor="end" class="bar-label">{}</text>'
                '<rect x="{}" y="{}" width="{}" height="{}" fill="{}" rx="2"></rect>'
                '<text x="{}" y="{}" class="bar-value">{}</text></g>',
                label,
                f"{value:g}",
                LABEL_WIDTH - 8,
                f"{y + BAR_HEIGHT * 0.7:.1f}",
                label,
                LABEL_WIDTH,
                y,
                f"{width:.1f}",
                BAR_HEIGHT,
                color,
                f"{LABEL_WIDTH + width + 6:.1f}",
                f"{y + BAR_HEIGHT * 0.7:.1f}",
                caption or f"{value:g}{unit}",
            )
        )
    body = mark_safe("".join(rows))  # noqa: S308 - every piece above is built by format_html
    # The svg is one image named by its <title>: its texts are not read one by one.
    svg = format_html(
        '<svg id="{}" class="chart" role="img" aria-labelledby="{}-title" xmlns="http://www.w3.org/2000/svg" '
        'viewBox="0 0 {} {}" width="{}" height="{}"><title id="{}-title">{}</title>'
        '<text x="0" y="16" class="chart-title" aria-hidden="true">{}</text>{}</svg>',
        chart_id,
        chart_id,
        CHART_WIDTH,
        height,
        CHART_WIDTH,
        height,
        chart_id,
        title,
        title,
        body,
    )
    return format_html("{}{}", svg, chart_table(bars, chart_id=chart_id, title=title, unit=unit))


def chart_table(bars: Sequence[tuple[str, float, str]], *, chart_id: str, title: str, unit: str = "") -> SafeString:
    """The chart's text alternative: the same rows as a table, hidden from
    sight (the admin's `visually-hidden`) but read by assistive technology."""
    cells = mark_safe(  # noqa: S308 - each row is built by format_html
        "".join(
            format_html('<tr><th scope="row">{}</th><td>{}</td></tr>', label, caption or f"{value:g}{unit}")
            for label, value, caption in bars
        )
    )
    return format_html(
        '<table class="visually-hidden chart-data" id="{}-data"><caption>{}</caption>'
        '<thead><tr><th scope="col">item</th><th scope="col">value</th></tr></thead><tbody>{}</tbody></table>',
        chart_id,
        title,
        cells,
    )


def percent(value: float | Decimal | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def points(value: float | Decimal | None) -> str:
    """A change of a rate, in percentage points ("3 pts"): "+3%" would read as a relative change."""
    return "—" if value is None else f"{value * 100:.0f} pts"


def rate_figure(
    key: str, label: str, value: float | None, previous: float | None, against: str, *, lower_is_better: bool = False
) -> Figure:
    """A headline share ("92%") against an earlier one, its change in points."""
    return figure(
        key,
        label,
        rate(value),
        (rate(previous), against),
        fmt=percent,
        delta_fmt=points,
        lower_is_better=lower_is_better,
    )


def seconds(value: float | None) -> str:
    """A duration for people: 45 s, 12 min, 3.5 h."""
    if value is None:
        return "—"
    if value < 90:
        return f"{value:.0f} s"
    if value < 5400:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"
