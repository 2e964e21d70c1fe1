"""Conversion tests' helpers: accounts saved through the service, leads
that come from a Google click or a Meta lead form, walked through every
moment by the services that record them, and upload runs as the outbound
cluster makes them."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from agents.booking.services import appointment_mark_held
from agents.conversions.delivery import conversions_pump
from crm.models import Business, ConversionAccount, Estimate, Lead, Payment, Stage
from crm.services import lead_sync
from crm.services.conversions import conversion_account_save
from crm.services.records import (
    appointment_record,
    contact_create,
    estimate_record,
    lead_open,
    payment_record,
)

CUSTOMER = "1234567890"
ACTIONS = {
    kind: f"customers/{CUSTOMER}/conversionActions/{n}"
    for n, kind in enumerate(("qualified", "booked", "appointment_held", "won", "paid"), start=101)
}
EVENTS = {
    "qualified": "Qualified Lead",
    "booked": "Appointment Booked",
    "appointment_held": "Appointment Held",
    "won": "Won",
    "paid": "Purchase",
}
GOOGLE_SECRETS = {
    "developer_token": "dev-token-local",
    "client_id": "client-id.apps.example",
    "client_secret": "client-secret-local",
    "refresh_token": "1//refresh-local",
}
DATASET = "998877665544332"
META_TOKEN = "EAAtestconversionstoken0000000001"
SECONDS = 30.0


def accounts(business: Business, *, enhanced: bool = False) -> tuple[ConversionAccount, ConversionAccount]:
    google, _ = conversion_account_save(
        business=business,
        platform="google",
        config={"customer_id": CUSTOMER, "actions": ACTIONS, "enhanced_conversions": enhanced},
        secrets=GOOGLE_SECRETS,
        actor="test",
    )
    meta, _ = conversion_account_save(
        business=business,
        platform="meta",
        config={"dataset_id": DATASET, "events": EVENTS},
        secrets={"access_token": META_TOKEN},
        actor="test",
    )
    return google, meta


def lead_from(
    business: Business,
    *,
    gclid: str = "",
    meta_lead_id: str = "",
    phone: str = "+12125550147",
    email: str = "",
    at: datetime | None = None,
) -> Lead:
    contact = contact_create(
        business=business,
        actor="test",
        first_name="Rosa",
        last_name="Diaz",
        phones=[phone],
        emails=[email] if email else [],
    )
    touch = {"channel": "form", "provider": "meta" if meta_lead_id else "google_ads", "campaign_id": "2041"}
    if gclid:
        touch["gclid"] = gclid
    if meta_lead_id:
        touch["meta_lead_id"] = meta_lead_id
    return lead_open(contact=contact, actor="test", touch=touch, received_at=at or timezone.now() - timedelta(hours=3))


def walk_to_paid(lead: Lead, *, amount: Decimal = Decimal("4800.00")) -> Payment:
    """qualified, booked, appointment held, won (an accepted estimate) and paid."""
    now = timezone.now()
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(lead, Stage.QUALIFIED, actor="sam", reason="fits")
    visit = appointment_record(
        lead=lead, starts_at=now - timedelta(hours=2), ends_at=now - timedelta(hours=1), actor="sam"
    )
    lead_sync.lead_transition(lead, Stage.BOOKED, actor="sam", reason="booked")
    appointment_mark_held(visit, actor="tom", now=now - timedelta(minutes=50))
    estimate_record(
        lead=lead, amount=amount, currency="USD", actor="mia", status=Estimate.Status.ACCEPTED, decided_at=now
    )
    lead_sync.lead_transition(lead, Stage.WON, actor="mia", reason="accepted")
    return payment_record(lead=lead, amount=amount, currency="USD", actor="mia", received_at=now)


def upload(now: datetime | None = None) -> dict[str, int]:
    """One run of the outbound cluster's conversion uploads."""
    return conversions_pump(now=now, seconds=SECONDS)
