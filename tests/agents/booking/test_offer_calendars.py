"""The offer with technicians' connected calendars: what it costs in
queries however many technicians connect one, and which busy blocks take a
technician off a slot (scripts/bench_availability.py times it)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.booking.slots import members_free, slots_offer
from crm.models import Availability, Business, Lead, Role, SyncConnection, TeamMember
from crm.services.sync import calendar_busy_store
from tests.factories import member_create
from tests.helpers.booking import NOW, TUE_9, TUE_13, local


def connect(shop: Business, member: TeamMember, blocks: list[tuple[datetime, datetime]]) -> None:
    calendar = SyncConnection.objects.create(business=shop, provider="google_calendar", member=member)
    calendar_busy_store(calendar, blocks, now=NOW, actor="test")


def day_of_blocks(day: int) -> list[tuple[datetime, datetime]]:
    """Four half-hour blocks on day `day` after Monday, all outside the slots (09-11, 13-15)."""
    return [(local(day, hour), local(day, hour) + timedelta(minutes=30)) for hour in (7, 11, 16, 17)]


def offer_queries(lead: Lead) -> list[str]:
    fresh = Lead.objects.get(pk=lead.pk)
    with CaptureQueriesContext(connection) as queries:
        assert len(slots_offer(fresh, now=NOW, days_ahead=14)) == 22
    return [q["sql"] for q in queries.captured_queries]


def test_the_offer_costs_the_same_queries_for_one_calendar_or_twelve(lead, rule, shop, tech):
    connect(shop, tech, [block for day in range(5) for block in day_of_blocks(day)])
    one = offer_queries(lead)
    for n in range(11):
        more = member_create(shop, Role.TECHNICIAN, username=f"tech-{n}")
        rule.members.add(more)
        connect(shop, more, [block for day in range(14) for block in day_of_blocks(day)])
    twelve = offer_queries(lead)
    # The rules with their members, users and lines, the counts, and one read of all the calendars.
    assert len(twelve) == len(one), "\n".join(twelve)
    assert sum("crm_syncconnection" in sql for sql in twelve) == 1


def test_a_long_block_under_shorter_ones_still_takes_the_technician_off(lead, rule, shop, tech):
    connect(
        shop,
        tech,
        [
            # All Tuesday, from before the first slot to after the last...
            (TUE_9 - timedelta(hours=2), TUE_13 + timedelta(hours=4)),
            # ...with short ones inside it, which end before the afternoon slot starts.
            (TUE_9 + timedelta(minutes=30), TUE_9 + timedelta(hours=1)),
            (TUE_13 - timedelta(hours=1), TUE_13 - timedelta(minutes=30)),
        ],
    )
    offered = {s.starts_at for s in slots_offer(Lead.objects.get(pk=lead.pk), now=NOW, days_ahead=2)}
    assert TUE_9 not in offered and TUE_13 not in offered
    assert TUE_9 + timedelta(days=1) in offered


def test_blocks_that_only_touch_a_slot_leave_the_technician_free(rule, tech):
    ends = TUE_9 + timedelta(hours=2)
    rule = Availability.objects.prefetch_related("members").get(pk=rule.pk)
    busy = {tech.pk: [(TUE_9 - timedelta(hours=1), TUE_9), (ends, ends + timedelta(hours=1))]}
    assert members_free(rule, TUE_9, ends=ends, busy=busy) == (tech,)
    assert members_free(rule, TUE_9, ends=ends + timedelta(minutes=1), busy=busy) == ()
    assert members_free(rule, TUE_9 - timedelta(minutes=1), ends=ends, busy=busy) == ()
