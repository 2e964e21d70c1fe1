"""Signed Stripe payments and refunds for `manage.py simulate`.

Some of the simulated people pay: a `payment_intent.succeeded`, its
`charge.succeeded`, sometimes a retry of the same bytes, and for some a
`charge.refunded` (partial or whole). One refund arrives before its payment
(Stripe does not promise order). One delivery is signed with the wrong secret.

Each payment carries the business's slug and the person's email and phone, as
a real checkout would. The lead's public id cannot be known when the plan is
built (the server creates the lead), so each payment's body is finished when
it is sent: the simulator reads the person's lead from the database it shares
with the server and puts the id in the metadata (Payment Matching then links
directly); a lead not there yet leaves the payment to be matched by contact.
Bodies are signed as Stripe signs them at that moment.
"""

from __future__ import annotations

import json
import random
import string
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from agents.capture.providers.stripe import stripe_signature
from devtools.polling import poll_until
from devtools.simulator.base import BAD_SIGNATURE, DUPLICATE, OK, STORES_NONE, STORES_SAME, Job, Post

PAYMENT = "payment"
REFUND = "refund"
PAYMENT_PHASE = 8
REFUND_PHASE = 9
AMOUNTS = (8900, 14950, 32500, 45000, 124999, 18900, 7550)
LEAD_WAIT_SECONDS = 20.0


def _token(rng: random.Random, n: int = 24) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


def lead_id_for(business_slug: str, phone: str, email: str, *, wait: float = LEAD_WAIT_SECONDS) -> str:
    """The public id of the person's newest lead, waiting a little for the
    server's workers to create it; "" when it does not appear."""
    from django.db import connection

    from crm.models import ContactPoint, Lead

    values = [v for v in (phone, email.lower()) if v]
    contact_ids = ContactPoint.objects.filter(business__slug=business_slug, value__in=values, is_valid=True)
    newest = Lead.objects.filter(contact_id__in=contact_ids.values("contact_id")).order_by("-created_at")
    try:
        found = poll_until(lambda: newest.values_list("public_id", flat=True).first(), timeout=wait)
        return str(found or "")
    finally:
        connection.close()  # a sender thread's own connection


def _intent(
    event_id: str, intent: str, charge: str, amount: int, metadata: dict[str, str], email: str, created: int
) -> dict[str, Any]:
    return {
        "id": event_id,
        "object": "event",
        "api_version": "2025-06-30.basil",
        "created": created,
        "livemode": False,
        "type": "payment_intent.succeeded",
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
        "data": {
            "object": {
                "id": intent,
                "object": "payment_intent",
                "amount": amount,
                "amount_received": amount,
                "currency": "usd",
                "status": "succeeded",
                "latest_charge": charge,
                "receipt_email": email,
                "metadata": metadata,
                "created": created - 5,
                "description": "Service visit",
            }
        },
    }


def _charge(
    event_id: str,
    kind: str,
    intent: str,
    charge: str,
    amount: int,
    refunded: int,
    metadata: dict[str, str],
    email: str,
    phone: str,
    name: str,
    created: int,
) -> dict[str, Any]:
    obj = {
        "id": charge,
        "object": "charge",
        "amount": amount,
        "amount_captured": amount,
        "amount_refunded": refunded,
        "captured": True,
        "paid": True,
        "refunded": refunded >= amount > 0,
        "currency": "usd",
        "payment_intent": intent,
        "metadata": metadata,
        "receipt_email": email,
        "created": created - 4,
        "billing_details": {"email": email, "phone": phone, "name": name, "address": {"postal_code": None}},
        "status": "succeeded",
    }
    data: dict[str, Any] = {"object": obj}
    if kind == "charge.refunded":
        data["previous_attributes"] = {"amount_refunded": 0, "refunded": False}
    return {
        "id": event_id,
        "object": "event",
        "api_version": "2025-06-30.basil",
        "created": created,
        "livemode": False,
        "type": kind,
        "pending_webhooks": 1,
        "data": data,
    }


