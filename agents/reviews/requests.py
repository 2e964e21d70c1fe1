"""Review requests: one per job, after it is paid (or completed), to everyone.

The business file says when (`policy.reviews`): `after: paid` (the default)
or `completed`, `delay_hours` later (2 by default), with the link to the
business's review page (`google_place_id` gives Google's "write a review"
page; `url` any other). Without a link no one is asked.

- Scheduling (`review_request_schedule`, from the orchestrator's `payment`
  and `job.completed` steps): one `ReviewRequest` per job — its `key` is the
  job's public id, unique in the database, so concurrent payment webhooks for
  one job make one request (money without a job: one per lead). "Paid" means
  nothing is left owed on the lead: a deposit with the invoice still open
  asks no one yet.
- Sending (`review_request_send`, the request's timer): the stop rules first
  — a complaint in the thread, a refund, a review already received, the lead
  no longer won — then the business's approved `review_request` text (by SMS
  where the person agreed to texts) or `review_request_email`, through the
  send gate like every automated message: consent, a revocation anywhere,
  quiet hours in the person's state, the daily and state caps.
- No gating: the same text and the same link go to every customer whatever
  the thread's mood. Asking first whether they are happy and sending the link
  only to the happy ones breaks Google's review policy and the FTC's 2024
  rule on consumer reviews; a complaint stops the request, it never reroutes it.
- Clicks: the link in the text is LeadOps' short redirect (`/r/<token>`),
  counted and sent on to the review page (`review_link_follow`).
- Figures per business (`review_figures`): requests sent, clicks, reviews
  matched to a request.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone

from agents.consent.policy import consent_decide, revoked_elsewhere
from agents.outbound.gate import message_send, recipient_point
from agents.playbook.templates import (
    TemplateError,
    playbook_context,
    template_for_automation,
    template_render,
    text_render,
)
from agents.revenue import jobs as revenue_jobs
from agents.revenue import payments as revenue_payments
from approvals.models import ApprovalRequest
from crm.models import Business, Invoice, Job, Lead, Message, Payment, Refund, Review, ReviewRequest, Stage, Timer
from crm.services.insert_once import row_insert_once
from crm.services.receipts import receipt_write
from crm.services.timers import timer_handler_register, timer_schedule

ACTOR = "agent:review_requests"
TIMER_KIND = "review.request"
# The approved texts a request sends, by channel (the send gate lets a won
# lead's after-sale texts through: agents.outbound.gate.AFTER_SALE_TEMPLATES).
TEMPLATES = {"sms": "review_request", "email": "review_request_email"}
GOOGLE_WRITE_REVIEW = "https://search.google.com/local/writereview"
DEFAULT_DELAY_HOURS = 2


@dataclass(frozen=True)
class ReviewSettings:
    after: str  # paid | completed | off
    delay: timedelta
    link: str  # where the counted redirect sends the customer ("" asks no one)


def review_settings(business: Business) -> ReviewSettings:
    raw: dict[str, Any] = business.reviews or {}
    url = str(raw.get("url") or "")
    place = str(raw.get("google_place_id") or "")
    if not url and place:
        url = f"{GOOGLE_WRITE_REVIEW}?{urlencode({'placeid': place})}"
    delay = timedelta(hours=int(raw.get("delay_hours", DEFAULT_DELAY_HOURS)))
    return ReviewSettings(after=str(raw.get("after") or "paid"), delay=delay, link=url)


def review_short_link(request: ReviewRequest) -> str:
    return settings.PUBLIC_BASE_URL.rstrip("/") + reverse("review-link", args=[request.token])


# --- scheduling -----------------------------------------------------------------------


def review_request_schedule(lead: Lead, *, trigger: str, job: Job | None, at: datetime) -> ReviewRequest | None:
    """The job's review request, scheduled once when the business asks
    after `trigger`; None when it does not (or has no link). Idempotent: a
    second payment, or a redelivered step, returns the first request."""
    wanted = review_settings(lead.business)
    if wanted.after != trigger or not wanted.link:
        return None
    request = ReviewRequest(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        job=job,
        key=job.public_id if job is not None else lead.public_id,
        trigger=trigger,
        due_at=at + wanted.delay,
        token=secrets.token_urlsafe(6),
        destination=wanted.link,
    )
    if not row_insert_once(request, key="key"):
        return ReviewRequest.objects.get(key=request.key)
    timer_schedule(
        business=lead.business,
        lead=lead,
        kind=TIMER_KIND,
        due_at=request.due_at,
        payload={"review_request": request.pk},
        dedupe_key=f"{TIMER_KIND}:{request.public_id}",
    )
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=request.public_id,
        actor=ACTOR,
        action="review_request.scheduled",
        reason=f"{job.public_id if job else 'the lead'} {trigger}",
        after={"due_at": request.due_at, "job": job.public_id if job else "", "destination": request.destination},
    )
    return request


def payment_step(lead: Lead, data: dict[str, Any]) -> str:
    """The orchestrator's `payment` step: revenue's (the lead is won), then
    the job's review request when the business asks once it is paid."""
    done = revenue_payments.payment_step(lead, data)
    payment = Payment.objects.select_related("job", "invoice__job").filter(public_id=data.get("payment"), lead=lead)
    found = payment.first()
    return f"{done}; {after_payment(lead, found)}" if found is not None else done


