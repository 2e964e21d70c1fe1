"""Calendar Booking, the offer: which approved slots a lead may be booked into.

Slots come only from `Availability` rules (the business file's `availability`
section): the days, the local windows ("09:00-11:00") in the business's time
zone, and how many appointments one slot takes. A rule limited to service
lines serves only leads of those lines; a rule with members is offered only
while one of them is active and not out of office at that time. A slot is
identified by its rule and its start (`slot_key`), and a start is bookable
only if it is exactly one of the rule's windows (`slot_window`), so a booking
can never land between or outside the approved slots.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.db.models import Count, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from crm.models import DAYS, Appointment, Availability, Lead, TeamMember
from crm.services.sync import calendar_busy

# Appointments that hold a place in their slot.
HOLDING = (Appointment.Status.SCHEDULED, Appointment.Status.CONFIRMED)
DEFAULT_DAYS_AHEAD = 14


class BookingError(Exception):
    """A booking change refused, with a code for the API and the page; nothing is written."""

    code = "booking_refused"


class NotASlot(BookingError):
    """A time that is not one of the rule's approved slots (or not bookable now)."""

    code = "not_a_slot"


@dataclass(frozen=True)
class Slot:
    availability: Availability
    starts_at: datetime  # UTC
    ends_at: datetime
    taken: int
    members: tuple[TeamMember, ...]

    @property
    def capacity(self) -> int:
        return self.availability.capacity

    @property
    def remaining(self) -> int:
        return max(0, self.capacity - self.taken)

    @property
    def key(self) -> str:
        return slot_key(self.availability, self.starts_at)

    def local_label(self, zone: ZoneInfo) -> str:
        return when_label(self.starts_at, self.ends_at, zone)


def slot_key(availability: Availability, starts_at: datetime) -> str:
    return f"{availability.public_id}|{starts_at.astimezone(ZoneInfo('UTC')).isoformat()}"


def slot_key_parse(key: str) -> tuple[str, datetime]:
    """(availability public id, start) of a key; NotASlot when it is not one."""
    public_id, _, start = key.partition("|")
    parsed = parse_datetime(start) if start else None
    if not public_id or parsed is None or timezone.is_naive(parsed):
        raise NotASlot(f"not a slot: {key!r}")
    return public_id, parsed


def when_label(starts_at: datetime, ends_at: datetime, zone: ZoneInfo) -> str:
    """ "Tue, Mar 17 between 9:00 AM and 11:00 AM" in `zone`: the words a
    confirmation and a reminder put in `{appointment_time}`."""
    start, end = starts_at.astimezone(zone), ends_at.astimezone(zone)
    return f"{start:%a, %b} {start.day} between {_clock(start)} and {_clock(end)}"


def moment_label(at: datetime, zone: ZoneInfo) -> str:
    """ "Tue, Mar 17 at 9:05 AM CDT" in `zone`: one moment, worded as the
    visit's window is (the technician brief says both)."""
    local = at.astimezone(zone)
    return f"{local:%a, %b} {local.day} at {_clock(local)} {local:%Z}"


def window_label(starts_at: datetime, ends_at: datetime, zone: ZoneInfo) -> str:
    """ "9:00 AM – 11:00 AM" in `zone` (the booking page lists a day's slots so)."""
    return f"{_clock(starts_at.astimezone(zone))} – {_clock(ends_at.astimezone(zone))}"


def _clock(at: datetime) -> str:
    return f"{at.hour % 12 or 12}:{at:%M %p}"


def _window(text: str) -> tuple[time, time]:
    start, _, end = text.partition("-")
    return time.fromisoformat(start.strip()), time.fromisoformat(end.strip())


def rule_serves(rule: Availability, lead: Lead) -> bool:
    """A rule without service lines serves every lead; one with lines serves
    leads of those lines (a lead whose line is not known yet matches none)."""
    lines = {line.pk for line in rule.service_lines.all()}
    return not lines or lead.service_line_id in lines


class BusyTimes:
    """Members' calendar busy blocks (crm.services.sync.calendar_busy), kept
    so that "busy between `at` and `until`?" is a bisection, not a scan: an
    offer asks it for every member in every slot, and a scan of every block
    each time made 20 connected calendars cost more than the rest of the
    offer together (scripts/bench_availability.py)."""

    def __init__(self, busy: Mapping[int, list[tuple[datetime, datetime]]]) -> None:
        self._starts: dict[int, list[datetime]] = {}
        # The latest end among the blocks up to each one, in the order of their starts.
        self._reach: dict[int, list[datetime]] = {}
        for member_id, blocks in busy.items():
            ordered = sorted(blocks)
            reach: list[datetime] = []
            for _, end in ordered:
                reach.append(max(end, reach[-1]) if reach else end)
            self._starts[member_id] = [start for start, _ in ordered]
            self._reach[member_id] = reach

    def overlaps(self, member_id: int, at: datetime, until: datetime) -> bool:
        """Whether a block of the member's starts before `until` and ends after `at`."""
        starts = self._starts.get(member_id)
        if not starts:
            return False
        # The blocks that start before `until`; one of them ends after `at` if the latest end does.
        before = bisect_left(starts, until)
        return before > 0 and self._reach[member_id][before - 1] > at


