from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents.booking.slots import slots_offer
from agents.conversions.delivery import conversions_pump
from agents.reporting.sms_health import sms_health
from agents.webhooks.delivery import webhooks_pump
from crm import inbox
from crm.attribution import revenue_report
from crm.inbox import InboxQuery, inbox_page
from crm.models import (
    CLOSED_STAGES,
    Appointment,
    Business,
    Contact,
    ConversionUpload,
    Estimate,
    ExceptionItem,
    Invoice,
    Job,
    Lead,
    LeadTouch,
    Message,
    Payment,
    Receipt,
    Refund,
    Sequence,
    Stage,
    SyncChange,
    SyncConnection,
    SyncLink,
    Task,
    TeamMember,
    WebhookDelivery,
)
from crm.services.receipts import receipts_verify
from devtools.demo import ADMIN_URL, DEMO_SLUG, DEMO_USERS, demo_password

pytestmark = pytest.mark.django_db

User = get_user_model()


def load_demo() -> str:
    out = StringIO()
    call_command("load_demo", stdout=out)
    return out.getvalue()


def demo_leads() -> Any:
    return Lead.objects.filter(business__slug=DEMO_SLUG)


def record_counts() -> dict[str, int]:
    models: list[Any] = [
        Business,
        TeamMember,
        User,
        Contact,
        Lead,
        LeadTouch,
        Task,
        Message,
        Appointment,
        Estimate,
        Job,
        Invoice,
        Payment,
        Refund,
        Receipt,
    ]
    return {model.__name__: model.objects.count() for model in models}


def test_load_demo_creates_leads_in_every_stage_spread_over_both_setters() -> None:
    load_demo()

    assert set(demo_leads().values_list("stage", flat=True)) == set(Stage.values)
    working = demo_leads().exclude(exceptions__contains=["no_eligible_owner"])
    assert set(working.values_list("owner__user__username", flat=True)) == {"sam", "sara"}


def test_every_open_demo_lead_has_a_next_action_with_a_due_time() -> None:
    load_demo()

    open_leads = demo_leads().exclude(stage__in=CLOSED_STAGES)
    assert open_leads.exists()
    for lead in open_leads:
        assert lead.next_action and lead.next_action_due_at, lead.stage
        assert Task.objects.filter(lead=lead, kind="next_action", status="open", title=lead.next_action).exists()
    # Never unowned (invariant 3): the one lead no setter took waits, still new,
    # in the manager queue with its reason.
    assert not open_leads.filter(owner=None).exists()
    queued = open_leads.get(exceptions__contains=["no_eligible_owner"])
    assert (queued.stage, queued.owner.user.username) == (Stage.NEW, "mia") and queued.routing_reason


def test_a_won_demo_lead_has_its_visit_estimate_job_invoice_and_payment() -> None:
    load_demo()

    won = demo_leads().filter(stage=Stage.WON)
    assert won.count() == 2
    for lead in won:
        assert lead.closed_at is not None
        assert lead.appointments.get().status == Appointment.Status.HELD
        estimate = lead.estimates.get()
        assert estimate.status == Estimate.Status.ACCEPTED
        job = lead.jobs.get()
        assert (job.status, job.estimate) == (Job.Status.COMPLETED, estimate)
        assert job.completed_at is not None
        invoice = lead.invoices.get()
        assert (invoice.job, invoice.amount, invoice.status) == (job, estimate.amount, Invoice.Status.PAID)
        payment = lead.payments.get()
        assert (payment.invoice, payment.amount, payment.match_status) == (invoice, invoice.amount, "matched")
    refund = Refund.objects.get(business__slug=DEMO_SLUG)
    assert 0 < refund.amount < refund.payment.amount, "a partial refund"


