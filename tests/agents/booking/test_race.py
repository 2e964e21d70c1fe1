"""The last place in a slot, raced for by setters on PostgreSQL with real
threads (each its own connection, as web workers are); a barrier releases
them together."""

from __future__ import annotations

from collections import Counter
from functools import partial

import pytest

from agents.booking.services import SlotFull, appointment_book
from crm.models import Appointment, Lead, Role, Stage
from tests.factories import member_create
from tests.helpers.booking import NOW, TUE_9, owned_lead
from tests.helpers.races import run_together

pytestmark = pytest.mark.django_db(transaction=True)


def race(leads: list[Lead], rule, actors: list[str]) -> list[str]:
    def book(lead: Lead, actor: str) -> str:
        try:
            appointment_book(lead, availability=rule, starts_at=TUE_9, actor=actor, now=NOW)
            return "booked"
        except SlotFull as exc:
            return f"full: {exc}"

    return run_together([partial(book, lead, actor) for lead, actor in zip(leads, actors, strict=True)], timeout=30)


def test_two_setters_racing_for_the_last_place_one_wins_and_the_other_is_told(shop, setter, rule, templates):
    sara = member_create(shop, Role.SETTER, username="sara")
    leads = [owned_lead(shop, setter, phone="+12125550147"), owned_lead(shop, sara, phone="+12125550148")]

    outcomes = race(leads, rule, ["sam", "sara"])

    assert sorted(o.split(":")[0] for o in outcomes) == ["booked", "full"]
    assert "is full (1 of 1 booked): pick another slot" in next(o for o in outcomes if o.startswith("full"))
    assert Appointment.objects.filter(starts_at=TUE_9, status="scheduled").count() == 1
    stages = Counter(Lead.objects.filter(pk__in=[lead.pk for lead in leads]).values_list("stage", flat=True))
    # The loser's lead is untouched: its booking rolled back whole.
    assert stages == {Stage.BOOKED: 1, Stage.ASSIGNED: 1}


def test_a_slot_for_two_takes_exactly_two_of_five_racing_bookings(shop, setter, rule, templates):
    rule.capacity = 2
    rule.save()
    rule.members.add(member_create(shop, Role.TECHNICIAN, username="ted"))
    leads = [owned_lead(shop, setter, phone=f"+1212555015{i}") for i in range(5)]

    outcomes = race(leads, rule, ["sam"] * 5)

    assert Counter(o.split(":")[0] for o in outcomes) == {"booked": 2, "full": 3}
    booked = Appointment.objects.filter(starts_at=TUE_9, status="scheduled")
    assert booked.count() == 2
    # Each technician takes one of the two visits.
    assert sorted(booked.values_list("assigned_to__user__username", flat=True)) == ["ted", "tom"]
