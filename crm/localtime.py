"""Times as the people reading them live them.

Storage is UTC. A page shows a time in the active zone, which
`leadops.middleware.ViewerTimezoneMiddleware` sets per request to the
viewer's (`crm.selectors.viewer_zone`), and names the zone beside it, so
nobody has to guess whose clock a time is on. Outside a request (a task, a
command, the API) the active zone is UTC, and the text says "UTC".
Templates do the same with Django's `date` filter and its `T` format.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ValidationError
from django.utils import dateformat, timezone

MINUTE = "%Y-%m-%d %H:%M"
# A day's hours may end at midnight ("00:00-24:00": open all day, a 24/7
# emergency line); as a time of day it is the last instant of the day.
END_OF_DAY = "24:00"


def clock_time(text: str) -> time:
    """A stored "HH:MM" as a time of day; END_OF_DAY is the day's last instant."""
    text = text.strip()
    return time.max if text == END_OF_DAY else time.fromisoformat(text)


# Times stored text spells: "2026-03-10 15:00 UTC" (Pipeline QA's details, some
# receipt reasons) and ISO 8601 instants with an offset (a receipt's values).
_UTC_IN_TEXT = re.compile(r"\b(\d{4}-\d{2}-\d{2} \d{2}:\d{2}) UTC\b")
_ISO_IN_TEXT = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})")


def zone_or_none(name: str) -> ZoneInfo | None:
    """The zone an IANA name names, or None for an empty or unknown name."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def zone_validate(name: str, field: str = "timezone") -> None:
    """For a model's clean(): refuse a name zoneinfo does not know, on `field`."""
    if name and zone_or_none(name) is None:
        raise ValidationError({field: f"{name!r} is not a time zone: use an IANA name like America/Chicago"})


def zone_name(zone: tzinfo | None = None) -> str:
    zone = zone or timezone.get_current_timezone()
    return str(getattr(zone, "key", None) or zone.tzname(None) or "UTC")


def zone_label(zone: tzinfo | None = None, *, at: datetime | None = None) -> str:
    """ "America/Chicago (CST)", the abbreviation as of `at` (default now);
    plain "UTC" for UTC."""
    zone = zone or timezone.get_current_timezone()
    name = zone_name(zone)
    abbreviation = (at or timezone.now()).astimezone(zone).tzname()
    return name if not abbreviation or abbreviation == name else f"{name} ({abbreviation})"


def when(at: datetime | None, fmt: str = MINUTE, zone: tzinfo | None = None) -> str:
    """ "2026-03-10 10:00 CDT": `at` in `zone` (default the active zone), the
    zone's abbreviation for that instant after it."""
    if at is None:
        return "—"
    local = at.astimezone(zone or timezone.get_current_timezone())
    return f"{local:{fmt}} {local.tzname()}"


def moment_words(at: datetime | None, zone: tzinfo | None = None, *, relative: bool = True) -> str:
    """A moment as the workspace says it, in `zone` (default the active
    zone), as short as it can be said relative to that zone's today:
    "3:04 PM CST", "Yesterday 3:04 PM CST", "Tue 3:04 PM CST",
    "Mar 2, 3:04 PM CST", "Mar 2 2025, 3:04 PM CST". One format for every
    time a person reads on a page (inbox, thread, its answers). Inside a
    sentence ("on …", "due …") `relative=False` keeps the date:
    "Mar 2, 3:04 PM CST" whatever the day."""
    if at is None:
        return ""
    zone = zone or timezone.get_current_timezone()
    local = at.astimezone(zone)
    today = timezone.now().astimezone(zone).date()
    days = (today - local.date()).days
    if not relative:
        pattern = "M j, g:i A T" if local.year == today.year else "M j Y, g:i A T"
    elif days == 0:
        pattern = "g:i A T"
    elif days == 1:
        pattern = r"\Y\e\s\t\e\r\d\a\y g:i A T"
    elif days == -1:
        pattern = r"\T\o\m\o\r\r\o\w g:i A T"
    elif -7 < days < 7:
        pattern = "D g:i A T"
    elif local.year == today.year:
        pattern = "M j, g:i A T"
    else:
        pattern = "M j Y, g:i A T"
    return dateformat.format(local, pattern)


def stored_times_localized(text: str, zone: tzinfo | None = None) -> str:
    """Stored text with its times rewritten into `zone` (default the active
    zone), each with the zone's abbreviation: the record keeps what it
    wrote, the reader sees their clock."""

    def utc(match: re.Match[str]) -> str:
        return when(datetime.strptime(match.group(1), MINUTE).replace(tzinfo=UTC), zone=zone)

    def iso(match: re.Match[str]) -> str:
        return when(datetime.fromisoformat(match.group(0)), zone=zone)

    return _ISO_IN_TEXT.sub(iso, _UTC_IN_TEXT.sub(utc, text))
