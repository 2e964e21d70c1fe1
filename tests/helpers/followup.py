"""A business with an approved follow-up playbook, and a lead ready for it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents.followup.estimates import EXPIRY_TIMER, FOLLOW_UP_TIMER
from agents.followup.sequences.engine import STEP_TIMER
from agents.outbound.gate import REGATE_TIMER
from crm.models import Business, Lead, MessageTemplate, Role, Sequence, Source, TeamMember
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.timers import TimerRun, timers_run_due
from tests.factories import lead_create, member_create

# Noon in New York (the lead's phone is a 212 number), a Tuesday.
NOON_NY = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)
LINE = "+13125550100"
PHONE = "+12125550147"
EMAIL = "pat@example.com"
FOLLOW_UP_KINDS = [STEP_TIMER, FOLLOW_UP_TIMER, EXPIRY_TIMER, REGATE_TIMER]

NO_REPLY_STEPS = [
    {"after": "15m", "channel": "sms", "template": "nudge_sms"},
    {"after": "1d", "channel": "task", "title": "Call the lead"},
    {"after": "2d", "channel": "email", "template": "details_email"},
    {"after": "4d", "channel": "voice", "template": "voice_script"},
]
TEMPLATES = {
    "nudge_sms": (
        "sms",
        "",
        "Hi {first_name}, {owner_first_name} from {business} here. Still need help with "
        "your request? Reply STOP to opt out.",
    ),
    "details_email": (
        "email",
        "Your request with {business}",
        "Hi {first_name}, reply with a good time to call or call us at {business_phone}. {owner_first_name}",
    ),
    "voice_script": ("voice", "", "Hi {first_name}, this is {owner_first_name} from {business} about your request."),
    "no_show_sms": ("sms", "", "Hi {first_name}, we missed you today. Reply with a time that works."),
    "estimate_sms": ("sms", "", "Hi {first_name}, any questions about the estimate from {business}?"),
}


def run_at(at: datetime) -> TimerRun:
    """run_timers as of `at`, for the follow-up clocks only (other roles' timers
    are their own tests' business)."""
    return timers_run_due(now=at, kinds=FOLLOW_UP_KINDS)


@pytest.fixture
def playbook(business: Business) -> dict[str, Sequence]:
    Source.objects.create(business=business, key="main-line", provider="twilio", config={"phone_number": LINE})
    for key, (channel, subject, body) in TEMPLATES.items():
        MessageTemplate.objects.create(
            business=business, key=key, channel=channel, subject=subject, body=body, approved=True
        )
    return {
        "no_reply": Sequence.objects.create(
            business=business,
            key="no_reply",
            trigger="no_reply",
            steps=NO_REPLY_STEPS,
            priority=100,
            goal_stages=["qualified"],
        ),
        "no_show": Sequence.objects.create(
            business=business,
            key="no_show",
            trigger="no_show",
            priority=50,
            steps=[
                {"after": "30m", "channel": "sms", "template": "no_show_sms"},
                {"after": "1d", "channel": "task", "title": "Call to rebook"},
            ],
        ),
        "open_estimate": Sequence.objects.create(
            business=business,
            key="open_estimate",
            trigger="open_estimate",
            priority=80,
            steps=[
                {"after": "1h", "channel": "sms", "template": "estimate_sms"},
                {"after": "2d", "channel": "task", "title": "Call about the estimate"},
            ],
        ),
    }


@pytest.fixture
def owner(business: Business) -> TeamMember:
    return member_create(business, Role.SETTER, username="sam", display_name="Sam Setter", phone="+13125550111")


@pytest.fixture
def manager(business: Business) -> TeamMember:
    return member_create(business, Role.MANAGER, username="mia", display_name="Mia Manager")


def consent_all(lead: Lead, *, channels: tuple[str, ...] = ("sms", "email", "voice"), at: datetime = NOON_NY) -> None:
    for point in lead.contact.points.all():
        for channel in channels:
            if (channel == "email") == (point.kind == "email"):
                consent_record(
                    contact_point=point,
                    channel=channel,
                    granted=True,
                    basis="form_disclosure",
                    actor="test",
                    at=at - timedelta(days=1),
                )


def make_lead(business: Business, owner: TeamMember, **kw: Any) -> Lead:
    lead = lead_create(business, phone=kw.pop("phone", PHONE), email=kw.pop("email", EMAIL), **kw)
    lead_sync.lead_assign(lead, owner, actor="test", reason="test owner")
    consent_all(lead)
    return lead


@pytest.fixture
def lead(business: Business, owner: TeamMember, manager: TeamMember, playbook: dict[str, Sequence]) -> Lead:
    return make_lead(business, owner)
