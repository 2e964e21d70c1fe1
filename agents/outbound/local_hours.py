"""Quiet hours and business hours, in the right local time.

The one module for this math. Quiet hours: when a recipient may be
contacted. The window is the business's (08:00–21:00 by default: the federal
hours), narrowed by the recipient's state rules (agents/outbound/state_rules.py:
hours per weekday, days and holidays with none), then by the business's own
`quiet_hours_by_state`, which can only narrow a state's rule, never widen it.
The recipient's state is read from the number's area code and from the
contact's ZIP code; when they name different states both apply, and on each
day the later start, the earlier end and any closed day win. The time zone
comes from the number (phonenumbers' timezone data), else the business's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import phonenumbers
from phonenumbers import timezone as number_timezones

from agents.outbound.state_rules import StateRule, cap_for, rules_for
from crm.localtime import clock_time
from crm.models import DAYS, Business
from crm.us_states import US_STATE_NAMES
from crm.zip_states import STATE_ZONES, zip_state

# A search for the next opening gives up after this many days: every rule
# allows six days a week, so a longer search means a business window that
# never opens (validated on load), and the regate timer tries again later.
_SEARCH_DAYS = 14


@dataclass(frozen=True)
class Window:
    """When a recipient may be reached, in their zone: `start`–`end` every day,
    narrowed on each day by `rules` (their days, holidays and hours) and by
    the business's own windows for the recipient's states (`narrowing`)."""

    start: time
    end: time
    zone: ZoneInfo
    state: str = ""  # the state the number's area code says
    rules: tuple[StateRule, ...] = ()  # each applying state's rule
    narrowing: tuple[tuple[time, time], ...] = ()  # the business's quiet_hours_by_state entries that apply
    states: tuple[str, ...] = ()  # every state whose rules apply (area code, ZIP)
    # Other zones the recipient may be in (their ZIP's state, when it is not
    # the number's): the window must be open in each of them too.
    other_zones: tuple[ZoneInfo, ...] = ()
    # An automated send (what the gate treats as solicitation) keeps the
    # states' closed days and holidays; a person's own reply keeps their hours only.
    solicitation: bool = True

    def hours_on(self, day: date) -> tuple[time, time] | None:
        """The window on `day` (local), or None when nothing may go that day:
        the latest start and the earliest end of all that apply."""
        start, end = self.start, self.end
        for rule in self.rules:
            hours = rule.hours_on(day, solicitation=self.solicitation)
            if hours is None:
                return None
            start, end = max(start, hours[0]), min(end, hours[1])
        for narrow_start, narrow_end in self.narrowing:
            start, end = max(start, narrow_start), min(end, narrow_end)
        return (start, end) if start < end else None

    def capped_by(self) -> StateRule | None:
        """The applying rule with the lowest cap on marketing texts per 24 hours."""
        return cap_for(self.rules)


def parse_window(text: str) -> tuple[time, time]:
    start, end = text.split("-")
    return clock_time(start), clock_time(end)


def _number(phone: str) -> phonenumbers.PhoneNumber | None:
    try:
        return phonenumbers.parse(phone, None)
    except phonenumbers.NumberParseException:
        return None


def recipient_zone(phone: str, business: Business) -> ZoneInfo:
    number = _number(phone)
    zones = list(number_timezones.time_zones_for_number(number)) if number else []
    zones = [z for z in zones if z != "Etc/Unknown"]
    if not zones:
        return ZoneInfo(business.timezone)
    # A number spanning zones (a US area code on a zone line): the business's
    # zone when it is one of them, else the first.
    return ZoneInfo(business.timezone if business.timezone in zones else zones[0])


def recipient_state(phone: str) -> str:
    number = _number(phone)
    if number is None or phonenumbers.region_code_for_number(number) != "US":
        return ""
    # Imported here: the geocoder's data takes seconds to load, and every
    # process (each web worker, cluster and command) would pay it at startup.
    from phonenumbers import geocoder

    place = geocoder.description_for_number(number, "en")
    if ", " in place:
        return place.rsplit(", ", 1)[1]
    # phonenumbers names Washington's area codes (206, 253, 360…) "Washington State".
    return US_STATE_NAMES.get(place.removesuffix(" State"), "")


def window_for(phone: str, business: Business, postal_code: str = "", *, solicitation: bool = True) -> Window:
    """The recipient's window: the business's hours and the rules of every
    state the number's area code or the contact's ZIP code (`postal_code`)
    names — a person with a Florida number living in Texas
    gets both states' rules, the stricter of each — narrowed further by the
    business's own window for any of those states."""
    state, lives_in = recipient_state(phone), zip_state(postal_code)
    states = tuple(s for s in dict.fromkeys((state, lives_in)) if s)
    own = business.quiet_hours_by_state or {}
    narrowing = tuple(parse_window(own[s]) for s in states if s in own)
    zone = recipient_zone(phone, business)
    # A number from one state and an address in another: the person may be
    # at home, so their home state's clock counts too.
    elsewhere = STATE_ZONES.get(lives_in, ()) if lives_in and lives_in != state else ()
    return Window(
        business.quiet_hours_start,
        business.quiet_hours_end,
        zone,
        state,
        rules=rules_for(*states),
        narrowing=narrowing,
        states=states,
        other_zones=tuple(ZoneInfo(name) for name in elsewhere if name != zone.key),
        solicitation=solicitation,
    )


