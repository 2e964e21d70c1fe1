"""Builders for reporting tests: leads at each point of their life, made
through the crm services (records, CRM Sync, the consent ledger)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from crm.models import Business, Lead, Role, Sequence, Source, Stage, TeamMember
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.records import (
    appointment_record,
    contact_create,
    job_record,
    lead_open,
    payment_record,
)
from tests.factories import member_create

ACTOR = "test"


@pytest.fixture
def source(business: Business) -> Source:
    return Source.objects.create(business=business, key="site", provider="website", secret="s3cret-site")


@pytest.fixture
def owner(business: Business) -> TeamMember:
    return member_create(business, Role.OWNER, username="olga", email="olga@example.com")


def sourced_lead(
    business: Business,
    source: Source | None,
    *,
    phone: str = "+12125550147",
    first_name: str = "Pat",
    received_at: datetime | None = None,
) -> Lead:
    contact = contact_create(business=business, actor=ACTOR, first_name=first_name, last_name="Doe", phones=[phone])
    return lead_open(contact=contact, actor=ACTOR, source=source, touch={"channel": "form"}, received_at=received_at)


def grant_sms(lead: Lead) -> None:
    consent_record(
        contact_point=lead.contact.points.get(kind="phone"),
        channel="sms",
        granted=True,
        basis="form_disclosure",
        actor=ACTOR,
    )


def owned(lead: Lead, member: TeamMember, *, due: datetime | None = None) -> Lead:
    lead_sync.lead_assign(lead, member, actor=ACTOR, reason="test")
    lead_sync.lead_set_next_action(
        lead, "Call back", due or timezone.now() + timedelta(hours=1), actor=ACTOR, reason="test"
    )
    lead.refresh_from_db()
    return lead


def held(lead: Lead, *, at: datetime | None = None) -> None:
    start = at or timezone.now() - timedelta(days=1)
    appointment_record(lead=lead, starts_at=start, ends_at=start + timedelta(hours=1), actor=ACTOR, status="held")


def completed_job(lead: Lead, *, at: datetime | None = None) -> None:
    job_record(lead=lead, actor=ACTOR, status="completed", completed_at=at or timezone.now())


def paid(lead: Lead, amount: str = "250.00", *, at: datetime | None = None):
    return payment_record(
        lead=lead, amount=Decimal(amount), currency="USD", actor=ACTOR, received_at=at or timezone.now()
    )


def to_stage(lead: Lead, *stages: str) -> Lead:
    for stage in stages:
        lead_sync.lead_transition(lead, stage, actor=ACTOR, reason="test")
    lead.refresh_from_db()
    return lead


def won(lead: Lead) -> Lead:
    return to_stage(lead, Stage.BOOKED, Stage.APPOINTMENT_HELD, Stage.WON)


def sequence(business: Business, key: str = "no_reply", trigger: str = "no_reply") -> Sequence:
    return Sequence.objects.create(
        business=business, key=key, trigger=trigger, steps=[{"after": "1d", "channel": "sms", "template": "x"}]
    )