def test_the_demo_has_messages_both_ways_and_a_touch_with_campaign_data() -> None:
    load_demo()

    outbound = Message.objects.filter(business__slug=DEMO_SLUG, direction="out")
    assert outbound.exists()
    assert not outbound.filter(idempotency_key=None).exists()
    # A few of the last week's texts could not be delivered (the SMS health page's carrier errors).
    assert set(outbound.values_list("status", flat=True)) <= {"dry_run", "delivered", "undelivered", "failed"}
    assert not outbound.filter(status__in=["undelivered", "failed"], error_code="").exists()
    assert Message.objects.filter(business__slug=DEMO_SLUG, direction="in", status="received").exists()
    touch = LeadTouch.objects.get(business__slug=DEMO_SLUG, provider="google_ads", lead__contact__first_name="Omar")
    assert touch.campaign_id and touch.gclid and touch.landing_page
    assert touch.utm["utm_campaign"] == "furnace-repair-chicago"


def test_load_demo_prints_logins_that_work() -> None:
    output = load_demo()

    assert ADMIN_URL in output
    client = Client()
    for username in DEMO_USERS:
        password = demo_password(username)
        assert f"{username}  " in output and password in output
        user = User.objects.get(username=username)
        assert user.is_staff
        assert client.login(username=username, password=password)


def test_a_second_run_creates_no_duplicates_and_still_prints_the_logins() -> None:
    load_demo()
    before = record_counts()

    output = load_demo()

    assert record_counts() == before
    assert "nothing changed" in output
    assert "already present" in output
    assert ADMIN_URL in output
    assert all(demo_password(username) in output for username in DEMO_USERS)


def test_every_demo_change_has_a_receipt_and_the_chain_verifies() -> None:
    load_demo()

    assert receipts_verify() is None
    for lead in demo_leads():
        actions = set(lead.receipts.values_list("action", flat=True))
        assert "lead.created" in actions
        assert "lead.owner_changed" in actions
        if lead.stage not in (Stage.NEW, Stage.ASSIGNED):
            assert "lead.stage_changed" in actions
    assert Receipt.objects.filter(business__slug=DEMO_SLUG, action="business.loaded").count() == 1


def test_a_paid_demo_lead_shows_its_webhook_events_in_the_delivery_log_in_dry_run() -> None:
    load_demo()
    webhooks_pump(seconds=60)  # one run of the webhooks cluster: dry run records, sends nothing

    paid = Payment.objects.filter(business__slug=DEMO_SLUG, lead__isnull=False).select_related("lead").first()
    deliveries = WebhookDelivery.objects.filter(lead=paid.lead)
    assert {d.event.type for d in deliveries.select_related("event")} >= {"lead.created", "payment.recorded"}
    assert set(deliveries.values_list("status", flat=True)) == {"dry_run"}
    client = Client()
    client.force_login(User.objects.get(username="mia"))
    log = client.get(reverse("admin:crm_webhookdelivery_changelist") + "?event_type=payment.recorded")
    assert log.status_code == 200
    assert deliveries.get(event__type="payment.recorded").public_id in log.content.decode()


def test_a_paid_demo_lead_shows_its_google_and_meta_uploads_and_its_webhook_events_in_dry_run() -> None:
    load_demo()
    # One run of the outbound cluster: the webhooks' and the conversions'
    # (dry run records what would be sent, and sends nothing).
    webhooks_pump(seconds=60)
    conversions_pump(seconds=60)

    lead = Lead.objects.get(business__slug=DEMO_SLUG, contact__first_name="Robert", contact__last_name="Chen")
    assert lead.stage == Stage.WON and lead.payments.exists()
    uploads = ConversionUpload.objects.filter(lead=lead)
    assert {(u.platform, u.kind) for u in uploads} == {
        (platform, kind)
        for platform in ("google", "meta")
        for kind in ("qualified", "booked", "appointment_held", "won", "paid")
    }
    assert set(uploads.values_list("status", flat=True)) == {"dry_run"}
    google = uploads.get(platform="google", kind="paid")
    event = google.payload["request"]["events"][0]  # a new account: through the Data Manager API
    assert event["ad_identifiers"]["gclid"] == "EAIaIQobChMI-demo-acme-hvac" and event["conversion_value"] == 12400.0
    meta = uploads.get(platform="meta", kind="paid")
    assert meta.payload["body"]["data"][0]["custom_data"]["value"] == 12400.0
    payment_event = WebhookDelivery.objects.get(lead=lead, event__type="payment.recorded")
    assert payment_event.status == "dry_run"

    client = Client()
    client.force_login(User.objects.get(username="mia"))
    page = client.get(reverse("admin:crm_conversionupload_changelist") + f"?q={lead.public_id}&status=dry_run")
    assert page.status_code == 200
    assert google.public_id in page.content.decode() and meta.public_id in page.content.decode()
    detail = client.get(reverse("admin:crm_conversionupload_change", args=[google.pk])).content.decode()
    assert "IngestionService.IngestEvents" in detail
    log = client.get(reverse("admin:crm_webhookdelivery_changelist") + "?event_type=payment.recorded")
    assert payment_event.public_id in log.content.decode()