def next_allowed(now: datetime, window: Window) -> datetime | None:
    """None when `now` is inside the window; else the next moment it opens
    (a later hour today, or the first allowed day's opening) — in the
    recipient's zone and in every other zone they may be in."""
    zones = (window.zone, *window.other_zones)
    at = now
    for _ in range(4 * _SEARCH_DAYS):  # each step moves to a later opening in one zone
        later = [opens for zone in zones if (opens := _next_open(at, window, zone)) is not None]
        if not later:
            return None if at == now else at
        at = max(later)
    return (now + timedelta(days=1)).astimezone(now.tzinfo)  # no common opening found: look again tomorrow


def _next_open(now: datetime, window: Window, zone: ZoneInfo) -> datetime | None:
    """`next_allowed` on one zone's clock."""
    local = now.astimezone(zone)
    day = local.date()
    for _ in range(_SEARCH_DAYS):
        hours = window.hours_on(day)
        if hours is not None:
            start, end = hours
            if day == local.date():
                if start <= local.time() and (end == time.max or local.time() < end):
                    return None  # time.max: the window runs until midnight ("…-24:00")
                if local.time() < start:
                    return datetime.combine(day, start, tzinfo=zone).astimezone(now.tzinfo)
            else:
                return datetime.combine(day, start, tzinfo=zone).astimezone(now.tzinfo)
        day += timedelta(days=1)
    return (now + timedelta(days=1)).astimezone(now.tzinfo)  # never opens within the search: look again tomorrow


# Business hours and working hours: {"mon": "08:00-18:00", ...}; a missing day
# is a day off; an empty dict means round the clock.


def hours_open(hours: dict[str, str], zone: ZoneInfo, at: datetime) -> bool:
    """Whether `at` falls inside the hours (always, when there are none)."""
    if not hours:
        return True
    local = at.astimezone(zone)
    window = hours.get(DAYS[local.weekday()])
    if not window:
        return False
    start, end = parse_window(window)
    return start <= local.time() and (end == time.max or local.time() < end)


def business_minutes_after(start: datetime, minutes: int, hours: dict[str, str], zone: ZoneInfo) -> datetime:
    """`minutes` of open time after `start`: a lead arriving at night is due
    shortly after the next opening, not at 3 a.m."""
    if not hours:
        return start + timedelta(minutes=minutes)
    remaining = timedelta(minutes=minutes)
    cursor = start.astimezone(zone)
    for _ in range(8 * 7):  # at most eight weeks of day-hopping; hours are validated on load
        window = hours.get(DAYS[cursor.weekday()])
        if window:
            open_t, close_t = parse_window(window)
            opens = datetime.combine(cursor.date(), open_t, tzinfo=zone)
            closes = datetime.combine(cursor.date(), close_t, tzinfo=zone)
            if close_t == time.max:  # open until midnight: the next day's first instant
                closes = datetime.combine(cursor.date() + timedelta(days=1), time(0, 0), tzinfo=zone)
            begin = max(cursor, opens)
            if begin < closes:
                if begin + remaining <= closes:
                    return (begin + remaining).astimezone(start.tzinfo)
                remaining -= closes - begin
        cursor = datetime.combine(cursor.date() + timedelta(days=1), time(0, 0), tzinfo=zone)
    raise ValueError("business hours have no open time")
