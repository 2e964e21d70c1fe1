"""Quiet hours and business hours, in the right local time.

The one module for this math. Quiet hours: when a recipient may be
contacted. The window is the business's (08:00–21:00 by default), narrowed
by stricter state rules (Florida 08:00–20:00 built in, more per business).
The time zone comes from the number (phonenumbers' timezone data), else the
business's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import phonenumbers
from phonenumbers import geocoder
from phonenumbers import timezone as number_timezones

from crm.localtime import clock_time
from crm.models import DAYS, Business
from crm.us_states import US_STATE_NAMES

BUILT_IN_STATE_WINDOWS = {"FL": "08:00-20:00"}


@dataclass(frozen=True)
class Window:
    start: time
    end: time
    zone: ZoneInfo
    state: str = ""


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
    place = geocoder.description_for_number(number, "en")
    if ", " in place:
        return place.rsplit(", ", 1)[1]
    return US_STATE_NAMES.get(place, "")


def window_for(phone: str, business: Business) -> Window:
    start, end = business.quiet_hours_start, business.quiet_hours_end
    state = recipient_state(phone)
    rules = {**BUILT_IN_STATE_WINDOWS, **(business.quiet_hours_by_state or {})}
    if state in rules:
        state_start, state_end = parse_window(rules[state])
        start, end = max(start, state_start), min(end, state_end)  # the stricter of the two
    return Window(start, end, recipient_zone(phone, business), state)


def next_allowed(now: datetime, window: Window) -> datetime | None:
    """None when `now` is inside the window; else the next moment it opens."""
    local = now.astimezone(window.zone)
    if window.start <= local.time() and (window.end == time.max or local.time() < window.end):
        return None  # time.max: the window runs until midnight ("…-24:00")
    day = local.date() if local.time() < window.start else local.date() + timedelta(days=1)
    opens = datetime.combine(day, window.start, tzinfo=window.zone)
    return opens.astimezone(now.tzinfo)


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
