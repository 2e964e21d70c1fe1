"""Payment Matching, and payments and refunds as their own records.

A payment arrives from a provider (Stripe) or is recorded by a person. Money
is a Decimal beside its currency from here on; minor units exist only at the
provider's edge.

Matching, in order:

1. Metadata that carries one of our ids (`inv_…`, `job_…`, `lead_…`) links
   the payment directly (ids that disagree go to a person instead).
2. Otherwise candidates are proposed from the payer's email and phone
   (ContactPoint), the amount (an issued invoice or a sent estimate for
   exactly that amount and currency) and the time window: a single exact
   candidate (contact, amount and time) links itself.
3. Anything else stays `unmatched` (one or no candidate) or `ambiguous`
   (several), with the candidates on the payment, and becomes an open
   `unmatched_payment` exception item owned by the business's manager. A
   person's link (`payment_link`, from the admin) resolves it.

Every step writes a receipt. A matched payment is the orchestrator's
"payment" event for its lead, a refund its "refund" event; their steps are
`payment_step` and `refund_step` below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from agents.capture.base import PaymentHints
from agents.events import MissingInformation, lead_event
from crm.models import (
    Business,
    ContactPoint,
    ContactPointKind,
    Estimate,
    EventType,
    ExceptionItem,
    InboundEvent,
    Invoice,
    Job,
    Lead,
    Payment,
    Refund,
    Stage,
    Task,
)
from crm.phones import email_normalize, phone_to_e164
from crm.selectors import business_manager
from crm.services import lead_sync
from crm.services.receipts import receipt_write
from crm.services.records import payment_announce, payment_record, refund_record, tasks_close

ACTOR = "agent:payment_matching"
EXCEPTION_KIND = "unmatched_payment"
# How far back an invoice or estimate may lie and still explain a payment.
MATCH_WINDOW = timedelta(days=120)
# A payment may land a little before the invoice is marked issued.
MATCH_LEAD_TIME = timedelta(days=1)
MAX_CANDIDATES = 10
# The open task that asks someone to collect an invoice (created when it is issued).
COLLECT_TASK_KIND = Task.Kind.PAYMENT
ZERO = Decimal("0.00")
CENT = Decimal("0.01")


class PaymentError(Exception):
    """A link or record refused: nothing written."""


@dataclass(frozen=True)
class MetadataRefs:
    invoices: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()
    leads: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.invoices or self.jobs or self.leads)


def metadata_refs(metadata: dict[str, Any]) -> MetadataRefs:
    """Our public ids among the metadata values, whatever the keys are called
    (`invoice_id`, `job`, `order_ref`…): the prefix says what each one is."""
    values = [str(v).strip() for v in metadata.values() if isinstance(v, str | int)]
    return MetadataRefs(
        invoices=tuple(sorted({v for v in values if v.startswith("inv_")})),
        jobs=tuple(sorted({v for v in values if v.startswith("job_")})),
        leads=tuple(sorted({v for v in values if v.startswith("lead_")})),
    )


def business_from_refs(refs: MetadataRefs) -> Business | None:
    """The one business our ids in a payment's metadata belong to (public ids
    are unique across businesses), or None when they name none or several."""
    ids: set[int] = set()
    ids.update(Invoice.objects.filter(public_id__in=refs.invoices).values_list("business_id", flat=True))
    ids.update(Job.objects.filter(public_id__in=refs.jobs).values_list("business_id", flat=True))
    ids.update(Lead.objects.filter(public_id__in=refs.leads).values_list("business_id", flat=True))
    return Business.objects.get(pk=ids.pop()) if len(ids) == 1 else None


@dataclass(frozen=True)
class Link:
    lead: Lead
    invoice: Invoice | None = None
    job: Job | None = None
    via: str = ""


@dataclass
class Candidate:
    lead: Lead
    invoice: Invoice | None = None
    estimate: Estimate | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return {"contact", "amount", "time"} <= set(self.reasons)

    def as_json(self) -> dict[str, Any]:
        return {
            "lead": self.lead.public_id,
            "contact": self.lead.contact.public_id,
            "invoice": self.invoice.public_id if self.invoice else None,
            "estimate": self.estimate.public_id if self.estimate else None,
            "amount": str(self.invoice.amount if self.invoice else self.estimate.amount if self.estimate else ""),
            "reasons": self.reasons,
            "exact": self.exact,
        }


# --- receiving -----------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    payment: Payment
    created: bool


@transaction.atomic
def payment_receive(
    business: Business,
    *,
    provider: str,
    external_id: str,
    amount: Decimal,
    currency: str,
    received_at: datetime,
    hints: PaymentHints,
    inbound_event: InboundEvent | None = None,
) -> Received:
    """Record a provider's payment once per (provider, external_id) and match it.

    A second event about the same payment (Stripe sends one per object: the
    PaymentIntent, its Charge, the Invoice) changes no amount; it may only
    complete a link the first could not make, when it carries our ids.
    Joins the caller's transaction; racing deliveries store one row (the
    unique constraint decides, not a prior read).
    """
    money_check(amount, currency)
    try:
        with transaction.atomic():
            payment = Payment.objects.create(
                business=business,
                provider=provider,
                external_id=external_id,
                amount=amount,
                currency=currency.upper(),
                received_at=received_at,
                inbound_event=inbound_event,
                match_status=Payment.MatchStatus.UNMATCHED,
            )
    except IntegrityError:
        payment = Payment.objects.select_for_update().get(business=business, provider=provider, external_id=external_id)
        if payment.match_status != Payment.MatchStatus.MATCHED and metadata_refs(hints.metadata):
            payment_match(payment, hints)
        return Received(payment, created=False)
    receipt_write(
        business=business,
        subject=payment.public_id,
        actor=ACTOR,
        action="payment.received",
        reason=hints.description[:300],
        after={
            "amount": amount,
            "currency": payment.currency,
            "provider": provider,
            "external_id": external_id,
            "received_at": received_at,
        },
    )
    payment_match(payment, hints, initial=True)
    # Told once it is matched or left for a person: the event carries its lead when it has one.
    payment_announce(payment, EventType.PAYMENT_RECORDED)
    return Received(payment, created=True)


def money_check(amount: Decimal, currency: str) -> None:
    if not isinstance(amount, Decimal):
        raise PaymentError(f"money must be a Decimal, not {type(amount).__name__}")
    if amount < 0 or amount != amount.quantize(CENT):
        raise PaymentError(f"{amount} is not a non-negative amount in cents")
    if len(currency) != 3 or not currency.isalpha():
        raise PaymentError(f"{currency!r} is not an ISO currency code")


# --- matching ----------------------------------------------------------------


def payment_match(payment: Payment, hints: PaymentHints, *, initial: bool = False) -> Payment:
    """Link the payment by our ids, or by a single exact candidate; otherwise
    keep the candidates and open an exception for a person. `initial`: the
    payment is being recorded now (its `payment.recorded` event tells the
    match; a later match is a `payment.matched` event of its own)."""
    refs = metadata_refs(hints.metadata)
    if refs:
        link, conflict = _direct_link(payment, refs)
        if link is not None:
            return _link(payment, link, actor=ACTOR, reason=f"metadata names {link.via}", initial=initial)
        if conflict:
            return _leave_for_a_person(payment, [], f"metadata names records that disagree: {conflict}")
    candidates = _candidates(payment, hints)
    exact = [c for c in candidates if c.exact]
    if len(exact) == 1:
        best = exact[0]
        job = best.invoice.job if best.invoice else None
        return _link(
            payment,
            Link(best.lead, best.invoice, job, via="contact, amount and time"),
            actor=ACTOR,
            reason="the one exact match by contact, amount and time",
            initial=initial,
        )
    if len(exact) > 1:
        why = f"{len(exact)} exact matches by contact, amount and time"
    elif candidates:
        why = f"no exact match; {len(candidates)} partial candidate(s)"
    else:
        why = "no candidate: no known contact, no open invoice or estimate for this amount"
    return _leave_for_a_person(payment, candidates, why)


def _direct_link(payment: Payment, refs: MetadataRefs) -> tuple[Link | None, str]:
    business_id = payment.business_id
    invoices = list(
        Invoice.objects.select_related("lead__contact", "job").filter(
            business_id=business_id, public_id__in=refs.invoices
        )
    )
    jobs = list(Job.objects.select_related("lead__contact").filter(business_id=business_id, public_id__in=refs.jobs))
    leads = list(Lead.objects.select_related("contact").filter(business_id=business_id, public_id__in=refs.leads))
    named = {i.lead_id for i in invoices} | {j.lead_id for j in jobs} | {lead.pk for lead in leads}
    if not named:
        return None, ""
    problems = []
    if len(named) > 1:
        problems.append("they belong to different leads")
    if len(invoices) > 1 or len(jobs) > 1:
        problems.append("more than one invoice or job")
    invoice = invoices[0] if invoices else None
    job = jobs[0] if jobs else (invoice.job if invoice else None)
    if invoice and invoice.job_id and job and invoice.job_id != job.pk:
        problems.append(f"{invoice.public_id} is for another job than {job.public_id}")
    if invoice and invoice.currency != payment.currency:
        problems.append(f"{invoice.public_id} is in {invoice.currency}, the payment in {payment.currency}")
    if problems:
        return None, "; ".join(problems)
    lead = invoice.lead if invoice else job.lead if job else leads[0]
    via = invoice.public_id if invoice else job.public_id if job else lead.public_id
    if invoice is None:
        # The job's (or lead's) one open invoice for exactly this amount is what was paid.
        open_invoices = Invoice.objects.filter(
            lead=lead, status=Invoice.Status.ISSUED, currency=payment.currency, amount=payment.amount
        )
        if job is not None:
            open_invoices = open_invoices.filter(job=job)
        found = list(open_invoices[:2])
        invoice = found[0] if len(found) == 1 else None
    return Link(lead, invoice, job, via=via), ""


def _contact_ids(business_id: int, region: str, hints: PaymentHints) -> set[int]:
    emails = {email_normalize(e) for e in hints.emails if e and "@" in e}
    phones = {p for p in (phone_to_e164(raw, region) for raw in hints.phones if raw) if p}
    if not (emails or phones):
        return set()
    q = Q(kind=ContactPointKind.EMAIL, value__in=emails) | Q(kind=ContactPointKind.PHONE, value__in=phones)
    return set(
        ContactPoint.objects.filter(q, business_id=business_id, is_valid=True).values_list("contact_id", flat=True)
    )


def _candidates(payment: Payment, hints: PaymentHints) -> list[Candidate]:
    """Every lead (and invoice or estimate) that could explain the payment,
    with the reasons; exact ones first. A bounded number of queries."""
    business = payment.business
    contacts = _contact_ids(business.pk, business.region, hints)
    earliest, latest = payment.received_at - MATCH_WINDOW, payment.received_at + MATCH_LEAD_TIME
    same_money = Q(amount=payment.amount, currency=payment.currency)
    invoices = (
        Invoice.objects.select_related("lead__contact")
        .filter(
            Q(lead__contact_id__in=contacts) | same_money,
            business=business,
            status=Invoice.Status.ISSUED,
            issued_at__gte=earliest,
            issued_at__lte=latest,
        )
        .order_by("-issued_at")[: MAX_CANDIDATES * 2]
    )
    estimates = (
        Estimate.objects.select_related("lead__contact")
        .filter(
            Q(lead__contact_id__in=contacts) & same_money,
            business=business,
            status__in=[Estimate.Status.SENT, Estimate.Status.ACCEPTED],
            sent_at__gte=earliest,
            sent_at__lte=latest,
        )
        .order_by("-sent_at")[:MAX_CANDIDATES]
    )
    found: dict[tuple[int, int | None], Candidate] = {}
    for invoice in invoices:
        reasons = ["contact"] if invoice.lead.contact_id in contacts else []
        if invoice.amount == payment.amount and invoice.currency == payment.currency:
            reasons.append("amount")
        found[(invoice.lead_id, invoice.pk)] = Candidate(invoice.lead, invoice=invoice, reasons=[*reasons, "time"])
    for estimate in estimates:
        if not any(c.lead.pk == estimate.lead_id and c.exact for c in found.values()):
            found[(estimate.lead_id, None)] = Candidate(
                estimate.lead, estimate=estimate, reasons=["contact", "amount", "time"]
            )
    if contacts:
        # The payer's own leads, even with nothing to pay yet (a deposit):
        # candidates for a person, never a link by themselves.
        for lead in (
            Lead.objects.select_related("contact")
            .filter(business=business, contact_id__in=contacts, created_at__lte=latest)
            .order_by("-created_at")[:MAX_CANDIDATES]
        ):
            if not any(c.lead.pk == lead.pk for c in found.values()):
                found[(lead.pk, None)] = Candidate(lead, reasons=["contact"])
    ranked = sorted(found.values(), key=lambda c: (not c.exact, -len(c.reasons), c.lead.public_id))
    return ranked[:MAX_CANDIDATES]


def _leave_for_a_person(payment: Payment, candidates: list[Candidate], why: str) -> Payment:
    status = Payment.MatchStatus.AMBIGUOUS if len(candidates) > 1 else Payment.MatchStatus.UNMATCHED
    contacts = {c.lead.contact_id for c in candidates if "contact" in c.reasons}
    before = {"match_status": payment.match_status, "candidates": len(payment.match_candidates)}
    payment.match_status = status
    payment.match_candidates = [c.as_json() for c in candidates]
    if len(contacts) == 1 and payment.contact_id is None:
        payment.contact_id = contacts.pop()
    payment.save(update_fields=["match_status", "match_candidates", "contact"])
    receipt_write(
        business=payment.business,
        subject=payment.public_id,
        actor=ACTOR,
        action=f"payment.{status}",
        reason=why,
        before=before,
        after={"match_status": status, "candidates": [c["lead"] for c in payment.match_candidates]},
    )
    _exception_open(payment, f"{payment.amount} {payment.currency} from {payment.provider}: {why}")
    return payment


def _exception_open(payment: Payment, detail: str) -> ExceptionItem:
    """One open exception per payment, for the business's manager (the
    partial unique constraint keeps a repeat from opening a second)."""
    try:
        with transaction.atomic():
            item = ExceptionItem.objects.create(
                business=payment.business,
                owner=business_manager(payment.business_id),
                kind=EXCEPTION_KIND,
                subject=payment.public_id,
                detail=detail[:500],
                detected_at=timezone.now(),
            )
    except IntegrityError:
        item = ExceptionItem.objects.get(
            business=payment.business, kind=EXCEPTION_KIND, subject=payment.public_id, status=ExceptionItem.Status.OPEN
        )
        ExceptionItem.objects.filter(pk=item.pk).update(detail=detail[:500])
        return item
    receipt_write(
        business=payment.business,
        subject=payment.public_id,
        actor=ACTOR,
        action="exception.opened",
        reason=detail,
        after={
            "exception": item.public_id,
            "kind": EXCEPTION_KIND,
            "owner": item.owner.user.get_username() if item.owner else None,
        },
    )
    return item


def _exception_resolve(payment: Payment, actor: str) -> None:
    now = timezone.now()
    open_items = ExceptionItem.objects.filter(
        business_id=payment.business_id,
        kind=EXCEPTION_KIND,
        subject=payment.public_id,
        status=ExceptionItem.Status.OPEN,
    )
    for item in open_items:
        ExceptionItem.objects.filter(pk=item.pk, status=ExceptionItem.Status.OPEN).update(
            status=ExceptionItem.Status.RESOLVED, resolved_at=now, resolved_by=actor
        )
        receipt_write(
            business=payment.business,
            subject=payment.public_id,
            actor=actor,
            action="exception.resolved",
            before={"status": "open"},
            after={"status": "resolved", "exception": item.public_id},
        )


def _link(payment: Payment, link: Link, *, actor: str, reason: str, initial: bool = False) -> Payment:
    lead, invoice, job = link.lead, link.invoice, link.job or (link.invoice.job if link.invoice else None)
    if lead.business_id != payment.business_id:
        raise PaymentError(f"{lead.public_id} is not a lead of this payment's business")
    if invoice is not None and invoice.lead_id != lead.pk:
        raise PaymentError(f"{invoice.public_id} is not an invoice of {lead.public_id}")
    if invoice is not None and invoice.currency != payment.currency:
        raise PaymentError(f"{invoice.public_id} is in {invoice.currency}, the payment in {payment.currency}")
    if job is not None and job.lead_id != lead.pk:
        raise PaymentError(f"{job.public_id} is not a job of {lead.public_id}")
    previous_invoice = payment.invoice
    before = {
        "match_status": payment.match_status,
        "lead": payment.lead.public_id if payment.lead else None,
        "invoice": previous_invoice.public_id if previous_invoice else None,
        "job": payment.job.public_id if payment.job else None,
    }
    payment.lead, payment.contact, payment.invoice, payment.job = lead, lead.contact, invoice, job
    payment.match_status = Payment.MatchStatus.MATCHED
    payment.save(update_fields=["lead", "contact", "invoice", "job", "match_status"])
    receipt_write(
        business=payment.business,
        lead=lead,
        subject=payment.public_id,
        actor=actor,
        action="payment.matched",
        reason=reason,
        before=before,
        after={
            "match_status": "matched",
            "lead": lead.public_id,
            "invoice": invoice.public_id if invoice else None,
            "job": job.public_id if job else None,
        },
    )
    _exception_resolve(payment, actor)
    if not initial:
        payment_announce(payment, EventType.PAYMENT_MATCHED)
    for changed in {previous_invoice, invoice} - {None}:
        invoice_settle(changed, actor=actor)  # type: ignore[arg-type]
    lead_event(lead, "payment", key=payment.public_id, data={"payment": payment.public_id}, actor=actor)
    # Refunds that arrived before the payment could be matched are the lead's events now.
    for refund in payment.refunds.all():
        lead_event(lead, "refund", key=refund.public_id, data={"refund": refund.public_id}, actor=actor)
    return payment


@transaction.atomic
def payment_link(
    payment: Payment,
    *,
    lead: Lead,
    actor: str,
    invoice: Invoice | None = None,
    job: Job | None = None,
    reason: str = "",
) -> Payment:
    """A person's match: link the payment to a lead (and its invoice or job),
    resolving the payment's exception. Also corrects an earlier link."""
    locked = (
        Payment.objects.select_for_update(of=("self",))
        .select_related("business", "lead", "invoice", "job")
        .get(pk=payment.pk)
    )
    link = Link(lead, invoice, job, via="a person")
    saved = _link(locked, link, actor=actor, reason=reason or "matched by a person")
    payment.refresh_from_db()
    return saved


