"""Stripe's payment and refund events, acted on: which business a payment
is for, the payment recorded once and matched, refunds brought level with
Stripe's cumulative total. Capture verifies, stores and parses the event
(agents/capture/providers/stripe.py); revenue, which owns payments,
processes it, registered by kind at startup.
"""

from __future__ import annotations

from django.db.models.fields.json import KeyTextTransform

from agents.capture.base import json_object
from agents.capture.providers.stripe import HANDLED, StripeMoney, parse_event
from agents.revenue.payments import business_from_refs, metadata_refs, payment_receive, refund_sync_total
from crm.models import Business, InboundEvent, Payment, Provider, Source
from crm.services.inbound_handlers import handler_register


class BusinessUnknown(LookupError):
    """No way to tell which business a Stripe payment belongs to."""


def business_for(money: StripeMoney) -> Business:
    """Which business the payment is for. A payment on a connected account
    that a business's Stripe source holds (`account_id`, one business's
    alone) is that business's, whatever its metadata says: a business
    writes its own payments' metadata, and must not file one as another's.
    Otherwise: named in the metadata (`business` or `tenant`, a slug or
    public id); owning our ids in the metadata; owning the payment already
    (an earlier event); the only Stripe source; or the only business."""
    sources = Source.objects.select_related("business").filter(provider=Provider.STRIPE)
    if money.account:
        holder = sources.annotate(account=KeyTextTransform("account_id", "config")).filter(account=money.account)
        source = holder.first()
        if source is not None:
            named = _named_business(money) or business_from_refs(metadata_refs(money.hints.metadata))
            if named is not None and named.pk != source.business_id:
                raise BusinessUnknown(
                    "the payment's metadata names another business than the one its Stripe account belongs to"
                )
            return source.business
    named = _named_business(money)
    if named is not None:
        return named
    by_refs = business_from_refs(metadata_refs(money.hints.metadata))
    if by_refs is not None:
        return by_refs
    existing = Payment.objects.filter(provider=Provider.STRIPE, external_id=money.payment_key).first()
    if existing is not None:
        return existing.business
    stripe_sources = list(sources.filter(is_active=True)[:2])
    if len(stripe_sources) == 1:
        return stripe_sources[0].business
    only = list(Business.objects.all()[:2])
    if len(only) == 1:
        return only[0]
    raise BusinessUnknown(
        "cannot tell which business this payment is for: put `business` (the slug) or one of our ids "
        "(inv_…, job_…, lead_…) in the payment's metadata, or add a Stripe source with the account_id"
    )


def _named_business(money: StripeMoney) -> Business | None:
    for value in filter(None, (money.hints.metadata.get(k, "") for k in ("business", "tenant"))):
        found = Business.objects.filter(slug=value).first() or Business.objects.filter(public_id=value).first()
        if found is not None:
            return found
    return None


def _process(event: InboundEvent) -> str:
    money = parse_event(json_object(bytes(event.body)), received_at=event.received_at)
    if money is None:
        return InboundEvent.Status.IGNORED
    business = business_for(money)
    if event.business_id != business.pk:
        InboundEvent.objects.filter(pk=event.pk).update(business=business)
    received = payment_receive(
        business,
        provider=Provider.STRIPE,
        external_id=money.payment_key,
        amount=money.amount,
        currency=money.currency,
        received_at=money.paid_at,
        hints=money.hints,
        inbound_event=event,
    )
    if money.refunded_total is not None:
        refund_sync_total(
            received.payment,
            total=money.refunded_total,
            currency=money.currency,
            refunded_at=money.refunded_at or money.paid_at,
            provider=Provider.STRIPE,
            reference=money.charge_id,
            reason="refunded in Stripe",
            inbound_event=event,
        )
    return InboundEvent.Status.PROCESSED


def register() -> None:
    for kind in HANDLED:
        handler_register(Provider.STRIPE, kind, _process)
