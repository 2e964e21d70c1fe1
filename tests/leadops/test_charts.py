"""The server-drawn charts: labels are user data and escaped, bars scale to the
largest value, and every chart carries its rows as text."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from html.parser import HTMLParser

from crm.figures import before_words, figure
from leadops.charts import bar_chart


class _Table(HTMLParser):
    """The text-alternative table's rows, as the browser would read them."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.rows.append([])

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_body = False

    def handle_data(self, data: str) -> None:
        if self._in_body and self.rows:
            self.rows[-1].append(data)


def _widths(html: str) -> list[float]:
    return [float(w) for w in re.findall(r'<rect [^>]*width="([0-9.]+)"', html)]


def test_a_label_with_markup_is_drawn_as_text_never_as_markup():
    html = bar_chart([("<script>alert(1)</script>", 3.0, "3")], chart_id="c", title="T <b>")
    assert "<script>" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "T &lt;b&gt;" in html


def test_the_largest_bar_has_the_full_width_and_the_others_their_share():
    html = bar_chart([("a", 50.0, "50"), ("b", 200.0, "200"), ("c", 100.0, "100")], chart_id="c", title="t")
    a, b, c = _widths(html)
    assert b == max(a, b, c)
    assert a == b / 4 and c == b / 2


def test_a_chart_is_an_image_named_by_its_title():
    html = bar_chart([("a", 1.0, "1")], chart_id="leads-chart", title="Leads by stage")
    assert 'role="img" aria-labelledby="leads-chart-title"' in html
    assert '<title id="leads-chart-title">Leads by stage</title>' in html


def test_no_rows_is_a_sentence_not_an_empty_picture():
    html = bar_chart([], chart_id="c", title="t")
    assert "<svg" not in html and "<table" not in html
    assert "No data for this period." in html


def test_the_text_alternative_lists_every_row_with_its_value():
    rows = [("Leads", 12.0, "12"), ("Booked", 5.0, "5 · 42%"), ("Tom & Jerry's", 0.0, "")]
    html = bar_chart(rows, chart_id="c", title="t", unit=" leads")
    assert '<table class="visually-hidden chart-data" id="c-data">' in html
    parser = _Table()
    parser.feed(html)
    assert parser.rows == [["Leads", "12"], ["Booked", "5 · 42%"], ["Tom & Jerry's", "0 leads"]]


def test_a_figure_says_its_change_with_a_sign():
    before = "the 7 days before"
    assert (figure("w", "Won", 7, (4, before)).change, figure("w", "Won", 7, (4, before)).trend) == ("+3", "up")
    assert figure("w", "Won", 2, (4, before)).change == "\u22122"
    assert figure("w", "Won", 4, (4, before)).change == "same"
    money = figure("p", "Paid", Decimal("10.50"), (Decimal("12.00"), before), fmt=lambda v: f"${v}")
    assert (money.text, money.change, money.trend) == ("$10.50", "\u2212$1.50", "down")
    assert figure("r", "ROAS", None, (Decimal("2"), before)).change == "—"


def test_a_figure_compared_twice_colours_its_arrow_by_the_last_comparison():
    leads = figure("leads", "New leads", 5, (2, "Tuesday"), (9, "last Wednesday"))
    assert [(c.text, c.against) for c in leads.changes] == [("+3", "Tuesday"), ("\u22124", "last Wednesday")]
    assert leads.trend == "down"
    queue = figure("open", "Open exceptions", 3)
    assert (queue.changes, queue.change, queue.trend) == ((), "", "flat")
    assert leads.tone == "bad"
    opt_outs = figure("opt_outs", "Opt-outs", 3, (1, "the 7 days before"), lower_is_better=True)
    assert (opt_outs.trend, opt_outs.tone) == ("up", "bad")
    assert figure("x", "X", 0, (0, "Tuesday")).is_zero and not figure("x", "X", 0, (1, "Tuesday")).is_zero


def test_the_previous_period_is_named_by_its_length():
    assert before_words(timedelta(days=30)) == "the 30 days before"
    assert before_words(timedelta(days=1)) == "the day before"
    assert before_words(timedelta(hours=6)) == "the period before"