@transaction.atomic
def payment_manual_record(
    *,
    lead: Lead,
    amount: Decimal,
    currency: str,
    received_at: datetime,
    actor: str,
    invoice: Invoice | None = None,
    job: Job | None = None,
    reference: str = "",
) -> Payment:
    """A payment a person took (cash, check, a terminal): recorded against the
    lead, settled against its invoice, and the lead's "payment" event."""
    money_check(amount, currency)
    if invoice is not None and (invoice.lead_id != lead.pk or invoice.currency != currency.upper()):
        raise PaymentError(f"{invoice.public_id} is not an invoice of {lead.public_id} in {currency.upper()}")
    if job is not None and job.lead_id != lead.pk:
        raise PaymentError(f"{job.public_id} is not a job of {lead.public_id}")
    payment = payment_record(
        lead=lead,
        amount=amount,
        currency=currency.upper(),
        actor=actor,
        received_at=received_at,
        invoice=invoice,
        job=job or (invoice.job if invoice else None),
        provider="manual",
        external_id=reference.strip() or None,
    )
    if invoice is not None:
        invoice_settle(invoice, actor=actor)
    lead_event(lead, "payment", key=payment.public_id, data={"payment": payment.public_id}, actor=actor)
    return payment


# --- refunds -----------------------------------------------------------------


