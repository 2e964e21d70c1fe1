"""The lead audit: does the record keep the promises of the issues' "done when"?

Run after a day of work (or a `simulate` run) by `python manage.py audit_leads`:

- ownership: every active lead has an owner; one in the manager queue says why;
- next action: every active lead has exactly one open next-action task, and the
  lead shows it with its due time;
- stop rules: no automated path message went out after the person replied, booked
  or opted out — counting only paths that were already running at that moment
  (a reminder path started by the booking, or a no-show path after it, is a new
  decision, not a path that failed to stop) — and no automated message on a
  channel after its revocation;
- money: the revenue report's net equals payments minus refunds, to the cent, per
  currency;
- trace: every lead's trace names its first break or none;
- receipts: the hash chain is unbroken.

It reads only, and reports every violation with the lead it concerns.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, F, Min, Sum

from agents.reporting.trace import REPLY_DOES_NOT_STOP, lead_trace
from crm.attribution import revenue_report
from crm.models import (
    CLOSED_STAGES,
    Appointment,
    Business,
    ConsentEvent,
    Lead,
    LeadException,
    Message,
    Payment,
    Refund,
    Task,
)
from crm.permissions import role_allows
from crm.services.receipts import receipts_verify


@dataclass(frozen=True)
class Violation:
    check: str
    subject: str
    detail: str


@dataclass
class Audit:
    leads: int = 0
    active: int = 0
    manager_queue: int = 0
    first_breaks: Counter[str] = field(default_factory=Counter)
    money: dict[str, tuple[Decimal, Decimal]] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)

    def fail(self, check: str, subject: str, detail: str) -> None:
        self.violations.append(Violation(check, subject, detail))


def _ownership_and_next_action(audit: Audit, active: list[Lead]) -> None:
    open_counts = dict(
        Task.objects.filter(lead__in=active, kind="next_action", status=Task.Status.OPEN)
        .values("lead_id")
        .annotate(n=Count("pk"))
        .values_list("lead_id", "n")
    )
    for lead in active:
        owner = lead.owner
        if owner is None:
            audit.fail("ownership", lead.public_id, "an active lead without an owner")
        elif not owner.is_active or not role_allows(owner.role, "message.view"):
            # An owner who cannot read the conversation cannot act on it.
            audit.fail("ownership", lead.public_id, f"owned by {owner}, who cannot see the lead's conversation")
        if LeadException.NO_ELIGIBLE_OWNER in lead.exceptions:
            audit.manager_queue += 1
            if not lead.routing_reason:
                audit.fail("ownership", lead.public_id, "in the manager queue without a reason")
        n = open_counts.get(lead.pk, 0)
        if n != 1:
            audit.fail("next_action", lead.public_id, f"{n} open next actions (must be exactly one)")
        elif not lead.next_action or lead.next_action_due_at is None:
            audit.fail("next_action", lead.public_id, "the lead does not show its next action and due time")


def _stop_times(business: Business) -> dict[int, list[tuple[str, datetime]]]:
    """Per contact: when a reply (an inbound message after our first outbound)
    and each booking happened."""
    stops: dict[int, list[tuple[str, datetime]]] = {}
    first_out = dict(
        Message.objects.filter(business=business, direction="out", contact__isnull=False)
        .values("contact_id")
        .annotate(at=Min("created_at"))
        .values_list("contact_id", "at")
    )
    replies = Message.objects.filter(business=business, direction="in", contact_id__in=list(first_out))
    for contact_id, at in replies.values_list("contact_id", "created_at"):
        if at > first_out[contact_id]:
            stops.setdefault(contact_id, []).append(("reply", at))
    for contact_id, at in Appointment.objects.filter(business=business).values_list("lead__contact_id", "created_at"):
        stops.setdefault(contact_id, []).append(("booking", at))
    return stops


def _stop_rules(audit: Audit, business: Business) -> None:
    stops = _stop_times(business)
    automated = (
        Message.objects.filter(
            business=business,
            direction="out",
            automated=True,
            enrollment__isnull=False,
            status__in=Message.WENT_OUT,
        )
        .exclude(enrollment__sequence__trigger__in=REPLY_DOES_NOT_STOP)
        .select_related("enrollment", "lead")
    )
    for message in automated:
        started = message.enrollment.created_at if message.enrollment else message.created_at
        for what, at in stops.get(message.contact_id or 0, []):
            if started < at < message.created_at:
                subject = message.lead.public_id if message.lead else message.public_id
                audit.fail("stop_rule", subject, f"{message.public_id} went out after the {what} at {at.isoformat()}")
                break
    # The acknowledgement answers the arrival: once the lead is booked, it is too late for it.
    acks = Message.objects.filter(
        business=business,
        direction="out",
        automated=True,
        idempotency_key__startswith="ack:",
        status__in=Message.WENT_OUT,
        lead__appointments__created_at__lt=F("created_at"),
    ).distinct()
    for public_id, lead_id in acks.values_list("public_id", "lead__public_id"):
        audit.fail("stop_rule", lead_id, f"the acknowledgement {public_id} went out after the lead was booked")
    events = ConsentEvent.objects.filter(business=business).order_by("at", "pk")
    for event in events.filter(action="revoke"):
        # A later grant on the same point and channel re-opens it.
        regrant = (
            events.filter(
                contact_point_id=event.contact_point_id, channel=event.channel, action="grant", at__gt=event.at
            )
            .values_list("at", flat=True)
            .first()
        )
        later = Message.objects.filter(
            contact_point_id=event.contact_point_id,
            channel=event.channel,
            direction="out",
            automated=True,
            status__in=Message.WENT_OUT,
            created_at__gt=event.at,
        )
        if regrant is not None:
            later = later.filter(created_at__lt=regrant)
        for public_id in later.values_list("public_id", flat=True):
            audit.fail("stop_rule", public_id, f"automated {event.channel} after the opt-out {event.public_id}")


def _money(audit: Audit, business: Business) -> None:
    paid = Payment.objects.filter(business=business).values("currency").annotate(total=Sum("amount"))
    refunded = dict(
        Refund.objects.filter(business=business)
        .values("currency")
        .annotate(total=Sum("amount"))
        .values_list("currency", "total")
    )
    currencies = {row["currency"] for row in paid} | set(refunded)
    payments = {row["currency"]: row["total"] for row in paid}
    for currency in sorted(currencies):
        expected = (payments.get(currency) or Decimal("0")) - (refunded.get(currency) or Decimal("0"))
        report = revenue_report([business.pk], currency=currency)
        net = report.totals.net
        audit.money[currency] = (net, expected)
        if net != expected:
            audit.fail("money", business.slug, f"{currency}: report net {net} != payments minus refunds {expected}")


def lead_audit(business: Business, *, now: datetime | None = None) -> Audit:
    audit = Audit()
    leads = Lead.objects.filter(business=business, is_test=False)
    audit.leads = leads.count()
    active = list(leads.exclude(stage__in=CLOSED_STAGES).select_related("owner"))
    audit.active = len(active)
    _ownership_and_next_action(audit, active)
    _stop_rules(audit, business)
    _money(audit, business)
    for lead in leads.select_related("business", "contact", "owner__user").iterator(chunk_size=200):
        audit.first_breaks[lead_trace(lead, now=now).first_break or "none"] += 1
    broken = receipts_verify(business)
    if broken is not None:
        audit.fail("receipts", business.slug, str(broken))
    return audit