def test_on_the_demo_the_leak_heads_the_inbox_and_the_lost_leads_thanks_waits_on_no_one():
    load_demo()
    manager = User.objects.get(username="mia")
    page = inbox_page(manager, InboxQuery(), now=timezone.now())
    first = page.rows[0]
    assert first.contact.first_name == "Omar" and first.bucket == inbox.URGENT
    kevin = Lead.objects.get(business__slug=DEMO_SLUG, contact__first_name="Kevin")
    assert kevin.stage == Stage.LOST and kevin.conversation.awaiting_since is None
    assert kevin.pk not in [row.pk for row in page.rows]


def test_the_demo_shop_is_connected_to_jobber_and_its_paid_job_came_back_through_the_sync() -> None:
    """Rosa Delgado's quote, job, invoice and payment live in the shop's
    Jobber (a local stand-in): load_demo connects it and reads them through
    the adapter and the engine, and her payment counts for her campaign."""
    load_demo()

    connection = SyncConnection.objects.get(business__slug=DEMO_SLUG, provider="jobber")
    assert connection.status == SyncConnection.Status.ACTIVE and connection.last_success_at is not None
    assert not SyncChange.objects.filter(connection=connection).exclude(status=SyncChange.Status.DONE).exists()
    lead = demo_leads().get(contact__first_name="Rosa", contact__last_name="Delgado")
    estimate, job, invoice, payment = lead.estimates.get(), lead.jobs.get(), lead.invoices.get(), lead.payments.get()
    assert (estimate.status, estimate.amount) == (Estimate.Status.ACCEPTED, Decimal("1450.00"))
    assert (job.status, job.estimate) == (Job.Status.COMPLETED, estimate)
    assert (invoice.job, invoice.status, invoice.amount) == (job, Invoice.Status.PAID, estimate.amount)
    assert (payment.invoice, payment.provider, payment.match_status) == (invoice, "jobber", "matched")
    linked = dict(SyncLink.objects.filter(connection=connection).values_list("kind", "record"))
    assert linked == {
        "client": lead.contact.public_id,
        "estimate": estimate.public_id,
        "job": job.public_id,
        "invoice": invoice.public_id,
        "payment": payment.public_id,
    }
    campaign = lead.touches.order_by("received_at").first().campaign_id
    assert campaign
    report = revenue_report([lead.business_id], currency="USD", by="campaign")
    assert next(row for row in report.rows if row.key == campaign).collected >= Decimal("1450.00")

    load_demo()  # a second run connects nothing again and reads nothing twice
    assert SyncConnection.objects.filter(business__slug=DEMO_SLUG, provider="jobber").count() == 1
    assert lead.payments.count() == 1


def test_the_demo_technician_s_calendar_is_connected_and_its_busy_times_close_his_slots() -> None:
    """Tom's Google calendar (a local stand-in) holds a dentist appointment
    over his 13:00 slot on the next weekday and a parts pickup over his
    09:00 slot on the one after: neither is offered."""
    load_demo()

    calendar = SyncConnection.objects.get(business__slug=DEMO_SLUG, provider="google_calendar")
    assert calendar.member.user.username == "tom" and calendar.status == SyncConnection.Status.ACTIVE
    assert len(calendar.busy) == 2 and calendar.channel_id and calendar.busy_checked_at is not None
    lead = demo_leads().filter(stage=Stage.QUALIFIED).first()
    offered = {slot.starts_at for slot in slots_offer(lead, include_full=True)}
    for start, end in calendar.busy:
        busy_from, busy_to = datetime.fromisoformat(start), datetime.fromisoformat(end)
        # The slot the block falls in (09:00-11:00 or 13:00-15:00 local) is not offered.
        assert not any(s <= busy_from < s + timedelta(hours=2) for s in offered), (busy_from, busy_to)
    assert offered  # the rest of Tom's week is