def refunded_total(payment: Payment) -> Decimal:
    total = Refund.objects.filter(payment=payment).aggregate(total=Sum("amount"))["total"]
    return total if total is not None else ZERO


@transaction.atomic
def refund_add(
    payment: Payment,
    *,
    amount: Decimal,
    actor: str,
    refunded_at: datetime | None = None,
    reason: str = "",
    provider: str = "manual",
    external_id: str | None = None,
    inbound_event: InboundEvent | None = None,
) -> Refund:
    """Record money given back on a payment: never more than is left of it."""
    locked = (
        Payment.objects.select_for_update(of=("self",)).select_related("business", "lead", "invoice").get(pk=payment.pk)
    )
    money_check(amount, locked.currency)
    if amount <= 0:
        raise PaymentError("a refund is a positive amount")
    left = locked.amount - refunded_total(locked)
    if amount > left:
        raise PaymentError(f"only {left} {locked.currency} of {locked.public_id} is left to refund, not {amount}")
    refund = refund_record(
        payment=locked,
        amount=amount,
        actor=actor,
        refunded_at=refunded_at or timezone.now(),
        reason=reason[:300],
        provider=provider,
        external_id=external_id,
        inbound_event=inbound_event,
    )
    if locked.invoice is not None:
        invoice_settle(locked.invoice, actor=actor)
    if locked.lead is not None:
        lead_event(locked.lead, "refund", key=refund.public_id, data={"refund": refund.public_id}, actor=actor)
    return refund