def job_completed_step(lead: Lead, data: dict[str, Any]) -> str:
    """The orchestrator's `job.completed` step: revenue's, then the review
    request when the business asks once the job is done."""
    done = revenue_jobs.job_completed_step(lead, data)
    job = Job.objects.filter(public_id=data.get("job"), lead=lead).first()
    return f"{done}; {after_job_completed(lead, job)}" if job is not None else done


def after_payment(lead: Lead, payment: Payment) -> str:
    """The `payment` step's part: the job is paid when nothing is left owed on
    the lead (an issued invoice still open means a deposit, not the end)."""
    if lead.invoices.filter(status=Invoice.Status.ISSUED).exists():
        return "review request: an invoice is still open"
    job = payment.job or (payment.invoice.job if payment.invoice is not None else None)
    if job is None:
        job = lead.jobs.exclude(status=Job.Status.CANCELED).order_by("-created_at").first()
    request = review_request_schedule(lead, trigger=ReviewRequest.Trigger.PAID, job=job, at=payment.received_at)
    return f"review request {request.public_id}" if request else "no review request"


def after_job_completed(lead: Lead, job: Job) -> str:
    """The `job.completed` step's part, for a business that asks on completion."""
    at = job.completed_at or timezone.now()
    request = review_request_schedule(lead, trigger=ReviewRequest.Trigger.COMPLETED, job=job, at=at)
    return f"review request {request.public_id}" if request else "no review request"


# --- sending --------------------------------------------------------------------------


def stop_reason(request: ReviewRequest) -> str:
    """Why this request must not go out ("" when it may): the stop rules."""
    lead = request.lead
    if lead.stage != Stage.WON:
        return f"the lead is {lead.get_stage_display()}, not won"
    complained = "complaint" in (lead.exceptions or [])
    complained = complained or Message.objects.filter(lead=lead, direction="in", intent="complaint").exists()
    complained = complained or ApprovalRequest.objects.filter(lead=lead, kind=ApprovalRequest.Kind.COMPLAINT).exists()
    if complained:
        return "a complaint in the thread"
    if Refund.objects.filter(payment__lead=lead).exists():
        return "a refund on the lead"
    if Review.objects.filter(business_id=request.business_id, contact_id=request.contact_id).exists():
        return "the customer has already left a review"
    return ""


def _channel(request: ReviewRequest, now: datetime) -> str:
    """SMS where the person agreed to automated texts, email otherwise, "" for neither."""
    contact = request.contact
    for channel in ("sms", "email"):
        point = recipient_point(contact, channel)
        if point is not None and consent_decide(point, channel, automated=True, now=now).allowed:
            return channel
    return ""


def _skip(request: ReviewRequest, reason: str) -> ReviewRequest:
    request.status, request.skipped_reason = ReviewRequest.Status.SKIPPED, reason[:200]
    request.save(update_fields=["status", "skipped_reason"])
    receipt_write(
        business=request.business,
        lead=request.lead,
        subject=request.public_id,
        actor=ACTOR,
        action="review_request.skipped",
        reason=reason,
        before={"status": ReviewRequest.Status.SCHEDULED},
        after={"status": request.status},
    )
    return request


