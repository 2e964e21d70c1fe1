"""Shared helpers for revenue tests: Stripe events signed as Stripe signs
them, leads walked to a stage through CRM Sync, and running what the queue
and the orchestrator hold."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.orchestrator import orchestrate_pending
from crm.models import Business, Lead, Stage, TeamMember
from crm.services import lead_sync
from tests.factories import lead_create
from tests.helpers.capture import run_queued_events

SAMPLES = Path(__file__).resolve().parents[1] / "agents" / "samples"
VECTORS = json.loads((SAMPLES / "signature_vectors.json").read_text())["stripe"]
SECRET = VECTORS["endpoint_secret"]
URL = "/hooks/stripe/"


@pytest.fixture(autouse=True)
def stripe_secret(settings: Any) -> str:
    settings.STRIPE_WEBHOOK_SECRET = SECRET
    return SECRET


def sign(body: bytes, *, secret: str = SECRET, timestamp: int | None = None) -> str:
    """`Stripe-Signature` computed by hand, exactly as Stripe documents it:
    t=<unix seconds>,v1=hex(HMAC-SHA256(secret, f"{t}.{payload}"))."""
    t = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={digest}"


def post(body: bytes | dict[str, Any], *, signature: str | None = None, **sign_kw: Any) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    header = sign(data, **sign_kw) if signature is None else signature
    return Client().post(URL, data=data, content_type="application/json", headers={"Stripe-Signature": header})


def sample(name: str) -> dict[str, Any]:
    return json.loads((SAMPLES / f"stripe_{name}.json").read_text())


def intent_event(
    *,
    event_id: str,
    intent: str,
    amount: int,
    currency: str = "usd",
    metadata: dict[str, str] | None = None,
    email: str | None = None,
    charge: str = "",
) -> dict[str, Any]:
    data = copy.deepcopy(sample("payment_intent_succeeded"))
    data["id"] = event_id
    data["created"] = int(time.time())
    obj = data["data"]["object"]
    obj.update(
        id=intent,
        amount=amount,
        amount_received=amount,
        currency=currency,
        metadata=metadata or {},
        receipt_email=email,
        latest_charge=charge or f"ch_for_{intent}",
    )
    return data


def charge_event(
    *,
    event_id: str,
    charge: str,
    intent: str | None,
    amount: int,
    currency: str = "usd",
    metadata: dict[str, str] | None = None,
    email: str | None = None,
    phone: str | None = None,
    refunded: int | None = None,
    kind: str = "charge.succeeded",
) -> dict[str, Any]:
    data = copy.deepcopy(sample("charge_refunded"))
    data["id"] = event_id
    data["type"] = kind
    data["created"] = int(time.time())
    obj = data["data"]["object"]
    obj.update(
        id=charge,
        payment_intent=intent,
        amount=amount,
        amount_captured=amount,
        currency=currency,
        metadata=metadata or {},
        receipt_email=email,
        amount_refunded=refunded or 0,
        refunded=bool(refunded and refunded >= amount),
    )
    obj["billing_details"].update(email=email, phone=phone)
    if kind != "charge.refunded":
        data["data"].pop("previous_attributes", None)
    return data


def invoice_event(
    *,
    event_id: str,
    invoice: str,
    amount: int,
    intent: str | None = None,
    metadata: dict[str, str] | None = None,
    email: str | None = None,
) -> dict[str, Any]:
    return {
        "id": event_id,
        "object": "event",
        "api_version": "2025-06-30.basil",
        "created": int(time.time()),
        "livemode": False,
        "type": "invoice.paid",
        "data": {
            "object": {
                "id": invoice,
                "object": "invoice",
                "amount_paid": amount,
                "amount_due": amount,
                "currency": "usd",
                "customer_email": email,
                "metadata": metadata or {},
                "status": "paid",
                "status_transitions": {"paid_at": int(time.time())},
                "payments": {
                    "data": [{"payment": {"type": "payment_intent", "payment_intent": intent}}] if intent else []
                },
            }
        },
    }


def deliver(events: list[dict[str, Any]], capture: Any) -> list[int]:
    """Post each event signed, then run the queued processing and the
    orchestrator's steps, as the cluster would."""
    codes = []
    with capture(execute=True):
        for event in events:
            codes.append(post(event).status_code)
    run_queued_events()
    orchestrate_pending()
    return codes


def walk(lead: Lead, *stages: str) -> Lead:
    for stage in stages:
        lead_sync.lead_transition(lead, stage, actor="test", reason="test")
    lead.refresh_from_db()
    return lead


def held_lead(business: Business, owner: TeamMember | None = None, **kw: Any) -> Lead:
    lead = lead_create(business, **kw)
    if owner is not None:
        lead_sync.lead_assign(lead, owner, actor="test", reason="test")
    return walk(lead, Stage.CONTACTED, Stage.BOOKED, Stage.APPOINTMENT_HELD)


def days_ago(n: float) -> Any:
    return timezone.now() - timedelta(days=n)


def usd(value: str) -> Decimal:
    return Decimal(value)
