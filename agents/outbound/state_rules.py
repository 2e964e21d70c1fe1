"""US state rules on marketing texts and calls, as data.

Each rule says, for recipients in one state, the local hours a text or call
may reach them on each day of the week (None: not that day), the holidays on
which none may, how many marketing texts and calls a person may get in any 24
hours, whether it covers marketing only, and where it comes from: the legal
source, the date it took effect and the date we last checked it. FEDERAL is
the baseline every business window starts from (08:00–21:00 by default); a
state's rule narrows the window further. How a recipient's state
is chosen and how the rules combine (the stricter of each wins) is
agents/outbound/local_hours.py's job; the cap is the gate's.

A rule that could not be confirmed against the statute's own text says so in
its `note` (`confirmed=False`): it is kept, stricter, rather than left out,
and should be read again before relying on it.

Holiday dates are computed here from explicit rules (a fixed date, or the nth
weekday of a month), not by a holidays package: the states name few holidays,
and a rule a reader can check beats a dependency. A holiday on a Saturday or
Sunday also closes the weekday it is observed on (Friday, Monday): the stricter
reading, since states differ on observance.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, time, timedelta

from crm.localtime import clock_time

# Python's weekday(): Monday is 0, Sunday is 6.
SUNDAY = 6


@dataclass(frozen=True)
class Holiday:
    """A holiday by rule: a fixed `day` of `month`, else the `nth` `weekday`
    of `month` (nth=-1: the last)."""

    name: str
    month: int
    day: int = 0
    weekday: int = 0
    nth: int = 0

    def on(self, year: int) -> date:
        if self.day:
            return date(year, self.month, self.day)
        if self.nth > 0:
            first = date(year, self.month, 1)
            return first + timedelta(days=(self.weekday - first.weekday()) % 7 + 7 * (self.nth - 1))
        next_month = date(year + self.month // 12, self.month % 12 + 1, 1)
        last = next_month - timedelta(days=1)
        return last - timedelta(days=(last.weekday() - self.weekday) % 7)

    def closes(self, day: date) -> bool:
        """Whether `day` is this holiday or the weekday it is observed on."""
        for year in (day.year - 1, day.year, day.year + 1):  # New Year's Day on a Saturday is observed in December
            on = self.on(year)
            observed = (
                on - timedelta(days=1) if on.weekday() == 5 else on + timedelta(days=1) if on.weekday() == 6 else on
            )
            if day in (on, observed):
                return True
        return False


NEW_YEAR = Holiday("New Year's Day", 1, day=1)
MLK_DAY = Holiday("Martin Luther King Jr. Day", 1, weekday=0, nth=3)
WASHINGTON_DAY = Holiday("George Washington's Birthday", 2, weekday=0, nth=3)
CONFEDERATE_MEMORIAL_DAY = Holiday("Confederate Memorial Day", 4, weekday=0, nth=4)
MEMORIAL_DAY = Holiday("Memorial Day", 5, weekday=0, nth=-1)
JEFFERSON_DAVIS_DAY = Holiday("Jefferson Davis' Birthday", 6, weekday=0, nth=1)
INDEPENDENCE_DAY = Holiday("Independence Day", 7, day=4)
LABOR_DAY = Holiday("Labor Day", 9, weekday=0, nth=1)
COLUMBUS_DAY = Holiday("Columbus Day", 10, weekday=0, nth=2)
VETERANS_DAY = Holiday("Veterans Day", 11, day=11)
THANKSGIVING = Holiday("Thanksgiving Day", 11, weekday=3, nth=4)
CHRISTMAS = Holiday("Christmas Day", 12, day=25)

# Hours per weekday, Monday first: "HH:MM-HH:MM", or None for no texts that day.
Week = tuple[str | None, str | None, str | None, str | None, str | None, str | None, str | None]


def every_day(hours: str) -> Week:
    return (hours, hours, hours, hours, hours, hours, hours)


def not_sunday(hours: str) -> Week:
    return (hours, hours, hours, hours, hours, hours, None)


def weekdays_and_sunday(hours: str, *, sunday: str) -> Week:
    return (hours, hours, hours, hours, hours, hours, sunday)


@dataclass(frozen=True)
class StateRule:
    state: str  # two-letter code; "" for the federal rule
    week: Week
    source: str  # the statute or regulation, as cited
    # When the rule (in this form) took effect; None where no source we read says.
    effective: date | None
    checked: date  # when we last read it against its sources
    holidays: tuple[Holiday, ...] = ()
    cap_per_24h: int | None = None  # marketing texts and calls to one person in any 24 hours
    marketing_only: bool = True
    confirmed: bool = True
    note: str = ""

    def hours_on(self, day: date, *, solicitation: bool = True) -> tuple[time, time] | None:
        """The local window on `day`, or None when nothing may go that day.
        A days-and-holidays ban is on solicitation: a person answering a
        person who wrote (`solicitation` False) keeps the day's hours — the
        weekday's own, or on a closed day the rule's usual ones."""
        closed = any(h.closes(day) for h in self.holidays)
        text = self.week[day.weekday()]
        if not solicitation and (closed or text is None):
            text = next(hours for hours in self.week if hours is not None)
        elif closed or text is None:
            return None
        start, end = text.split("-")
        return clock_time(start), clock_time(end)


CHECKED = date(2026, 12, 4)

FEDERAL = StateRule(
    state="",
    week=every_day("08:00-21:00"),
    source="TCPA, 47 U.S.C. sec. 227; 47 C.F.R. sec. 64.1200(c)(1)",
    effective=date(1992, 12, 20),
    checked=CHECKED,
    note="8 a.m. to 9 p.m. in the recipient's local time, every day.",
)

STATE_RULES: dict[str, StateRule] = {
    rule.state: rule
    for rule in (
        StateRule(
            state="FL",
            week=every_day("08:00-20:00"),
            cap_per_24h=3,
            source="Fla. Stat. sec. 501.616(6)(a)-(b) (Florida Telemarketing Act, as amended by SB 1120 (2021)); "
            "sec. 501.059 (FTSA)",
            effective=date(2021, 7, 1),
            checked=CHECKED,
            note="The hours and the cap (no more than 3 on the same subject matter in 24 hours) are in "
            "sec. 501.616(6); sec. 501.059(8)(a) is the FTSA's consent rule for automated calls and texts.",
        ),
        StateRule(
            state="OK",
            week=every_day("08:00-20:00"),
            cap_per_24h=3,
            source="Okla. Stat. tit. 15, sec. 775C.4 (Telephone Solicitation Act of 2022, HB 3168)",
            effective=date(2022, 11, 1),
            checked=CHECKED,
            note="No more than 3 on the same subject matter in 24 hours; an Oklahoma area code is presumed "
            "to reach someone in Oklahoma.",
        ),
        StateRule(
            state="MD",
            week=every_day("08:00-20:00"),
            cap_per_24h=3,
            source="Md. Code, Com. Law sec. 14-4501 et seq. (Stop the Spam Calls Act of 2023, SB 90)",
            effective=date(2024, 1, 1),
            checked=CHECKED,
            note="Calls and texts: no more than 3 on the same subject in 24 hours. Enacted in 2023, in force "
            "from 1 January 2024.",
        ),
        StateRule(
            state="TX",
            week=(
                "09:00-21:00",
                "09:00-21:00",
                "09:00-21:00",
                "09:00-21:00",
                "09:00-21:00",
                "09:00-21:00",
                "12:00-21:00",
            ),
            source="Tex. Bus. & Com. Code sec. 301.051 (hours); ch. 302 and 304 as amended by SB 140 (2025), "
            "which made texts telephone solicitations",
            effective=date(2025, 9, 1),
            checked=CHECKED,
            note="9 a.m. to 9 p.m. Monday to Saturday, noon to 9 p.m. on Sunday. The hours are confirmed by "
            "several summaries of SB 140; the section number (sec. 301.051) was not read in the code itself.",
        ),
        StateRule(
            state="WA",
            week=every_day("08:00-20:00"),
            source="RCW 80.36.390; RCW 19.158.040(2)",
            effective=None,
            checked=CHECKED,
            note="RCW 19.158.040(2) says no calls received before 8 a.m. or after 8 p.m. at the recipient's "
            "local time. When the 8 p.m. limit took effect was not confirmed.",
            confirmed=False,
        ),
        StateRule(
            state="AL",
            week=not_sunday("08:00-20:00"),
            holidays=(
                NEW_YEAR,
                MLK_DAY,
                WASHINGTON_DAY,
                CONFEDERATE_MEMORIAL_DAY,
                MEMORIAL_DAY,
                JEFFERSON_DAVIS_DAY,
                INDEPENDENCE_DAY,
                LABOR_DAY,
                COLUMBUS_DAY,
                VETERANS_DAY,
                THANKSGIVING,
                CHRISTMAS,
            ),
            source="Ala. Admin. Code r. 770-X-5-.17(1)(b); holidays: Ala. Code sec. 1-3-8",
            effective=None,
            checked=CHECKED,
            note="No solicitation calls on Sundays or holidays, 8 a.m. to 8 p.m. otherwise. The rule is the "
            "Public Service Commission's, written for automated solicitation calls. The holiday list follows "
            "sec. 1-3-8 as summarized by secondary sources (Mardi Gras, kept in two counties only, is left out); "
            "not confirmed against the code's text.",
            confirmed=False,
        ),
        StateRule(
            state="LA",
            week=not_sunday("08:00-20:00"),
            holidays=(NEW_YEAR, MLK_DAY, INDEPENDENCE_DAY, CHRISTMAS),
            source="La. Pub. Serv. Comm'n General Order R-29617 sec. V(A)(2); La. R.S. 45:811",
            effective=None,
            checked=CHECKED,
            note="No solicitations on Sundays or legal holidays, nor between 8 p.m. and 8 a.m. The holidays "
            "listed are the ones confirmed; the Commission names more, and days the governor declares "
            "(and a declared state of emergency) are not modelled. When the order took effect was not confirmed.",
            confirmed=False,
        ),
        StateRule(
            state="MS",
            week=not_sunday("08:00-20:00"),
            source="Miss. Code Ann. sec. 77-3-723(1) (Mississippi Telephone Solicitation Act)",
            effective=None,
            checked=CHECKED,
            note="8 a.m. to 8 p.m. Central time, no Sundays. The ban on legal holidays was in the Public "
            "Service Commission's rules, repealed in 2024 when the Attorney General took over enforcement. The "
            "Act dates from 2003 (Laws 2003, ch. 478); when the Sunday ban took effect was not confirmed.",
        ),
        StateRule(
            state="CT",
            week=every_day("09:00-20:00"),
            source="Conn. Gen. Stat. sec. 42-288a, as amended by P.A. 23-98",
            effective=date(2023, 10, 1),
            checked=CHECKED,
            note="Not confirmed: secondary sources disagree (9 a.m. to 8 p.m., or to 9 p.m.); the stricter is kept "
            "until the statute's text is read.",
            confirmed=False,
        ),
    )
}


def rules_for(*states: str) -> tuple[StateRule, ...]:
    """Each named state's rule (once each, in order). The federal hours are
    not among them: they are the business's default window (Business
    .quiet_hours_start/end, 08:00–21:00), which a business may widen for its
    own reasons (a 24-hour emergency line answering the people who call it);
    a state's rule narrows whatever window the business keeps."""
    return tuple(STATE_RULES[s] for s in dict.fromkeys(states) if s in STATE_RULES)


def cap_for(rules: tuple[StateRule, ...]) -> StateRule | None:
    """The rule with the lowest cap among `rules`, or None when none caps."""
    capped = [r for r in rules if r.cap_per_24h is not None]
    return min(capped, key=lambda r: r.cap_per_24h or 0, default=None)