@transaction.atomic
def refund_sync_total(
    payment: Payment,
    *,
    total: Decimal,
    currency: str,
    refunded_at: datetime,
    provider: str,
    reference: str,
    reason: str = "",
    inbound_event: InboundEvent | None = None,
) -> Refund | None:
    """A provider reports the cumulative amount refunded on a payment (Stripe's
    `amount_refunded`): record the part not yet recorded, as one refund.

    Keyed by the cumulative total, so the same report twice records nothing,
    and a report older than one already applied (out of order) adds nothing.
    """
    locked = Payment.objects.select_for_update().get(pk=payment.pk)
    if currency.upper() != locked.currency:
        raise PaymentError(f"refund in {currency.upper()} on a payment in {locked.currency}")
    if total > locked.amount:
        raise PaymentError(f"{total} {currency.upper()} refunded is more than the {locked.amount} paid")
    missing = total - refunded_total(locked)
    if missing <= 0:
        return None
    return refund_add(
        locked,
        amount=missing,
        actor=ACTOR,
        refunded_at=refunded_at,
        reason=reason,
        provider=provider,
        external_id=f"{reference}:refunded:{total}",
        inbound_event=inbound_event,
    )


# --- invoices ----------------------------------------------------------------


def invoice_collected(invoice: Invoice) -> Decimal:
    """Payments on the invoice net of their refunds."""
    paid = Payment.objects.filter(invoice=invoice).aggregate(total=Sum("amount"))["total"] or ZERO
    refunded = Refund.objects.filter(payment__invoice=invoice).aggregate(total=Sum("amount"))["total"] or ZERO
    return paid - refunded


