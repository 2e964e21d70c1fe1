"""Jobber's side flowing back: webhooks verified and stored raw, records
pulled and applied through our services — whatever order and however often
the webhooks come — the reconcile loop paging from its cursor, Jobber's
query-cost limit respected, a payment in Jobber counted in revenue by the
lead's campaign, and an edit on both sides settled in Jobber's favour with
ours kept in the receipt."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.booking.services import appointment_book, appointment_mark_held
from agents.orchestrator import orchestrate_pending
from agents.sync.engine import reconcile, sync_pump
from agents.sync.jobber import jobber_signature
from crm.attribution import revenue_report
from crm.models import (
    Appointment,
    Estimate,
    ExceptionItem,
    InboundEvent,
    Invoice,
    Job,
    Lead,
    Payment,
    Receipt,
    RejectedDelivery,
    SyncChange,
    SyncConnection,
    SyncLink,
)
from crm.services import lead_sync
from crm.services.records import contact_create, lead_open
from tests.helpers.booking import NOW, TUE_9, TUE_13, local
from tests.helpers.capture import run_queued_events
from tests.helpers.jobber import CLIENT_SECRET, iso, webhook_body, webhook_headers

pytestmark = pytest.mark.django_db

SAMPLE = Path(__file__).resolve().parents[1] / "capture" / "samples" / "jobber_visit_complete.json"
URL = "/hooks/jobber/"


def post(body: bytes, headers: dict[str, str] | None = None) -> Any:
    return Client().post(
        URL, data=body, content_type="application/json", headers=webhook_headers(body) if headers is None else headers
    )


def deliver(topic: str, item: str, **kw: Any) -> Any:
    answer = post(webhook_body(topic, item, **kw))
    assert answer.status_code == 200, answer.content
    return answer


def jobber_client(jobber: Any, *, first: str = "Rosa", last: str = "Diaz", phone: str = "+12125550147") -> str:
    return jobber.add("client", firstName=first, lastName=last, emails=[], phones=[{"number": phone}])


def work() -> dict[str, int]:
    """What the cluster does: the stored webhooks processed, then the sync pump."""
    run_queued_events()
    return sync_pump()


def test_the_sample_webhook_is_signed_as_jobber_signs_it_and_stored_raw(connection, jobber):
    body = SAMPLE.read_bytes()
    signature = jobber_signature(CLIENT_SECRET, body)

    answer = post(body, {"X-Jobber-Hmac-SHA256": signature})

    assert answer.status_code == 200 and answer.json()["status"] == "received"
    event = InboundEvent.objects.get()
    assert bytes(event.body) == body and event.business == connection.business
    assert (event.provider, event.kind) == ("jobber", "VISIT_COMPLETE")
    assert event.headers["X-Jobber-Hmac-SHA256"] == signature
    data = json.loads(body)["data"]["webHookEvent"]
    assert event.external_id == f"VISIT_COMPLETE:{data['itemId']}:{data['occurredAt']}"


def test_a_webhook_with_a_wrong_or_missing_signature_is_refused_401_and_counted(connection, jobber):
    body = webhook_body("JOB_UPDATE", "Z2lkOi8vSm9iYmVyL0pvYi8x")

    wrong = post(body, {"X-Jobber-Hmac-SHA256": jobber_signature("not-the-secret", body)})
    missing = post(body, {})

    assert (wrong.status_code, missing.status_code) == (401, 401)
    assert wrong.json() == {"error": "invalid_signature", "detail": "bad or missing X-Jobber-Hmac-SHA256"}
    assert not InboundEvent.objects.exists()
    assert RejectedDelivery.objects.get(provider="jobber").count == 2


def test_a_signed_body_we_cannot_read_is_stored_failed_and_answered_200(connection, jobber):
    body = b'{"data": {"something": "else"}}'
    answer = post(body)
    assert answer.status_code == 200 and "stored as failed" in answer.json()["detail"]
    assert InboundEvent.objects.get().status == "failed"


def test_a_duplicate_webhook_is_stored_once_and_waiting_pulls_of_one_record_coalesce(connection, jobber):
    client = jobber_client(jobber)
    body = webhook_body("CLIENT_UPDATE", client, occurred_at="2026-03-17T15:00:00Z")

    first, again = post(body), post(body)
    deliver("CLIENT_UPDATE", client, occurred_at="2026-03-17T15:00:05Z")

    assert (first.json()["duplicate"], again.json()["duplicate"]) == (False, True)
    assert InboundEvent.objects.count() == 2
    assert run_queued_events() == ["processed", "processed"]
    assert SyncChange.objects.filter(direction="pull", status="pending").count() == 1
    assert sync_pump() == {"done": 1}


def test_a_visit_webhook_before_its_job_reads_the_job_first(connection, jobber, lead):
    client = jobber_client(jobber)
    job = jobber.add("job", title="Furnace repair", jobStatus="upcoming", startAt=iso(TUE_13), client={"id": client})
    visit = jobber.add(
        "visit",
        title="Furnace repair",
        startAt=iso(TUE_13),
        endAt=iso(TUE_13 + timedelta(hours=2)),
        visitStatus="UPCOMING",
        job={"id": job},
        client={"id": client},
    )

    deliver("VISIT_CREATE", visit)
    assert work() == {"done": 1}

    appointment = Appointment.objects.get(provider="jobber")
    assert appointment.lead == lead and appointment.starts_at == TUE_13
    assert appointment.external_id.startswith(f"{visit}@")
    our_job = Job.objects.get()
    assert our_job.lead == lead and our_job.status == "scheduled"
    links = dict(SyncLink.objects.values_list("kind", "external_id"))
    assert links == {"client": client, "job": job, "visit": visit}
    lead.refresh_from_db()
    assert lead.stage == "booked"  # a visit Jobber scheduled books the lead like any booking
    assert set(Receipt.objects.filter(action__in=["sync.linked", "sync.pulled"]).values_list("action", flat=True)) == {
        "sync.linked",
        "sync.pulled",
    }

    # The job's own webhook, late, and the visit's again: nothing new.
    deliver("JOB_CREATE", job)
    deliver("VISIT_CREATE", visit, occurred_at="2026-03-17T15:00:09Z")
    assert work() == {"done": 2}
    assert (Job.objects.count(), Appointment.objects.count()) == (1, 1)
    assert {c.outcome.split(":")[0] for c in SyncChange.objects.filter(status="done")[:2]} == {"unchanged"}


def test_a_visit_completed_in_jobber_is_held_here_and_a_deleted_one_canceled(connection, jobber, lead):
    client = jobber_client(jobber)
    job = jobber.add("job", title="Tune-up", jobStatus="upcoming", client={"id": client})
    starts = timezone.now() - timedelta(hours=3)
    visit = jobber.add(
        "visit",
        startAt=iso(starts),
        endAt=iso(starts + timedelta(hours=1)),
        visitStatus="UPCOMING",
        job={"id": job},
        client={"id": client},
    )
    later = jobber.add(
        "visit",
        startAt=iso(TUE_9),
        endAt=iso(TUE_9 + timedelta(hours=1)),
        visitStatus="UPCOMING",
        job={"id": job},
        client={"id": client},
    )
    deliver("VISIT_CREATE", visit)
    deliver("VISIT_CREATE", later)
    work()

    jobber.change("visit", visit, visitStatus="COMPLETED", completedAt=iso(timezone.now()))
    jobber.delete("visit", later)
    deliver("VISIT_COMPLETE", visit)
    deliver("VISIT_DESTROY", later)
    assert work() == {"done": 2}

    statuses = dict(Appointment.objects.values_list("starts_at", "status"))
    assert statuses == {starts: "held", TUE_9: "canceled"}
    assert Receipt.objects.filter(action="sync.deleted_there").count() == 1


def test_a_webhook_for_an_account_not_connected_yet_waits_for_the_connection(shop, jobber, lead):
    from crm.services.sync import connection_connect
    from tests.helpers.jobber import ACCOUNT_ID

    client = jobber_client(jobber)
    deliver("CLIENT_CREATE", client)
    assert run_queued_events() == ["received"]  # waiting, not failed
    tokens = jobber.grant()
    connection_connect(
        shop,
        provider="jobber",
        account_id=ACCOUNT_ID,
        account_name="",
        access_token=tokens["access_token"],
        refresh_token=tokens["refresh_token"],
        expires_at=timezone.now() + timedelta(hours=1),
        actor="olivia",
    )
    InboundEvent.objects.update(retry_at=timezone.now())
    assert work() == {"done": 1}
    assert SyncLink.objects.get(kind="client").record == lead.contact.public_id


def test_the_app_removed_in_jobber_stops_the_connection_for_the_manager(connection, jobber, manager):
    deliver("APP_DISCONNECT", "")
    run_queued_events()
    connection.refresh_from_db()
    assert connection.status == "disconnected"
    item = ExceptionItem.objects.get(kind="sync_reconnect")
    assert item.owner == manager and "removed" in item.detail


def test_a_throttled_query_waits_until_its_cost_is_restored(connection, jobber, lead):
    client = jobber_client(jobber)
    deliver("CLIENT_CREATE", client)
    run_queued_events()
    now = timezone.now()
    # 1,100 points asked, 100 left, 500 restored a second: two seconds to wait.
    jobber.throttle(available=100, requested=1100)

    assert sync_pump(now=now) == {"pending": 1}

    connection.refresh_from_db()
    assert connection.throttled_until == now + timedelta(seconds=2)
    change = SyncChange.objects.get()
    assert change.next_attempt_at == connection.throttled_until and change.errors == 0
    assert "throttled" in change.last_error
    assert sync_pump(now=now + timedelta(seconds=1)) == {}  # nothing asked of Jobber before then
    assert sync_pump(now=now + timedelta(seconds=3)) == {"done": 1}


def test_the_reconcile_loop_reads_changed_records_page_by_page_from_its_cursor(connection, jobber, lead, settings):
    settings.JOBBER_PAGE_SIZE = 2
    client = jobber_client(jobber)
    jobs = [jobber.add("job", title=f"Job {n}", jobStatus="upcoming", client={"id": client}) for n in range(5)]
    now = timezone.now()

    assert reconcile(connection, now=now) == 6  # the client, then five jobs over three pages

    assert Job.objects.filter(lead=lead).count() == 5
    asked = jobber.fields_asked("jobs")
    assert [a["after"] for a in asked] == [None, "Mg==", "NA=="] and all(a["first"] == 2 for a in asked)
    connection.refresh_from_db()
    newest = jobber.records["job"][jobs[-1]]["updatedAt"]
    assert connection.cursors["job"] == {"since": newest, "after": ""}

    # Within the period nothing is read again; after it, only what changed.
    assert reconcile(connection, now=now + timedelta(minutes=5)) == 0
    jobber.change("job", jobs[0], jobStatus="requires_invoicing", completedAt=iso(timezone.now()))
    assert reconcile(connection, now=now + timedelta(minutes=16)) == 1
    assert jobber.fields_asked("jobs")[-1]["since"] == newest
    assert Job.objects.filter(status="completed").count() == 1 and Job.objects.count() == 5


def test_a_jobber_invoice_paid_becomes_our_payment_attributed_to_the_leads_campaign(
    connection, jobber, shop, setter, rule, templates
):
    contact = contact_create(business=shop, actor="test", first_name="Rosa", last_name="Diaz", phones=["+12125550147"])
    lead = lead_open(contact=contact, actor="test", touch={"channel": "form", "campaign_id": "cmp-spring-tuneup"})
    lead_sync.lead_assign(lead, setter, actor="test", reason="test")
    visit = appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW).appointment
    sync_pump()
    appointment_mark_held(visit, actor="tom", now=local(1, 10))  # the assessment happened
    request = SyncLink.objects.get(kind="request").external_id
    client = SyncLink.objects.get(kind="client").external_id

    quote = jobber.add(
        "quote",
        quoteStatus="approved",
        quoteNumber=12,
        sentAt=iso(local(1, 12)),
        amounts={"total": 450.0},
        client={"id": client},
        request={"id": request},
    )
    job = jobber.add(
        "job",
        title="Furnace repair",
        jobStatus="requires_invoicing",
        startAt=iso(local(2, 9)),
        completedAt=iso(local(2, 11)),
        client={"id": client},
        request={"id": request},
        quote={"id": quote},
    )
    invoice = jobber.add(
        "invoice",
        invoiceNumber="1001",
        invoiceStatus="paid",
        issuedDate=iso(local(2, 12)),
        amounts={"total": 450.0},
        client={"id": client},
        jobs={"nodes": [{"id": job}]},
    )
    payment = jobber.add(
        "paymentRecord", amount=450.0, entryDate=iso(local(3, 9)), invoice={"id": invoice}, client={"id": client}
    )

    # Only the payment's webhook arrives: its invoice, job and quote are read first.
    deliver("PAYMENT_CREATE", payment)
    assert work() == {"done": 1}
    orchestrate_pending()

    estimate = Estimate.objects.get(lead=lead)
    assert (estimate.status, estimate.amount) == ("accepted", Decimal("450.00"))
    our_job = Job.objects.get(lead=lead)
    assert our_job.status == "completed" and our_job.estimate == estimate
    our_invoice = Invoice.objects.get(lead=lead)
    assert (our_invoice.job, our_invoice.number, our_invoice.status) == (our_job, "1001", "paid")
    paid = Payment.objects.get()
    assert (paid.provider, paid.external_id, paid.match_status) == ("jobber", payment, "matched")
    assert (paid.lead, paid.invoice, paid.amount, paid.currency) == (lead, our_invoice, Decimal("450.00"), "USD")
    assert Lead.objects.get(pk=lead.pk).stage == "won"

    report = revenue_report([shop.pk], currency="USD", by="campaign")
    row = next(r for r in report.rows if r.key == "cmp-spring-tuneup")
    assert (row.leads, row.booked, row.jobs_completed, row.collected) == (1, 1, 1, Decimal("450.00"))

    # The same payment again (a redelivery, a reconcile): still one payment.
    deliver("PAYMENT_UPDATE", payment)
    work()
    assert Payment.objects.count() == 1


def test_a_payment_of_a_client_no_lead_explains_is_left_to_payment_matching(connection, jobber, manager):
    stranger = jobber_client(jobber, first="Sam", last="Other", phone="+13125550100")
    payment = jobber.add("paymentRecord", amount=80.0, entryDate=iso(timezone.now()), client={"id": stranger})

    deliver("PAYMENT_CREATE", payment)
    work()

    paid = Payment.objects.get()
    assert (paid.provider, paid.match_status, paid.lead) == ("jobber", "unmatched", None)
    assert ExceptionItem.objects.filter(kind="unmatched_payment", subject=paid.public_id).exists()


def test_edited_on_both_sides_jobbers_version_wins_and_ours_is_in_the_receipt(
    connection, jobber, lead, rule, templates
):
    appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)
    sync_pump()
    client = str(SyncLink.objects.get(kind="client").external_id)
    contact = lead.contact
    # A person corrects the name here (the contact's admin page saves it)…
    contact.first_name = "Rosalind"
    contact.save()
    # …and someone renames the client in Jobber before the next sync.
    jobber.change("client", client, firstName="Rosa", lastName="Diaz-Lopez")

    deliver("CLIENT_UPDATE", client)
    assert work() == {"done": 1}

    contact.refresh_from_db()
    assert (contact.first_name, contact.last_name) == ("Rosa", "Diaz-Lopez")
    receipt = Receipt.objects.get(action="sync.conflict")
    assert receipt.subject == contact.public_id
    assert receipt.before == {"first_name": "Rosalind", "last_name": "Diaz"}
    assert receipt.after["first_name"] == "Rosa" and receipt.after["last_name"] == "Diaz-Lopez"
    assert receipt.after["external_id"] == client and "version kept" in receipt.reason

    # Changed in Jobber alone, later: an update, no conflict.
    jobber.change("client", client, lastName="Lopez")
    deliver("CLIENT_UPDATE", client)
    work()
    contact.refresh_from_db()
    assert contact.last_name == "Lopez"
    assert Receipt.objects.filter(action="sync.conflict").count() == 1
    assert Receipt.objects.filter(action="sync.pulled", subject=contact.public_id).count() == 1


def test_the_status_page_counts_what_waits_and_what_failed(connection, jobber, manager):
    client_id = jobber_client(jobber)
    SyncConnection.objects.filter(pk=connection.pk).update(
        last_error="Jobber answered 503", last_error_at=timezone.now()
    )
    deliver("CLIENT_CREATE", client_id)
    run_queued_events()
    page = Client()
    page.force_login(manager.user)

    html = page.get("/admin/sync/").content.decode()

    assert connection.public_id in html and "Jobber answered 503" in html
    assert '<td class="waiting">1</td>' in html and '<td class="failed">0</td>' in html


def test_a_visit_moved_in_jobber_becomes_a_new_appointment_rescheduled_from_the_old(connection, jobber, lead):
    client = jobber_client(jobber)
    job = jobber.add("job", title="Tune-up", jobStatus="upcoming", client={"id": client})
    visit = jobber.add(
        "visit",
        startAt=iso(TUE_9),
        endAt=iso(TUE_9 + timedelta(hours=2)),
        visitStatus="UPCOMING",
        job={"id": job},
        client={"id": client},
    )
    deliver("VISIT_CREATE", visit)
    work()
    old = Appointment.objects.get()

    jobber.change("visit", visit, startAt=iso(TUE_13), endAt=iso(TUE_13 + timedelta(hours=2)))
    deliver("VISIT_UPDATE", visit)
    assert work() == {"done": 1}

    new = Appointment.objects.exclude(pk=old.pk).get()
    assert (new.starts_at, new.rescheduled_from, new.status) == (TUE_13, old, "scheduled")
    assert Appointment.objects.get(pk=old.pk).status == "canceled"
    assert SyncLink.objects.get(kind="visit").record == new.public_id
    assert Lead.objects.get(pk=lead.pk).stage == "booked"
