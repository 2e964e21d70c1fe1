"""Pipeline QA finds each condition once, owned by the manager, and resolves
it itself when the condition clears."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.reporting.pipeline_qa import QA_KINDS, pipeline_qa_run
from agents.routing.sla import sla_check
from crm.models import Enrollment, ExceptionItem, Lead, Message, Payment, Receipt
from crm.services import lead_sync
from crm.services.records import appointment_record, invoice_record, job_record, payment_record
from tests.factories import lead_create
from tests.helpers.races import run_together
from tests.helpers.reporting import owned, sequence, sourced_lead

pytestmark = pytest.mark.django_db

LATER = timedelta(hours=1)  # past the routing grace


def _open(kind: str) -> list[ExceptionItem]:
    return list(ExceptionItem.objects.filter(kind=kind, status="open"))


@pytest.fixture
def pipeline(business, source, setter, manager):
    """One record in each condition QA looks for."""
    now = timezone.now()
    leads = {
        "no_owner": sourced_lead(business, source, phone="+12125550111"),
        "no_next_action": lead_sync.lead_assign(
            sourced_lead(business, source, phone="+12125550112"), setter, actor="t", reason="t"
        ),
        "invalid_stage": lead_sync.lead_transition(
            owned(sourced_lead(business, source, phone="+12125550113"), setter), "booked", actor="t", reason="t"
        ),
        "sla_breached": owned(sourced_lead(business, source, phone="+12125550114"), setter),
    }
    sla_check(leads["sla_breached"], now=now)
    for n, flag in enumerate(("no_eligible_owner", "missing_identity", "out_of_area")):
        flagged = owned(sourced_lead(business, source, phone=f"+1212555012{n}"), manager)
        lead_sync.lead_flag_exception(flagged, flag, actor="t", reason="t")
        kind = {"no_eligible_owner": "manager_queue"}.get(flag, flag)
        leads[kind] = flagged
    lead_sync.lead_set_routing_reason(leads["manager_queue"], "no eligible owner — sam: off shift", actor="t")
    worked = owned(sourced_lead(business, source, phone="+12125550115"), setter)
    enrollment = Enrollment.objects.create(
        business=business,
        lead=worked,
        contact=worked.contact,
        sequence=sequence(business),
        next_step_due_at=now - timedelta(hours=3),
    )
    failed = Message.objects.create(
        business=business,
        lead=worked,
        contact=worked.contact,
        direction="out",
        channel="sms",
        status="undelivered",
        error_code="30003",
        idempotency_key="qa-test-1",
        body="Hi",
    )
    stuck = Message.objects.create(
        business=business,
        lead=worked,
        contact=worked.contact,
        direction="out",
        channel="sms",
        status="sending",
        idempotency_key="qa-test-3",
        body="Hi",
        attempts=1,
        claimed_at=now - timedelta(hours=2),
    )
    payment = payment_record(
        lead=worked,
        amount=Decimal("99.00"),
        currency="USD",
        actor="t",
        received_at=now,
        match_status=Payment.MatchStatus.AMBIGUOUS,
    )
    Payment.objects.filter(pk=payment.pk).update(lead=None)  # arrived with no lead: the matcher's case
    start = now - timedelta(hours=5)
    appointment = appointment_record(lead=worked, starts_at=start, ends_at=start + timedelta(hours=1), actor="t")
    job = job_record(lead=worked, actor="t", status="completed", completed_at=now - timedelta(days=2))
    return {
        **{k: v.public_id for k, v in leads.items()},
        "stuck_enrollment": enrollment.public_id,
        "undelivered_message": failed.public_id,
        "stuck_message": stuck.public_id,
        "unmatched_payment": payment.public_id,
        "appointment_no_outcome": appointment.public_id,
        "job_not_invoiced": job.public_id,
        "_leads": leads,
        "_worked": worked,
        "_now": now,
    }


def test_each_condition_becomes_one_open_item_owned_by_the_manager(pipeline, manager):
    now = pipeline["_now"] + LATER
    pipeline_qa_run(now=now)
    pipeline_qa_run(now=now)  # found again: no duplicates
    for kind in QA_KINDS:
        if kind == "stale_stage":
            continue
        items = _open(kind)
        assert [i.subject for i in items] == [pipeline[kind]], kind
        assert items[0].owner == manager
        assert items[0].detail
    assert ExceptionItem.objects.filter(status="open").count() == len(QA_KINDS) - 1
    # The details are written in SQL; they read as a person would write them.
    details = {i.kind: i.detail for i in ExceptionItem.objects.filter(status="open")}
    day = pipeline["_now"].strftime("%Y-%m-%d")
    assert details["no_owner"] == "no owner"
    assert details["no_next_action"] == "stage assigned, owned, but no next action"
    assert details["manager_queue"] == "no eligible owner: the manager holds it: no eligible owner — sam: off shift"
    assert details["missing_identity"] == "no usable phone, email or handle"
    assert details["out_of_area"] == "outside every service area: decide before booking"
    assert details["invalid_stage"] == "booked, but no scheduled appointment"
    assert details["sla_breached"].startswith(f"first response due was missed at {day} ")
    assert details["stuck_enrollment"].startswith("no_reply: step overdue since ")
    assert details["undelivered_message"] == "sms undelivered 30003"
    stuck_since = (pipeline["_now"] - timedelta(hours=2)).strftime("%Y-%m-%d %H:%M")
    assert details["stuck_message"] == f"sms sending since {stuck_since} UTC, 1 dispatch attempt(s)"
    assert details["unmatched_payment"].startswith("ambiguous: 99.00 USD from ") and details[
        "unmatched_payment"
    ].endswith(f" on {day}")
    assert details["appointment_no_outcome"].endswith(" UTC, still scheduled")
    assert details["job_not_invoiced"].startswith("completed ") and details["job_not_invoiced"].endswith(", no invoice")
    assert len({i.public_id for i in ExceptionItem.objects.all()}) == ExceptionItem.objects.count()
    # Public ids made in SQL look like new_public_id's: a ULID in Crockford base32.
    assert all(re.fullmatch(r"exc_[0-9A-HJKMNP-TV-Z]{26}", i.public_id) for i in ExceptionItem.objects.all())


def test_items_resolve_themselves_when_the_condition_clears(pipeline, setter):
    now = pipeline["_now"] + LATER
    pipeline_qa_run(now=now)
    leads, worked = pipeline["_leads"], pipeline["_worked"]
    owned(Lead.objects.get(pk=leads["no_owner"].pk), setter)
    lead_sync.lead_set_next_action(leads["no_next_action"], "Call", now, actor="t", reason="t")
    start = now + timedelta(days=1)
    appointment_record(lead=leads["invalid_stage"], starts_at=start, ends_at=start + timedelta(hours=1), actor="t")
    Lead.objects.filter(pk=leads["sla_breached"].pk).update(first_response_at=now)
    Enrollment.objects.filter(public_id=pipeline["stuck_enrollment"]).update(next_step_due_at=now + timedelta(hours=1))
    Message.objects.create(
        business=worked.business,
        lead=worked,
        contact=worked.contact,
        direction="out",
        channel="sms",
        status="delivered",
        idempotency_key="qa-test-2",
        body="Hi again",
        created_at=now,
    )
    Message.objects.filter(public_id=pipeline["stuck_message"]).update(status="sent")  # the sweep settled it
    Payment.objects.filter(public_id=pipeline["unmatched_payment"]).update(lead=worked, match_status="matched")
    worked.appointments.update(status="held")
    invoice_record(lead=worked, amount=Decimal("99.00"), currency="USD", actor="t", job=worked.jobs.get())
    for kind, flag in (
        ("manager_queue", "no_eligible_owner"),
        ("missing_identity", "missing_identity"),
        ("out_of_area", "out_of_area"),
    ):
        lead_sync.lead_flag_exception(leads[kind], flag, actor="t", reason="cleared", present=False)

    run = pipeline_qa_run(now=now)
    assert ExceptionItem.objects.filter(status="open").count() == 0
    resolved = ExceptionItem.objects.filter(status="resolved")
    assert sorted(resolved.values_list("kind", flat=True)) == sorted(k for k in QA_KINDS if k != "stale_stage")
    assert set(resolved.values_list("resolved_by", flat=True)) == {"agent:pipeline_qa"}
    assert sum(run.resolved.values()) == len(QA_KINDS) - 1
    # A condition that comes back is a new item, not the old one reopened.
    Payment.objects.filter(public_id=pipeline["unmatched_payment"]).update(lead=None, match_status="unmatched")
    pipeline_qa_run(now=now)
    assert ExceptionItem.objects.filter(kind="unmatched_payment").count() == 2


def test_a_stage_unchanged_too_long_is_stale(business, source, setter):
    lead = lead_sync.lead_assign(sourced_lead(business, source), setter, actor="t", reason="t")
    pipeline_qa_run(now=timezone.now() + timedelta(days=1), kinds=["stale_stage"])
    assert _open("stale_stage") == []
    pipeline_qa_run(now=timezone.now() + timedelta(days=3), kinds=["stale_stage"])
    assert [i.subject for i in _open("stale_stage")] == [lead.public_id]
    assert _open("stale_stage")[0].detail.endswith("; no next action")


def test_a_lead_whose_next_action_is_being_worked_is_not_stale(business, source, setter):
    """Past its stage's days, a lead is stale only when nobody is on it: its
    next action is missing or overdue by more than STALE_OVERDUE (two days)."""
    start = timezone.now()
    lead = owned(sourced_lead(business, source), setter, due=start + timedelta(days=10))
    # Assigned for 3 days (its stage allows 2), but the call back is due in a week.
    pipeline_qa_run(now=start + timedelta(days=3), kinds=["stale_stage"])
    assert _open("stale_stage") == []
    # The call back is a day overdue: the owner's brief lists it, not the manager's queue.
    pipeline_qa_run(now=start + timedelta(days=11), kinds=["stale_stage"])
    assert _open("stale_stage") == []
    # Three days overdue: nobody is working it.
    pipeline_qa_run(now=start + timedelta(days=13), kinds=["stale_stage"])
    (item,) = _open("stale_stage")
    assert item.subject == lead.public_id
    due = (start + timedelta(days=10)).strftime("%Y-%m-%d")
    assert item.detail == f"assigned and unchanged since {start:%Y-%m-%d}; next action overdue since {due}"
    # A new next action clears it on the next run.
    lead_sync.lead_set_next_action(lead, "Call again", start + timedelta(days=14), actor="t", reason="t")
    pipeline_qa_run(now=start + timedelta(days=13), kinds=["stale_stage"])
    assert _open("stale_stage") == []


def test_closed_and_test_leads_are_not_pipeline_problems(business, setter):
    lead = lead_create(business)
    Lead.objects.filter(pk=lead.pk).update(is_test=True)
    lead_sync.lead_transition(lead_create(business, phone="+12125550199"), "lost", actor="t", reason="t")
    pipeline_qa_run(now=timezone.now() + LATER)
    assert not ExceptionItem.objects.filter(kind__in=["no_owner", "no_next_action"]).exists()


def test_each_run_that_changes_something_writes_a_receipt(pipeline, business):
    pipeline_qa_run(now=pipeline["_now"] + LATER)
    receipt = Receipt.objects.filter(action="qa.run", business=business).get()
    assert receipt.actor == "agent:pipeline_qa"
    assert receipt.after["opened"]["no_owner"] == 1
    pipeline_qa_run(now=pipeline["_now"] + LATER)  # nothing changed: no second receipt
    assert Receipt.objects.filter(action="qa.run").count() == 1


@pytest.mark.django_db(transaction=True)
def test_overlapping_runs_open_each_item_once(business, source, setter, manager):
    for n in range(6):
        sourced_lead(business, source, phone=f"+1212555013{n}")
    now = timezone.now() + LATER
    run_together([lambda: pipeline_qa_run(now=now, kinds=["no_owner"])] * 3, timeout=30)
    assert ExceptionItem.objects.filter(kind="no_owner", status="open").count() == 6
    assert ExceptionItem.objects.filter(kind="no_owner").count() == 6