def members_free(
    rule: Availability,
    at: datetime,
    *,
    ends: datetime | None = None,
    busy: Mapping[int, list[tuple[datetime, datetime]]] | BusyTimes | None = None,
) -> tuple[TeamMember, ...]:
    """The rule's members who can take a visit at `at` (until `ends`): active,
    not out of office, and not busy then in a calendar they connected
    (`busy`, crm.services.sync.calendar_busy, or a BusyTimes of it when
    asked for many slots)."""
    until = ends or at
    times = busy if isinstance(busy, BusyTimes) else BusyTimes(busy or {})
    return tuple(
        m
        for m in rule.members.all()
        if m.is_active
        and (m.out_of_office_until is None or m.out_of_office_until <= at)
        and not times.overlaps(m.pk, at, until)
    )


def _starts(rule: Availability, zone: ZoneInfo, first: date, last: date) -> list[tuple[datetime, datetime]]:
    windows = [_window(text) for text in rule.slots]
    found = []
    day = first
    while day <= last:
        if DAYS[day.weekday()] in rule.days:
            for open_t, close_t in windows:
                starts = datetime.combine(day, open_t, tzinfo=zone)
                found.append((starts.astimezone(ZoneInfo("UTC")), datetime.combine(day, close_t, tzinfo=zone)))
        day += timedelta(days=1)
    return found


def slot_window(rule: Availability, starts_at: datetime, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """The (start, end) of the rule's slot that starts at `starts_at`; NotASlot otherwise."""
    local = starts_at.astimezone(zone)
    if DAYS[local.weekday()] not in rule.days:
        raise NotASlot(f"{rule.public_id} has no slots on {DAYS[local.weekday()]}")
    for text in rule.slots:
        open_t, close_t = _window(text)
        if local.time() == open_t:
            ends = datetime.combine(local.date(), close_t, tzinfo=zone)
            return starts_at.astimezone(ZoneInfo("UTC")), ends.astimezone(ZoneInfo("UTC"))
    raise NotASlot(f"{local:%H:%M} is not the start of a slot of {rule.public_id} ({', '.join(rule.slots)})")


def slots_offer(
    lead: Lead,
    *,
    now: datetime | None = None,
    days_ahead: int = DEFAULT_DAYS_AHEAD,
    include_full: bool = False,
) -> list[Slot]:
    """The approved slots this lead may be booked into, soonest first.

    A fixed number of queries however many rules and days: the rules with
    their members and lines, one count of the appointments holding places,
    and the members' calendar busy blocks. Slots already started, full
    (unless `include_full`), or without a free member (a member busy in their
    calendar is not free) are left out.
    """
    now = now or timezone.now()
    zone = ZoneInfo(lead.business.timezone)
    rules = [
        rule
        for rule in Availability.objects.filter(business_id=lead.business_id, is_active=True)
        .prefetch_related("members__user", "service_lines")
        .order_by("pk")
        if rule_serves(rule, lead)
    ]
    if not rules:
        return []
    first = now.astimezone(zone).date()
    last = first + timedelta(days=days_ahead)
    window_end = datetime.combine(last + timedelta(days=1), time(0, 0), tzinfo=zone)
    taken: Counter[tuple[int, datetime]] = Counter()
    counts = (
        Appointment.objects.filter(
            Q(availability__in=rules), status__in=HOLDING, starts_at__gte=now, starts_at__lt=window_end
        )
        .values("availability_id", "starts_at")
        .annotate(n=Count("id"))
    )
    for row in counts:
        taken[(row["availability_id"], row["starts_at"])] = row["n"]
    busy = BusyTimes(calendar_busy([m.pk for rule in rules for m in rule.members.all()]))
    offered = []
    for rule in rules:
        has_members = bool(rule.members.all())
        for starts, ends in _starts(rule, zone, first, last):
            if starts <= now:
                continue
            free = members_free(rule, starts, ends=ends.astimezone(ZoneInfo("UTC")), busy=busy)
            if has_members and not free:
                continue
            slot = Slot(rule, starts, ends.astimezone(ZoneInfo("UTC")), taken[(rule.pk, starts)], free)
            if slot.remaining or include_full:
                offered.append(slot)
    offered.sort(key=lambda s: (s.starts_at, s.availability.pk))
    return offered