def invoice_settle(invoice: Invoice, *, actor: str) -> Invoice:
    """Mark an issued invoice paid once its net collections cover it, and a
    paid one issued again when a refund leaves it short (compare-and-set, so
    a racing settle writes one receipt)."""
    invoice = Invoice.objects.select_for_update().get(pk=invoice.pk)
    net = invoice_collected(invoice)
    if invoice.status == Invoice.Status.ISSUED and net >= invoice.amount:
        to, action = Invoice.Status.PAID, "invoice.paid"
    elif invoice.status == Invoice.Status.PAID and net < invoice.amount:
        to, action = Invoice.Status.ISSUED, "invoice.reopened"
    else:
        return invoice
    if Invoice.objects.filter(pk=invoice.pk, status=invoice.status).update(status=to):
        receipt_write(
            business=invoice.business,
            lead=invoice.lead,
            subject=invoice.public_id,
            actor=actor,
            action=action,
            reason=f"collected {net} of {invoice.amount} {invoice.currency}",
            before={"status": invoice.status},
            after={"status": to, "collected": net},
        )
        invoice.status = to
    return invoice


# --- the orchestrator's steps ------------------------------------------------


def _close_collect_tasks(lead: Lead, outcome: str) -> int:
    if lead.invoices.filter(status=Invoice.Status.ISSUED).exists():
        return 0  # something is still owed: the collection task stays
    return tasks_close(lead, lead.tasks.filter(kind=COLLECT_TASK_KIND), actor=ACTOR, outcome=outcome)


