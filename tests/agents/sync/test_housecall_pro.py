"""Housecall Pro through the same engine as Jobber: a company connected by
its pasted API key (tried before it is saved), webhooks signed with each
company's own secret, records read from its REST API page by page and
applied whatever order and however often the webhooks come, a paid invoice
counted as a payment by the lead's campaign, its rate limit respected and a
revoked key put in front of the manager."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection as db
from django.test import Client
from django.utils import timezone

from agents.booking.services import appointment_book, appointment_mark_held
from agents.orchestrator import orchestrate_pending
from agents.sync.engine import reconcile, sync_pump
from crm.attribution import revenue_report
from crm.models import (
    Appointment,
    Business,
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
from tests.helpers.housecall_pro import (
    API_KEY,
    COMPANY_ID,
    WEBHOOK_SECRET,
    HousecallProServer,
    housecall_pro_connect,
    housecall_pro_running,
    iso,
    webhook_body,
    webhook_headers,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def hcp(settings: Any) -> Iterator[HousecallProServer]:
    with housecall_pro_running(settings) as server:
        yield server


@pytest.fixture
def hcp_connection(shop: Business, hcp: HousecallProServer) -> SyncConnection:
    return housecall_pro_connect(shop)


URL = "/hooks/housecall_pro/"


def post(body: bytes, headers: dict[str, str] | None = None) -> Any:
    return Client().post(
        URL, data=body, content_type="application/json", headers=webhook_headers(body) if headers is None else headers
    )


def deliver(event: str, record: dict[str, Any], **kw: Any) -> Any:
    answer = post(webhook_body(event, record, **kw))
    assert answer.status_code == 200, answer.content
    return answer


def work() -> dict[str, int]:
    """What the cluster does: the stored webhooks processed, then the sync pump."""
    run_queued_events()
    return sync_pump()


def customer(hcp: Any, *, first: str = "Rosa", last: str = "Diaz", phone: str = "+12125550147") -> str:
    return hcp.add("customers", first_name=first, last_name=last, email=None, mobile_number=phone)


def job(hcp: Any, customer_id: str, **fields: Any) -> str:
    values = {
        "description": "Furnace repair",
        "work_status": "scheduled",
        "schedule": {"scheduled_start": iso(TUE_13), "scheduled_end": iso(TUE_13 + timedelta(hours=2))},
        "work_timestamps": {"completed_at": None},
        "total_amount": 45000,
        "customer": {"id": customer_id},
        **fields,
    }
    return hcp.add("jobs", **values)


# --- connecting ----------------------------------------------------------------------------


def test_a_good_key_connects_the_company_and_is_kept_encrypted_with_its_secret(shop, owner, hcp):
    client = Client()
    client.force_login(owner.user)

    answer = client.post(
        "/admin/sync/housecall_pro/key/",
        {"business": shop.slug, "api_key": API_KEY, "webhook_secret": WEBHOOK_SECRET},
        follow=True,
    )

    assert "is connected to Housecall Pro" in answer.content.decode()
    conn = SyncConnection.objects.get(business=shop, provider="housecall_pro")
    assert (conn.status, conn.account_id, conn.connected_by) == ("active", COMPANY_ID, "olivia")
    assert (conn.access_token, conn.refresh_token, conn.token_expires_at) == (API_KEY, "", None)
    assert conn.webhook_secret == WEBHOOK_SECRET
    with db.cursor() as cursor:
        cursor.execute("SELECT access_token, webhook_secret FROM crm_syncconnection WHERE id = %s", [conn.pk])
        stored = cursor.fetchone()
    assert stored[0].startswith("gAAAA") and API_KEY not in stored[0]
    assert stored[1].startswith("gAAAA") and WEBHOOK_SECRET not in stored[1]
    assert [(s["method"], s["path"]) for s in hcp.seen] == [("GET", "/company")]
    assert "token" not in str(Receipt.objects.get(subject=conn.public_id, action="sync.connected").after)
    # The page offers a key form for it, not a consent button.
    page = client.get("/admin/sync/").content.decode()
    assert 'action="/admin/sync/housecall_pro/key/"' in page and 'name="webhook_secret"' in page


def test_a_refused_key_is_said_plainly_and_nothing_is_saved(shop, owner, manager, hcp):
    client = Client()
    client.force_login(owner.user)

    answer = client.post(
        "/admin/sync/housecall_pro/key/",
        {"business": shop.slug, "api_key": "not-a-key", "webhook_secret": WEBHOOK_SECRET},
        follow=True,
    )

    assert "Housecall Pro refused that API key" in answer.content.decode()
    assert not SyncConnection.objects.exists()
    # Only an owner pastes a key; the OAuth button refuses a key adapter.
    manager_client = Client()
    manager_client.force_login(manager.user)
    refused = manager_client.post(
        "/admin/sync/housecall_pro/key/", {"business": shop.slug, "api_key": API_KEY, "webhook_secret": "x"}
    )
    assert refused.status_code == 403
    oauth = client.post("/admin/sync/housecall_pro/connect/", {"business": shop.slug}, follow=True)
    assert "connects with an API key" in oauth.content.decode() and not SyncConnection.objects.exists()


def test_a_revoked_key_stops_the_connection_for_the_manager_instead_of_a_refresh(
    hcp_connection, hcp, lead, rule, templates, manager
):
    hcp.revoke()
    appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)

    assert sync_pump() == {"pending": 1}

    hcp_connection.refresh_from_db()
    assert hcp_connection.status == "reauthorize" and "refused the API key" in hcp_connection.last_error
    item = ExceptionItem.objects.get(kind="sync_reconnect", status="open")
    assert item.owner == manager and item.subject == hcp_connection.public_id
    change = SyncChange.objects.get()
    assert change.status == "pending" and change.errors == 0
    assert sync_pump(now=timezone.now() + timedelta(hours=1)) == {}  # nothing is asked while it waits
    # One refused call: no refresh was tried (a key has none), nothing else asked.
    assert [s["path"] for s in hcp.seen] == ["/customers"]


# --- webhooks ------------------------------------------------------------------------------


def test_a_signed_job_webhook_is_stored_and_reads_the_job_and_its_visit(hcp_connection, hcp, lead):
    client_id = customer(hcp)
    job_id = job(hcp, client_id)
    record = hcp.records["jobs"][job_id]

    answer = deliver("job.scheduled", record)

    assert answer.json()["status"] == "received"
    event = InboundEvent.objects.get()
    assert (event.provider, event.kind, event.business) == ("housecall_pro", "job.scheduled", hcp_connection.business)
    assert event.external_id == f"job.scheduled:{job_id}:{record['updated_at']}"
    assert work() == {"done": 2}  # the job, and the job as a visit

    our_job = Job.objects.get()
    assert (our_job.lead, our_job.status, our_job.scheduled_for) == (lead, "scheduled", TUE_13)
    appointment = Appointment.objects.get(provider="housecall_pro")
    assert (appointment.lead, appointment.starts_at) == (lead, TUE_13)
    assert dict(SyncLink.objects.values_list("kind", "external_id")) == {
        "client": client_id,
        "job": job_id,
        "visit": job_id,
    }
    assert Lead.objects.get(pk=lead.pk).stage == "booked"


def test_a_bad_signature_or_an_unknown_company_is_refused_and_nothing_is_processed(hcp_connection, hcp):
    body = webhook_body("job.completed", {"id": "job_0001", "updated_at": iso(timezone.now())})

    wrong = post(body, webhook_headers(body, secret="not-the-secret"))
    missing = post(body, {})
    stale_stamp = webhook_headers(body)
    stale_stamp["Api-Timestamp"] = "1"  # the signature covers the time: another time fails
    moved = post(body, stale_stamp)
    stranger = webhook_body("job.completed", {"id": "job_0001"}, company_id="someone-else")
    unknown = post(stranger, webhook_headers(stranger))

    assert [a.status_code for a in (wrong, missing, moved, unknown)] == [401, 401, 401, 401]
    assert wrong.json() == {"error": "invalid_signature", "detail": "bad or missing Api-Signature"}
    assert not InboundEvent.objects.exists() and not SyncChange.objects.exists()
    assert RejectedDelivery.objects.get(provider="housecall_pro").count == 4


def test_duplicate_and_out_of_order_webhooks_never_undo_a_newer_change(hcp_connection, hcp, lead):
    client_id = customer(hcp)
    job_id = job(hcp, client_id)
    scheduled = dict(hcp.records["jobs"][job_id])
    completed = hcp.change(
        "jobs", job_id, work_status="complete_unrated", work_timestamps={"completed_at": iso(timezone.now())}
    )

    # The newer webhook first, twice; the older one after.
    first, again = post(webhook_body("job.completed", completed)), post(webhook_body("job.completed", completed))
    assert (first.json()["duplicate"], again.json()["duplicate"]) == (False, True)
    work()
    deliver("job.scheduled", scheduled)
    work()

    assert InboundEvent.objects.count() == 2
    our_job = Job.objects.get()
    assert our_job.status == "completed"
    assert SyncLink.objects.get(kind="job").remote_version == completed["updated_at"]
    late = SyncChange.objects.filter(kind="job", status="done").order_by("-id").first()
    assert late is not None and late.outcome.startswith("unchanged")


def test_an_event_we_do_not_act_on_is_stored_ignored(hcp_connection, hcp):
    deliver("pro.created", {"id": "pro_1"})
    assert InboundEvent.objects.get().status == "ignored"
    assert not SyncChange.objects.exists()


def test_a_paid_invoice_becomes_our_payment_attributed_to_the_leads_campaign(
    hcp_connection, hcp, shop, setter, rule, templates
):
    contact = contact_create(business=shop, actor="test", first_name="Rosa", last_name="Diaz", phones=["+12125550147"])
    lead = lead_open(contact=contact, actor="test", touch={"channel": "form", "campaign_id": "cmp-spring-tuneup"})
    lead_sync.lead_assign(lead, setter, actor="test", reason="test")
    visit = appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW).appointment
    assert sync_pump() == {"done": 1}
    appointment_mark_held(visit, actor="tom", now=local(1, 10))
    client_id = str(SyncLink.objects.get(kind="client").external_id)
    pushed_job = str(SyncLink.objects.get(kind="request").external_id)

    estimate = hcp.add(
        "estimates",
        estimate_number="12",
        customer={"id": client_id},
        options=[
            {"id": "opt_1", "name": "Repair", "total_amount": 45000, "approval_status": "approved"},
            {"id": "opt_2", "name": "Replace", "total_amount": 690000, "approval_status": "declined"},
        ],
    )
    hcp.change(
        "jobs",
        pushed_job,
        work_status="complete_unrated",
        original_estimate_id=estimate,
        schedule={"scheduled_start": iso(local(2, 9)), "scheduled_end": iso(local(2, 11))},
        work_timestamps={"completed_at": iso(local(2, 11))},
        total_amount=45000,
    )
    invoice = hcp.add(
        "invoices",
        invoice_number="1001",
        job_id=pushed_job,
        status="paid",
        amount=45000,
        due_amount=0,
        sent_at=iso(local(2, 12)),
        paid_at=iso(local(3, 9)),
        customer={"id": client_id, "mobile_number": "+12125550147"},
    )

    # Only the invoice's paid webhook arrives: the invoice, its job and the estimate are read first.
    deliver("invoice.paid", hcp.records["invoices"][invoice])
    assert work() == {"done": 1}
    orchestrate_pending()

    our_estimate = Estimate.objects.get(lead=lead)
    assert (our_estimate.status, our_estimate.amount) == ("accepted", Decimal("450.00"))
    our_job = Job.objects.get(lead=lead)
    assert our_job.status == "completed" and our_job.estimate == our_estimate
    our_invoice = Invoice.objects.get(lead=lead)
    assert (our_invoice.job, our_invoice.number, our_invoice.amount) == (our_job, "1001", Decimal("450.00"))
    paid = Payment.objects.get()
    assert (paid.provider, paid.external_id, paid.match_status) == ("housecall_pro", f"{invoice}:paid", "matched")
    assert (paid.lead, paid.invoice, paid.amount, paid.currency) == (lead, our_invoice, Decimal("450.00"), "USD")
    assert Lead.objects.get(pk=lead.pk).stage == "won"
    report = revenue_report([shop.pk], currency="USD", by="campaign")
    row = next(r for r in report.rows if r.key == "cmp-spring-tuneup")
    assert (row.leads, row.booked, row.jobs_completed, row.collected) == (1, 1, 1, Decimal("450.00"))

    # The same paid invoice again (a redelivery, then the reconcile loop): still one payment.
    deliver("invoice.updated", hcp.change("invoices", invoice, notes="thanks"))
    work()
    reconcile(hcp_connection, now=timezone.now())
    assert Payment.objects.count() == 1


# --- reading, the budget --------------------------------------------------------------------


def test_the_reconcile_loop_reads_page_by_page_and_then_only_what_changed(hcp_connection, hcp, lead, settings):
    settings.HOUSECALLPRO_PAGE_SIZE = 2
    client_id = customer(hcp)
    jobs = [job(hcp, client_id, description=f"Job {n}", schedule={}) for n in range(5)]
    now = timezone.now()

    read = reconcile(hcp_connection, now=now)

    assert Job.objects.filter(lead=lead).count() == 5
    asked = hcp.asked("/jobs")
    # Jobs are read twice (as jobs, then as visits), newest change first, three pages each.
    assert [a["page"] for a in asked] == ["1", "2", "3", "1", "2", "3"]
    assert all(a["page_size"] == "2" and a["sort_by"] == "updated_at" for a in asked)
    assert read == 11  # one customer, five jobs, five visits (unscheduled: no appointment)
    hcp_connection.refresh_from_db()
    newest = hcp.records["jobs"][jobs[-1]]["updated_at"]
    assert hcp_connection.cursors["job"] == {"since": newest, "after": ""}
    assert not Appointment.objects.exists()

    # A change whose webhook was lost arrives with the next run, and only it is read.
    hcp.change("jobs", jobs[0], work_status="complete_rated", work_timestamps={"completed_at": iso(timezone.now())})
    assert reconcile(hcp_connection, now=now + timedelta(minutes=5)) == 0  # not before its period
    assert reconcile(hcp_connection, now=now + timedelta(minutes=16)) == 2  # the job, and it as a visit
    assert Job.objects.filter(status="completed").count() == 1 and Job.objects.count() == 5


def test_a_429_sets_the_connections_throttled_until_from_retry_after(hcp_connection, hcp, lead):
    client_id = customer(hcp)
    deliver("customer.updated", hcp.records["customers"][client_id])
    run_queued_events()
    now = timezone.now()
    hcp.throttle(retry_after=20)

    assert sync_pump(now=now) == {"pending": 1}

    hcp_connection.refresh_from_db()
    assert hcp_connection.throttled_until == now + timedelta(seconds=20)
    change = SyncChange.objects.get()
    assert change.next_attempt_at == hcp_connection.throttled_until and "throttled" in change.last_error
    assert sync_pump(now=now + timedelta(seconds=10)) == {}  # nothing asked before then
    assert sync_pump(now=now + timedelta(seconds=21)) == {"done": 1}
    assert SyncLink.objects.get(kind="client").record == lead.contact.public_id


def test_a_job_canceled_in_housecall_pro_cancels_its_appointment_here(hcp_connection, hcp, lead):
    job_id = job(hcp, customer(hcp))
    deliver("job.scheduled", hcp.records["jobs"][job_id])
    work()
    assert Appointment.objects.get(provider="housecall_pro").status == "scheduled"

    deliver("job.canceled", hcp.change("jobs", job_id, work_status="pro_canceled"))
    assert work() == {"done": 2}

    assert Appointment.objects.get(provider="housecall_pro").status == "canceled"
    assert Receipt.objects.filter(action="sync.deleted_there").count() == 1