def test_the_demo_s_sms_health_shows_a_week_of_texts_and_one_paused_sequence() -> None:
    load_demo()
    business = Business.objects.get(slug=DEMO_SLUG)

    health = sms_health(business, until=timezone.now())

    assert health.total.sent > 100 and 0.9 < (health.total.delivery_rate or 0) < 1
    assert {code for code, _, _ in health.total.error_groups()} == {"30003", "30006", "30007"}
    assert 0 < (health.total.opt_outs_per_100 or 0) < 5 and 0 < (health.reply_rate or 0) < 1
    paused = Sequence.objects.filter(business=business, paused_at__isnull=False)
    assert list(paused.values_list("key", flat=True)) == ["no_reply"]
    assert "step 1 (nudge_sms)" in paused.get().paused_reason
    item = ExceptionItem.objects.get(business=business, kind="sms_health", status="open")
    assert item.owner.user.username == "mia"
    # Whatever the hour the demo is loaded at (the 7-day window moves with
    # it), only the nudge step crosses a limit: the acknowledgement, sent to
    # every lead of the book, stays under the filtering limit.
    from agents.reporting.sms_health import limits_of, over_limits

    for hours in range(0, 24, 2):
        later = sms_health(business, until=timezone.now() + timedelta(hours=hours))
        crossing = [row.key for row in (*later.templates, *later.steps) if over_limits(row, limits_of(business))]
        assert crossing == ["nudge_sms", "no_reply step 1"], hours


def test_the_demo_asks_its_paid_customers_for_reviews_and_reads_its_google_reviews() -> None:
    """Each paid job was asked once (the refunded one was not); the shop's
    Google reviews (a local stand-in) are read through the adapter, and the
    customer who tapped the link is matched to their request."""
    from agents.reviews.requests import review_figures
    from crm.models import Review, ReviewRequest

    load_demo()

    business = demo_leads().first().business
    requests = ReviewRequest.objects.filter(business=business)
    assert {r.status for r in requests} == {"sent", "skipped"}
    assert requests.get(status="skipped").skipped_reason == "a refund on the lead"
    connection = SyncConnection.objects.get(business=business, provider="google_business")
    assert connection.status == SyncConnection.Status.ACTIVE
    reviews = Review.objects.filter(business=business)
    assert sorted(r.rating or 0 for r in reviews) == [2, 4, 5]
    matched = reviews.get(review_request__isnull=False)
    assert (matched.rating, matched.review_request.clicks) == (5, 1)
    now = timezone.now()
    figures = review_figures(business, since=now - timedelta(days=30), until=now + timedelta(days=1))
    assert (figures.sent, figures.clicked_requests, figures.reviews, figures.reviews_matched) == (1, 1, 3, 1)

    load_demo()  # nothing asked or read twice
    assert (ReviewRequest.objects.filter(business=business).count(), reviews.count()) == (2, 3)


@pytest.mark.django_db(transaction=True)
def test_make_run_ends_with_where_to_go_and_the_demo_logins(live_server) -> None:
    """`make run` prints these last, once the web server answers, so they do
    not scroll away behind the servers' start-up logs."""
    load_demo()
    out = StringIO()
    call_command("demo_ready", url=live_server.url, wait=10, stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert lines[0] == f"LeadOps is up: the workspace at {live_server.url}/app/"
    assert lines[-5:] == [
        "    owner       olivia  olivia-leadops-demo",
        "    manager     mia     mia-leadops-demo",
        "    setter      sam     sam-leadops-demo",
        "    setter      sara    sara-leadops-demo",
        "    technician  tom     tom-leadops-demo",
    ]
    with pytest.raises(CommandError, match="nothing answered"):
        call_command("demo_ready", url="http://127.0.0.1:9", wait=1, stdout=StringIO())
