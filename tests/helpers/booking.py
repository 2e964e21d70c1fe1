"""Shared ground for the appointment tests: a business whose quiet hours are
open all day (so no send is deferred by the hour a test runs), a technician
with an availability rule, the approved appointment templates, and leads
owned by a setter with SMS consent."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from crm.models import Availability, Business, Lead, MessageTemplate, Role, TeamMember
from crm.services import lead_sync
from crm.services.consent import consent_record
from tests.factories import lead_create, member_create

# The week the tests book in: next Monday in Chicago (the business's zone),
# always ahead of the real clock, so consent given now precedes every send.
CHICAGO = ZoneInfo("America/Chicago")
_today = timezone.now().astimezone(CHICAGO).date()
MONDAY = _today + timedelta(days=7 - _today.weekday())


def local(day: int, hour: int) -> datetime:
    """`hour`:00 in Chicago, `day` days after that Monday, in UTC."""
    return datetime.combine(MONDAY + timedelta(days=day), time(hour, 0), tzinfo=CHICAGO).astimezone(UTC)


def day_label(day: int) -> str:
    on = MONDAY + timedelta(days=day)
    return f"{on:%a, %b} {on.day}"


NOW = local(0, 8)  # Monday 08:00
TUE_9 = local(1, 9)  # Tuesday's 09:00-11:00 slot
TUE_13 = local(1, 13)  # Tuesday's 13:00-15:00 slot
MON_9_LABEL = f"{day_label(0)} between 9:00 AM and 11:00 AM"
TUE_9_LABEL = f"{day_label(1)} between 9:00 AM and 11:00 AM"
TUE_13_LABEL = f"{day_label(1)} between 1:00 PM and 3:00 PM"
WEEKDAYS = ["mon", "tue", "wed", "thu", "fri"]

TEMPLATES = {
    "appointment_confirmation_sms": (
        "Hi {first_name}, {business} has you booked {appointment_time}. Reply STOP to opt out."
    ),
    "appointment_reminder_sms": "Reminder: {business} will see you {appointment_time}. Reply STOP to opt out.",
    "no_show_sms": "Hi {first_name}, we missed you today. Reply with a time that works. Reply STOP to opt out.",
}


@pytest.fixture
def shop(business: Business) -> Business:
    business.quiet_hours_start, business.quiet_hours_end = time(0, 0), time(23, 59, 59)
    business.save(update_fields=["quiet_hours_start", "quiet_hours_end"])
    return business


@pytest.fixture
def tech(shop: Business) -> TeamMember:
    return member_create(shop, Role.TECHNICIAN, username="tom", display_name="Tom Technician", email="tom@example.com")


@pytest.fixture
def rule(shop: Business, tech: TeamMember) -> Availability:
    rule = Availability.objects.create(business=shop, days=WEEKDAYS, slots=["09:00-11:00", "13:00-15:00"], capacity=1)
    rule.members.add(tech)
    return rule


@pytest.fixture
def templates(shop: Business) -> dict[str, MessageTemplate]:
    return {
        key: MessageTemplate.objects.create(business=shop, key=key, channel="sms", approved=True, body=body)
        for key, body in TEMPLATES.items()
    }


def owned_lead(business: Business, owner: TeamMember, *, phone: str = "+12125550147", **kw: object) -> Lead:
    lead = lead_create(business, phone=phone, **kw)  # type: ignore[arg-type]
    lead_sync.lead_assign(lead, owner, actor="mia", reason="test")
    for point in lead.contact.points.filter(kind="phone"):
        consent_record(contact_point=point, channel="sms", granted=True, basis="form_disclosure", actor="test")
    lead.refresh_from_db()
    return lead


@pytest.fixture
def lead(shop: Business, setter: TeamMember) -> Lead:
    return owned_lead(shop, setter, first_name="Rosa", last_name="Diaz")
