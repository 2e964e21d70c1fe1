"""Stripe webhooks (`POST /hooks/stripe/`): payments and refunds.

Authentication is Stripe's own: `Stripe-Signature: t=…,v1=…`, an HMAC-SHA256
of `"{t}.{raw body}"` with `STRIPE_WEBHOOK_SECRET`, checked by the stripe
package (`stripe.WebhookSignature.verify_header`, five minutes' tolerance).

* 200 a stored event, and a repeat of one (deduplicated on the event id
  `evt_…`); an event type we do not handle is stored `ignored`.
* 400 a bad, missing or stale signature (counted); a signed body that is not
  a readable event (stored failed, for inspection and replay).
* 413 a body over 1 MiB; 503 when no secret is configured (Stripe retries,
  so nothing is lost while the operator sets it).

Handled: `payment_intent.succeeded`, `charge.succeeded`, `charge.refunded`,
`invoice.paid`. One payment reaches us as several events (the PaymentIntent,
its Charge, maybe its Invoice), in any order, so a payment is keyed by its
PaymentIntent id (else its Charge id, else the Invoice id) and recorded once.
`charge.refunded` carries the whole charge: when it comes first, the payment
is recorded from it and the refund applied, so out-of-order delivery ends the
same. Its `amount_refunded` is cumulative: the part not yet recorded becomes
one refund. Amounts arrive in minor units and become a Decimal with their
currency here, at the edge.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import stripe
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.capture.base import PaymentHints, json_object
from agents.capture.intake import event_accept, headers_kept
from agents.capture.webhooks import WebhookError, accept, accepted_response, body_digest, raw_body, reject, remote_addr
from crm.models import InboundEvent, Provider
from crm.services.inbound_handlers import MalformedPayload

TOLERANCE_SECONDS = 300
PAYMENT_INTENT_SUCCEEDED = "payment_intent.succeeded"
CHARGE_SUCCEEDED = "charge.succeeded"
CHARGE_REFUNDED = "charge.refunded"
INVOICE_PAID = "invoice.paid"
HANDLED = (PAYMENT_INTENT_SUCCEEDED, CHARGE_SUCCEEDED, CHARGE_REFUNDED, INVOICE_PAID)

# Stripe's currencies without minor units, and those with three decimals
# (docs.stripe.com/currencies); every other currency has two.
ZERO_DECIMAL = frozenset(
    {"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"}
)
THREE_DECIMAL = frozenset({"bhd", "jod", "kwd", "omr", "tnd"})
CENT = Decimal("0.01")


def stripe_signature(body: bytes, secret: str, timestamp: int) -> str:
    """The `Stripe-Signature` Stripe sends for these bytes at `timestamp`."""
    return str(stripe.WebhookSignature.generate_signature_header(body.decode("utf-8"), secret, timestamp))


def money_from_minor(minor: Any, currency: Any) -> tuple[Decimal, str]:
    """Minor units (`45000`, `"usd"`) as a Decimal and an ISO code (450.00 USD)."""
    if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
        raise MalformedPayload(f"amount {minor!r} is not a non-negative integer of minor units")
    if not isinstance(currency, str) or len(currency) != 3 or not currency.isalpha():
        raise MalformedPayload(f"currency {currency!r} is not an ISO code")
    code = currency.lower()
    exponent = 0 if code in ZERO_DECIMAL else 3 if code in THREE_DECIMAL else 2
    amount = Decimal(minor).scaleb(-exponent)
    cents = amount.quantize(CENT)
    if cents != amount:
        raise MalformedPayload(f"{minor} {code} in minor units has more precision than we keep (cents)")
    return cents, code.upper()


def _id(value: Any) -> str:
    """An id field that may also arrive expanded into its object."""
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) else ""


def _time(value: Any, fallback: datetime) -> datetime:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return datetime.fromtimestamp(value, tz=UTC)
    return fallback


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(*values: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v.strip() for v in values if isinstance(v, str) and v.strip()))


@dataclass(frozen=True)
class StripeMoney:
    """What one Stripe event says about one payment."""

    kind: str
    payment_key: str  # the PaymentIntent id, else the Charge id, else the Invoice id
    charge_id: str
    amount: Decimal
    currency: str
    paid_at: datetime
    hints: PaymentHints
    refunded_total: Decimal | None = None  # charge.refunded: cumulative
    refunded_at: datetime | None = None
    account: str = ""


def parse_event(data: dict[str, Any], *, received_at: datetime) -> StripeMoney | None:
    """A handled event as money; None when it records nothing (an uncaptured
    charge, a zero invoice). Pure: no database."""
    kind = data.get("type")
    obj = _dict(_dict(data.get("data")).get("object"))
    if not obj.get("id"):
        raise MalformedPayload("data.object has no id")
    event_at = _time(data.get("created"), received_at)
    metadata = {str(k): str(v) for k, v in _dict(obj.get("metadata")).items() if v is not None}
    account = str(data.get("account") or "")
    if kind == PAYMENT_INTENT_SUCCEEDED:
        amount, currency = money_from_minor(obj.get("amount_received"), obj.get("currency"))
        hints = PaymentHints(
            metadata=metadata,
            emails=_strings(obj.get("receipt_email")),
            phones=_strings(_dict(obj.get("shipping")).get("phone")),
            description=str(obj.get("description") or ""),
        )
        return StripeMoney(
            kind, obj["id"], _id(obj.get("latest_charge")), amount, currency, event_at, hints, account=account
        )
    if kind in (CHARGE_SUCCEEDED, CHARGE_REFUNDED):
        captured = obj.get("amount_captured")
        if captured is None and obj.get("captured"):
            captured = obj.get("amount")
        amount, currency = money_from_minor(captured if captured is not None else 0, obj.get("currency"))
        if amount == 0 and kind == CHARGE_SUCCEEDED:
            return None  # authorised, not captured: no money yet
        billing = _dict(obj.get("billing_details"))
        hints = PaymentHints(
            metadata=metadata,
            emails=_strings(billing.get("email"), obj.get("receipt_email")),
            phones=_strings(billing.get("phone")),
            name=str(billing.get("name") or ""),
            description=str(obj.get("description") or ""),
        )
        key = _id(obj.get("payment_intent")) or obj["id"]
        paid_at = _time(obj.get("created"), event_at)
        if kind == CHARGE_SUCCEEDED:
            return StripeMoney(kind, key, obj["id"], amount, currency, paid_at, hints, account=account)
        refunded, _ = money_from_minor(obj.get("amount_refunded"), obj.get("currency"))
        return StripeMoney(kind, key, obj["id"], amount, currency, paid_at, hints, refunded, event_at, account)
    if kind == INVOICE_PAID:
        amount, currency = money_from_minor(obj.get("amount_paid"), obj.get("currency"))
        if amount == 0:
            return None  # a free or fully credited invoice moved no money
        payments = _dict(obj.get("payments")).get("data") or []
        first = _dict(_dict(payments[0]).get("payment")) if isinstance(payments, list) and payments else {}
        intent = _id(obj.get("payment_intent")) or _id(first.get("payment_intent"))
        charge = _id(obj.get("charge")) or _id(first.get("charge"))
        hints = PaymentHints(
            metadata=metadata,
            emails=_strings(obj.get("customer_email")),
            phones=_strings(obj.get("customer_phone")),
            name=str(obj.get("customer_name") or ""),
            description=str(obj.get("description") or obj.get("number") or ""),
        )
        paid_at = _time(_dict(obj.get("status_transitions")).get("paid_at"), event_at)
        return StripeMoney(
            kind, intent or charge or obj["id"], charge, amount, currency, paid_at, hints, account=account
        )
    raise MalformedPayload(f"unhandled event type {kind!r}")


def _refuse_future(header: str, now: float | None = None) -> None:
    """The SDK's tolerance looks only at the past: a header dated ahead of
    our clock (beyond the same tolerance) would stay replayable for as long
    as it is early. Called once the header verified, so `t` is a number."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    ahead = int(fields["t"]) - (time.time() if now is None else now)
    if ahead > TOLERANCE_SECONDS:
        raise stripe.SignatureVerificationError(
            f"Timestamp is {int(ahead)} s ahead of our clock. Tolerance {TOLERANCE_SECONDS} s", header
        )


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest) -> HttpResponse:
    try:
        body = raw_body(request)
        secret = settings.STRIPE_WEBHOOK_SECRET
        if not secret:
            raise WebhookError(
                503, "not_configured", "STRIPE_WEBHOOK_SECRET is not set: no Stripe event can be verified"
            )
        header = request.META.get("HTTP_STRIPE_SIGNATURE", "")
        try:
            stripe.WebhookSignature.verify_header(body, header, secret, tolerance=TOLERANCE_SECONDS)
            _refuse_future(header)
        except (stripe.SignatureVerificationError, UnicodeDecodeError) as exc:
            reason = (
                str(exc).split(". ")[0][:200] if isinstance(exc, stripe.SignatureVerificationError) else "not UTF-8"
            )
            raise reject(
                request, provider=Provider.STRIPE, source=None, reason=reason, status=400, error="invalid_signature"
            ) from exc
        malformed, data = "", {}
        try:
            data = json_object(body)
            if not isinstance(data.get("id"), str) or not data["id"]:
                raise MalformedPayload("the event has no id")
            if data.get("type") in HANDLED:
                parse_event(data, received_at=timezone.now())
        except MalformedPayload as exc:
            malformed = str(exc)
        event_id = str(data.get("id") or "") or body_digest(body)
        kind = str(data.get("type") or "")[:64]
        if malformed:
            accept(request, provider=Provider.STRIPE, external_id=event_id, body=body, kind=kind, malformed=malformed)
            raise WebhookError(400, "malformed_payload", malformed)
        is_test = data.get("livemode") is False
        if kind in HANDLED:
            accepted = accept(
                request, provider=Provider.STRIPE, external_id=event_id, body=body, kind=kind, is_test=is_test
            )
        else:
            # Kept raw like everything else, but nothing here acts on it.
            headers = headers_kept(request.META)
            headers["Remote-Addr"] = remote_addr(request)
            accepted = event_accept(
                provider=Provider.STRIPE,
                external_id=event_id,
                body=body,
                headers=headers,
                kind=kind,
                is_test=is_test,
                status=InboundEvent.Status.IGNORED,
            )
    except WebhookError as exc:
        return exc.response()
    return accepted_response(accepted)


urlpatterns = [
    path("hooks/stripe/", stripe_webhook, name="hook-stripe"),
]