def _finisher(
    event: dict[str, Any], secret: str, business_slug: str, phone: str, email: str
) -> Callable[[], tuple[bytes, dict[str, str]]]:
    def finish() -> tuple[bytes, dict[str, str]]:
        lead = lead_id_for(business_slug, phone, email) if (phone or email) else ""
        if lead:
            event["data"]["object"]["metadata"]["lead_id"] = lead
        body = json.dumps(event, separators=(",", ":")).encode()
        return body, {
            "Content-Type": "application/json",
            "Stripe-Signature": stripe_signature(body, secret, int(time.time())),
        }

    return finish


def payment_jobs(ctx: Any, rng: random.Random, people: list[Any], now: datetime) -> list[Any]:
    """The payments and refunds of about a third of `people` (at least one),
    plus one delivery signed with the wrong secret."""

    def post(intent: str, event: dict[str, Any], person: Any, **kw: Any) -> Any:
        finish = _finisher(event, ctx.stripe_webhook_secret, ctx.business_slug, person.phone, person.email)
        return Post(
            "stripe",
            intent,
            "/hooks/stripe/",
            b"",
            {},
            expect=OK,
            event_provider="stripe",
            person=person.number,
            prepare=finish,
            **kw,
        )

    payers = [p for p in people if (p.phone or p.email) and not p.is_google_test]
    payers = rng.sample(payers, max(1, round(len(payers) / 3))) if payers else []
    created = int(now.timestamp())
    jobs: list[Any] = []
    for n, person in enumerate(payers):
        amount = rng.choice(AMOUNTS)
        intent, charge = f"pi_{_token(rng)}", f"ch_{_token(rng)}"
        meta = {"business": ctx.business_slug}
        paid = _intent(f"evt_{_token(rng)}", intent, charge, amount, dict(meta), person.email, created)
        captured = _charge(
            f"evt_{_token(rng)}",
            "charge.succeeded",
            intent,
            charge,
            amount,
            0,
            dict(meta),
            person.email,
            person.phone,
            person.name,
            created,
        )
        refund = None
        if n == 0 or rng.random() < 0.35:
            refunded = amount if rng.random() < 0.4 else rng.randint(1, amount - 1)
            refund = _charge(
                f"evt_{_token(rng)}",
                "charge.refunded",
                intent,
                charge,
                amount,
                refunded,
                dict(meta),
                person.email,
                person.phone,
                person.name,
                created + 60,
            )
        posts = [post(PAYMENT, paid, person), post(PAYMENT, captured, person)]
        if rng.random() < 0.2:
            posts.append(
                Post(
                    "stripe",
                    DUPLICATE,
                    "/hooks/stripe/",
                    expect=OK,
                    stores=STORES_SAME,
                    event_provider="stripe",
                    person=person.number,
                    repeat_previous=True,
                )
            )
        if refund is not None and n == 1:
            # Out of order: the refund reaches the server before its payment.
            jobs.append(Job(PAYMENT_PHASE, [post(REFUND, refund, person), *posts]))
            continue
        jobs.append(Job(PAYMENT_PHASE, posts))
        if refund is not None:
            jobs.append(Job(REFUND_PHASE, [post(REFUND, refund, person)]))
    forged = _intent(f"evt_{_token(rng)}", f"pi_{_token(rng)}", f"ch_{_token(rng)}", 100, {}, "", created)
    body = json.dumps(forged, separators=(",", ":")).encode()
    header = {"Content-Type": "application/json", "Stripe-Signature": stripe_signature(body, "whsec_not_ours", created)}
    jobs.append(
        Job(
            PAYMENT_PHASE,
            [
                Post(
                    "stripe",
                    BAD_SIGNATURE,
                    "/hooks/stripe/",
                    body,
                    header,
                    expect=frozenset({400}),
                    stores=STORES_NONE,
                    event_provider="stripe",
                )
            ],
        )
    )
    return jobs
