"""The demo shop's review requests: each paid job of the demo book asked
once, two hours after its payment, as the business file says
(`policy.reviews`), through the same scheduling and send gate as a live
payment — and the stop rules at work (a customer who got money back is not
asked). One customer has tapped the link, so the reviews figures are not
all zeros on first login.

Called by devtools/demo.py once its records exist; the demo sends nothing
(SEND_MODE=dry_run), so each text is recorded as it would have gone.

The shop's Google Business Profile is a local stand-in in Google's shape
(devtools/simulator/google_business_api.py), connected and read by load_demo
through the real adapter: three reviews, one from the customer who tapped
the link (matched to their request), so the reviews page shows a reply to
write and a matched review on first login. `make run` serves the same
stand-in (`manage.py standins`, GOOGLE_BUSINESS_* in the Makefile).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db.models import F
from django.test import override_settings
from django.utils import timezone

from agents.reviews.google_business import PROVIDER
from agents.reviews.pull import reviews_pull
from agents.reviews.requests import review_request_schedule, review_request_send
from crm.models import Business, Job, Lead, ReviewRequest, Stage, SyncConnection
from crm.services.sync import connection_connect
from devtools.simulator.google_business_api import ACCOUNT, GoogleBusinessServer
from devtools.simulator.google_business_api import CLIENT_ID as GBP_CLIENT_ID
from devtools.simulator.google_business_api import CLIENT_SECRET as GBP_CLIENT_SECRET


def demo_reviews_ask(business: Business) -> int:
    """Ask every paid, won demo lead for its review; the number asked."""
    asked = 0
    leads = Lead.objects.filter(business=business, stage=Stage.WON, payments__isnull=False).distinct()
    for lead in leads.select_related("business", "contact").order_by("pk"):
        payment = lead.payments.order_by("received_at").last()
        assert payment is not None
        job = payment.job or (payment.invoice.job if payment.invoice else None)
        job = job or lead.jobs.exclude(status=Job.Status.CANCELED).first()
        request = review_request_schedule(lead, trigger=ReviewRequest.Trigger.PAID, job=job, at=payment.received_at)
        if request is None:
            continue
        request = review_request_send(request.pk, now=request.due_at)
        asked += request.status == ReviewRequest.Status.SENT
    first = ReviewRequest.objects.filter(business=business, status=ReviewRequest.Status.SENT).order_by("due_at").first()
    if first is not None:
        ReviewRequest.objects.filter(pk=first.pk).update(clicks=F("clicks") + 1, first_clicked_at=first.due_at)
    return asked


# --- the shop's Google Business Profile ----------------------------------------------------

GOOGLE_BUSINESS_PORT = 8771
ACTOR = "load_demo"
DEMO_GBP_ACCESS = "demo-google-business-access-token-0123456789"
DEMO_GBP_REFRESH = "demo-google-business-refresh-token-0123456789"
# The demo's tokens never expire, so the demo never asks a token endpoint for more.
_NEVER = datetime(2100, 1, 1, tzinfo=UTC)


def google_business_stand_in(business: Business, port: int = 0, *, now: datetime | None = None) -> GoogleBusinessServer:
    """The shop's Google Business Profile, seeded, taking the demo's tokens
    (not started): a five-star review from the customer who tapped the review
    link (matched to their request), a four-star one from someone LeadOps
    never asked, and a two-star one waiting for a reply."""
    server = GoogleBusinessServer(port)
    server.accept(DEMO_GBP_ACCESS, DEMO_GBP_REFRESH)
    at = now or timezone.now()
    tapped = (
        ReviewRequest.objects.filter(business=business, status=ReviewRequest.Status.SENT, clicks__gt=0)
        .select_related("contact")
        .order_by("due_at")
        .first()
    )
    if tapped is not None and tapped.sent_at is not None:
        server.review_add(
            tapped.contact.name,
            5,
            "Tom explained everything before he started and cleaned up after. Fair price, would call again.",
            at=tapped.sent_at + timedelta(hours=3),
        )
    server.review_add("Mike Rogers", 4, "Answered my message within minutes on a Sunday.", at=at - timedelta(days=9))
    server.review_add(
        "Dana Kowalski", 2, "Took three days to get someone out for a no-heat call.", at=at - timedelta(days=5)
    )
    return server


def google_business_settings(url: str) -> dict[str, str]:
    return {
        "GOOGLE_BUSINESS_ACCOUNTS_URL": url,
        "GOOGLE_BUSINESS_INFO_URL": url,
        "GOOGLE_BUSINESS_REVIEWS_URL": url,
        "GOOGLE_BUSINESS_CLIENT_ID": GBP_CLIENT_ID,
        "GOOGLE_BUSINESS_CLIENT_SECRET": GBP_CLIENT_SECRET,
    }


def demo_google_business_ensure(business: Business) -> SyncConnection | None:
    """The demo shop's Google Business Profile connected and its reviews read
    once, through the real adapter, against a stand-in started for the load;
    None when it is connected already."""
    if SyncConnection.objects.filter(business=business, provider=PROVIDER).exists():
        return None
    server = google_business_stand_in(business)
    server.start()
    try:
        with override_settings(**google_business_settings(server.url)):
            connection = connection_connect(
                business,
                provider=PROVIDER,
                account_id=ACCOUNT,
                account_name="Acme Heating & Air (Google Business Profile)",
                access_token=DEMO_GBP_ACCESS,
                refresh_token=DEMO_GBP_REFRESH,
                expires_at=_NEVER,
                actor=ACTOR,
            )
            reviews_pull(connection, now=timezone.now())
    finally:
        server.stop()
    return connection
