"""Owner assignment: eligibility, weighted round robin under concurrency, the manager queue."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest

from agents.routing.assign import MANAGER_QUEUE, RULE, lead_route
from crm.models import Lead, Receipt, Role, ServiceArea, ServiceLine, Task
from tests.factories import BusinessFactory, lead_create, member_create
from tests.helpers.races import run_together

# A Monday, 10:00 in Chicago.
MONDAY_10_CHICAGO = datetime(2026, 11, 30, 16, 0, tzinfo=UTC)


def _leads(business, n: int) -> list[Lead]:
    return [lead_create(business, first_name=f"L{i}", phone=f"+1212555{i:04d}") for i in range(n)]


def test_two_hundred_concurrent_arrivals_split_by_weight(transactional_db: None) -> None:
    business = BusinessFactory.create(slug="rr", timezone="America/Chicago")
    for username, weight in (("ana", 2), ("ben", 1), ("cal", 1)):
        member_create(business, Role.SETTER, username=username, weight=weight)
    leads = _leads(business, 200)
    chunks = [leads[i::8] for i in range(8)]

    def route(chunk: list[Lead]) -> None:
        for lead in chunk:
            lead_route(lead, now=MONDAY_10_CHICAGO)

    run_together([partial(route, chunk) for chunk in chunks])
    owners = Counter(Lead.objects.filter(business=business).values_list("owner__user__username", flat=True))
    assert abs(owners["ana"] - 100) <= 2 and abs(owners["ben"] - 50) <= 2 and abs(owners["cal"] - 50) <= 2
    assert sum(owners.values()) == 200 and None not in owners
    assert Receipt.objects.filter(business=business, action="routing.decided").count() == 200


@pytest.mark.django_db
def test_capped_off_shift_and_out_of_office_setters_receive_none(business) -> None:
    capped = member_create(business, Role.SETTER, username="capped", max_open_leads=1)
    off = member_create(business, Role.SETTER, username="night", hours={"sat": "08:00-09:00"})
    away = member_create(
        business, Role.SETTER, username="away", out_of_office_until=MONDAY_10_CHICAGO + timedelta(days=2)
    )
    on = member_create(business, Role.SETTER, username="on", hours={"mon": "08:00-18:00"})
    first = lead_create(business, phone="+12125550999")
    from crm.services import lead_sync

    lead_sync.lead_assign(first, capped, actor="test", reason="fills the cap")
    for lead in _leads(business, 12):
        routed = lead_route(lead, now=MONDAY_10_CHICAGO)
        assert routed.owner == on and routed.rule == RULE
        skipped = {c.member.user.username: c.skipped for c in routed.candidates}
        assert skipped["capped"] == ["at their cap of 1 open leads"]
        assert skipped["night"] == ["off shift"]
        assert skipped["away"][0].startswith("out of office until")
    assert not Lead.objects.filter(owner__in=[off, away]).exists()
    assert Lead.objects.filter(owner=capped).count() == 1


@pytest.mark.django_db
def test_an_off_shift_setter_takes_a_routine_lead_when_nobody_is_on(business) -> None:
    night = member_create(business, Role.SETTER, username="night", hours={"sat": "08:00-09:00"})
    routed = lead_route(lead_create(business), now=MONDAY_10_CHICAGO)
    assert routed.owner == night
    urgent = lead_route(lead_create(business, phone="+12125550111"), urgent=True, now=MONDAY_10_CHICAGO)
    assert urgent.rule == MANAGER_QUEUE


@pytest.mark.django_db
def test_skill_and_territory_decide_who_is_eligible(business) -> None:
    hvac = ServiceLine.objects.create(business=business, slug="hvac", name="HVAC")
    plumbing = ServiceLine.objects.create(business=business, slug="plumbing", name="Plumbing")
    north = ServiceArea.objects.create(business=business, name="North", postal_codes=["606*"])
    south = ServiceArea.objects.create(business=business, name="South", postal_codes=["607*"])
    plumber = member_create(business, Role.SETTER, username="plumber")
    plumber.service_lines.add(plumbing)
    south_hvac = member_create(business, Role.SETTER, username="south")
    south_hvac.service_lines.add(hvac)
    south_hvac.service_areas.add(south)
    north_hvac = member_create(business, Role.SETTER, username="north")
    north_hvac.service_lines.add(hvac)
    north_hvac.service_areas.add(north)
    lead = lead_create(business, service_line=hvac)
    routed = lead_route(lead, areas=("North",), now=MONDAY_10_CHICAGO)
    assert routed.owner == north_hvac
    reasons = {c.member.user.username: c.skipped for c in routed.candidates}
    assert reasons == {"plumber": ["lacks the service line"], "south": ["outside their territory"], "north": []}


@pytest.mark.django_db
def test_no_eligible_owner_sends_the_lead_to_the_manager_queue(business, manager) -> None:
    member_create(business, Role.SETTER, username="away", out_of_office_until=MONDAY_10_CHICAGO + timedelta(hours=3))
    lead = lead_create(business)
    routed = lead_route(lead, now=MONDAY_10_CHICAGO)
    lead.refresh_from_db()
    assert routed.rule == MANAGER_QUEUE
    assert lead.owner == manager, "never left unowned: the manager holds it"
    assert lead.stage == "new", "held by the manager, not yet with a setter"
    assert "no_eligible_owner" in lead.exceptions
    assert lead.routing_reason.startswith("no eligible owner — away: out of office until")
    task = Task.objects.get(lead=lead, kind="exception")
    assert task.owner == manager and task.status == "open"
    receipt = Receipt.objects.get(lead=lead, action="routing.decided")
    assert receipt.after["rule"] == MANAGER_QUEUE
    assert receipt.after["candidates"][0]["member"] == "away"
    assert receipt.after["candidates"][0]["skipped"][0].startswith("out of office")


@pytest.mark.django_db
def test_routing_again_once_someone_is_back_clears_the_queue_flag(business, manager) -> None:
    away = member_create(
        business, Role.SETTER, username="away", out_of_office_until=MONDAY_10_CHICAGO + timedelta(hours=3)
    )
    lead = lead_create(business)
    lead_route(lead, now=MONDAY_10_CHICAGO)
    routed = lead_route(lead, now=MONDAY_10_CHICAGO + timedelta(hours=4))
    lead.refresh_from_db()
    assert routed.owner == away and lead.owner == away and lead.stage == "assigned"
    assert "no_eligible_owner" not in lead.exceptions and lead.routing_reason == ""