def payment_step(lead: Lead, data: dict[str, Any]) -> str:
    """ "payment": money came in for the lead. Nothing left owed closes the
    collection task; the lead is won if it is not yet. A stage that cannot
    move to won (a lead still `booked`, or `lost`) stops for a person."""
    payment = Payment.objects.filter(public_id=data.get("payment"), lead=lead).first()
    if payment is None:
        return "skipped: the payment is not on this lead any more"
    closed = _close_collect_tasks(lead, f"paid: {payment.public_id} ({payment.amount} {payment.currency})")
    done = f"{closed} collection task(s) closed"
    if lead.stage == Stage.WON:
        return f"already won; {done}"
    if not lead_sync.transition_allowed(lead.stage, Stage.WON):
        raise MissingInformation(
            f"Payment {payment.public_id} received: set the lead's outcome",
            f"{payment.amount} {payment.currency} arrived while the lead is {lead.stage}, which cannot move to won",
        )
    lead_sync.lead_transition(lead, Stage.WON, actor=ACTOR, reason=f"payment {payment.public_id} received")
    return f"won; {done}"


def refund_step(lead: Lead, data: dict[str, Any]) -> str:
    """ "refund": a partial refund is recorded and nothing more; a payment
    refunded in full asks a person to decide the lead's outcome."""
    refund = Refund.objects.select_related("payment").filter(public_id=data.get("refund"), payment__lead=lead).first()
    if refund is None:
        return "skipped: the refund is not on this lead any more"
    payment = refund.payment
    left = payment.amount - refunded_total(payment)
    if left > 0:
        return f"partial refund: {left} {payment.currency} of {payment.public_id} kept"
    raise MissingInformation(
        f"Payment {payment.public_id} refunded in full: review the outcome",
        f"{payment.amount} {payment.currency} given back; the lead is {lead.stage}",
    )