@transaction.atomic
def review_request_send(request_id: int, *, now: datetime) -> ReviewRequest:
    """Send a scheduled request through the send gate, or skip it with the
    stop rule that holds. Once: the request's row lock and its status, and
    the message's idempotency key behind them."""
    request = (
        ReviewRequest.objects.select_for_update(of=("self",))
        .select_related("business", "lead__business", "lead__owner__user", "lead__service_line", "contact")
        .get(pk=request_id)
    )
    if request.status != ReviewRequest.Status.SCHEDULED:
        return request
    reason = stop_reason(request)
    if reason:
        return _skip(request, reason)
    # One revocation anywhere stops every automated text and call; an
    # after-sale email to someone who said stop is no better.
    elsewhere = revoked_elsewhere(request.contact)
    if elsewhere:
        return _skip(request, f"opted out ({elsewhere})")
    channel = _channel(request, now)
    if not channel:
        return _skip(request, "no consent to text or email")
    try:
        template = template_for_automation(request.business, TEMPLATES[channel], channel=channel)
        context = {**playbook_context(request.lead), "review_url": review_short_link(request)}
        body = template_render(template, context)
        subject = text_render(template.subject, context) if template.subject else ""
    except TemplateError as exc:
        return _skip(request, f"no text to send: {exc}")
    message = message_send(
        lead=request.lead,
        channel=channel,
        body=body,
        subject=subject,
        actor=ACTOR,
        idempotency_key=f"review_request:{request.public_id}",
        automated=True,
        template_key=template.key,
        now=now,
    )
    if message.status == Message.Status.BLOCKED:
        request.message = message
        request.save(update_fields=["message"])
        return _skip(request, f"the send gate refused it ({message.block_reason})")
    request.status, request.sent_at, request.message = ReviewRequest.Status.SENT, now, message
    request.save(update_fields=["status", "sent_at", "message"])
    receipt_write(
        business=request.business,
        lead=request.lead,
        subject=request.public_id,
        actor=ACTOR,
        action="review_request.sent",
        reason=f"{channel} {message.public_id} ({message.status})",
        before={"status": ReviewRequest.Status.SCHEDULED},
        after={"status": request.status, "message": message.public_id, "channel": channel},
    )
    return request


def _timer(timer: Timer) -> None:
    review_request_send(int(timer.payload["review_request"]), now=timer.claimed_at or timezone.now())


# --- the counted link -----------------------------------------------------------------


def review_link_follow(token: str, *, now: datetime, count: bool = True) -> str | None:
    """Where the short link sends the customer (None for an unknown token),
    counting the click in one UPDATE (concurrent clicks each count)."""
    found = ReviewRequest.objects.filter(token=token)
    if count:
        found.update(clicks=F("clicks") + 1)
        found.filter(first_clicked_at__isnull=True).update(first_clicked_at=now)
    return found.values_list("destination", flat=True).first()


# --- figures --------------------------------------------------------------------------


@dataclass(frozen=True)
class ReviewFigures:
    sent: int  # requests handed to the send gate and not refused
    skipped: int  # stopped by a rule or refused by the gate
    clicks: int  # every follow of a short link
    clicked_requests: int  # requests whose link was followed at least once
    reviews: int  # reviews received in the period (any, matched or not)
    reviews_matched: int  # of those, matched to a request the customer got

    @property
    def click_rate(self) -> float | None:
        return self.clicked_requests / self.sent if self.sent else None


def review_figures(business: Business, *, since: datetime, until: datetime) -> ReviewFigures:
    """The period's figures for one business, in two queries: the requests
    due in the period (asked, or stopped, then) and the reviews posted in it."""
    requests = ReviewRequest.objects.filter(business=business, due_at__gte=since, due_at__lt=until)
    counted = requests.aggregate(
        sent=Count("pk", filter=Q(status=ReviewRequest.Status.SENT)),
        skipped=Count("pk", filter=Q(status=ReviewRequest.Status.SKIPPED)),
        taps=Coalesce(Sum("clicks"), 0),
        clicked=Count("pk", filter=Q(clicks__gt=0)),
    )
    reviews = Review.objects.filter(business=business, posted_at__gte=since, posted_at__lt=until).aggregate(
        total=Count("pk"), matched=Count("pk", filter=Q(review_request__isnull=False))
    )
    return ReviewFigures(
        sent=counted["sent"],
        skipped=counted["skipped"],
        clicks=counted["taps"],
        clicked_requests=counted["clicked"],
        reviews=reviews["total"],
        reviews_matched=reviews["matched"],
    )


def register() -> None:
    timer_handler_register(TIMER_KIND, _timer)
