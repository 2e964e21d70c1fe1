"""The lead trace: seven questions, the first unanswered one is the break; the
leak audit's SQL gives the same break for every lead."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.reporting.trace import KEYS, lead_first_breaks, lead_trace, leak_audit
from crm.models import Enrollment, Lead, Source
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.records import appointment_record, job_record, refund_record
from tests.factories import lead_create
from tests.helpers.reporting import (
    completed_job,
    grant_sms,
    held,
    owned,
    paid,
    sequence,
    sourced_lead,
    won,
)

pytestmark = pytest.mark.django_db


def _complete(business, source, setter, phone):
    """A lead that answers all seven questions: sourced, consented, owned, paid."""
    lead = owned(sourced_lead(business, source, phone=phone), setter)
    grant_sms(lead)
    held(lead)
    completed_job(lead)
    paid(lead)
    return lead


@pytest.fixture
def leads_by_break(business, source, setter):
    """One lead broken at each of the seven points, and one with no break."""
    leads: dict[str | None, Lead] = {}

    no_source = owned(lead_create(business, phone="+12125550101"), setter)  # typed in by hand
    grant_sms(no_source)
    leads["source"] = no_source

    leads["may_contact"] = owned(sourced_lead(business, source, phone="+12125550102"), setter)

    unowned = sourced_lead(business, source, phone="+12125550103")
    grant_sms(unowned)
    leads["next_action_owner"] = unowned

    still_running = owned(sourced_lead(business, source, phone="+12125550104"), setter)
    grant_sms(still_running)
    Enrollment.objects.create(
        business=business,
        lead=still_running,
        contact=still_running.contact,
        sequence=sequence(business),
        next_step_due_at=timezone.now() + timedelta(hours=1),
    )
    lead_sync.lead_set_hold(still_running, True, actor="test", reason="customer asked to wait")
    leads["stop_rule"] = still_running

    no_show = owned(sourced_lead(business, source, phone="+12125550105"), setter)
    grant_sms(no_show)
    start = timezone.now() - timedelta(days=2)
    appointment_record(lead=no_show, starts_at=start, ends_at=start + timedelta(hours=1), actor="t", status="no_show")
    leads["appointment_happened"] = no_show

    no_job = owned(sourced_lead(business, source, phone="+12125550106"), setter)
    grant_sms(no_job)
    held(no_job)
    job_record(lead=no_job, actor="t", status="scheduled")
    leads["job_completed"] = no_job

    refunded = owned(sourced_lead(business, source, phone="+12125550107"), setter)
    grant_sms(refunded)
    held(refunded)
    completed_job(refunded)
    payment = paid(refunded, "300.00")
    refund_record(payment=payment, amount=payment.amount, actor="t", refunded_at=timezone.now())
    leads["payment_collected"] = refunded

    leads[None] = won(_complete(business, source, setter, "+12125550108"))
    return leads


@pytest.mark.parametrize("expected", [*KEYS, None])
def test_the_trace_names_the_first_question_the_record_cannot_answer(leads_by_break, expected):
    lead = leads_by_break[expected]
    trace = lead_trace(lead)
    assert [a.key for a in trace.questions] == KEYS
    assert trace.first_break == expected
    broken = [a.key for a in trace.questions if not a.ok]
    if expected is not None:
        assert broken[0] == expected
    else:
        assert broken == []
    for answer in trace.questions:
        assert answer.answer and answer.question.endswith("?")


def test_every_answer_links_its_evidence_by_public_id(leads_by_break):
    lead = leads_by_break[None]
    answers = {a.key: a for a in lead_trace(lead).questions}
    touch = lead.touches.get()
    assert answers["source"].evidence == [touch.public_id]
    consent_event = lead.contact.points.get().consent_events.get()
    assert answers["may_contact"].evidence == [consent_event.public_id]
    # A won lead needs no next action: the stage change that closed it is the evidence.
    closing = lead.receipts.filter(action="lead.stage_changed").order_by("-id").first()
    assert answers["next_action_owner"].evidence == [closing.public_id]
    assert answers["appointment_happened"].evidence == [lead.appointments.get().public_id]
    assert answers["job_completed"].evidence == [lead.jobs.get().public_id]
    assert answers["payment_collected"].evidence == [lead.payments.get().public_id]
    assert "250.00 USD" in answers["payment_collected"].answer


def test_a_refund_in_full_is_not_collected_and_names_both_records(leads_by_break):
    lead = leads_by_break["payment_collected"]
    answer = lead_trace(lead).questions[-1]
    payment = lead.payments.get()
    assert not answer.ok
    assert answer.evidence == [payment.public_id, payment.refunds.get().public_id]
    assert "refunded in full" in answer.answer


def test_the_stop_rule_break_says_why_the_sequence_should_have_stopped(leads_by_break):
    answer = lead_trace(leads_by_break["stop_rule"]).questions[3]
    assert "on hold" in answer.answer
    assert answer.evidence == [Enrollment.objects.get().public_id]


def test_a_revocation_after_consent_breaks_may_contact(leads_by_break):
    lead = leads_by_break[None]
    consent_record(contact_point=lead.contact.points.get(), channel="sms", granted=False, basis="keyword", actor="t")
    trace = lead_trace(lead)
    assert trace.first_break == "may_contact"
    assert "revoked" in trace.questions[1].answer


def test_the_leak_audit_sql_agrees_with_the_trace_for_every_lead(leads_by_break):
    computed = lead_first_breaks(Lead.objects.all())
    for expected, lead in leads_by_break.items():
        assert computed[lead.public_id] == expected == lead_trace(lead).first_break


def test_the_leak_audit_counts_first_breaks_by_source(leads_by_break):
    audit = leak_audit(Lead.objects.all())
    assert audit.leads == 8
    assert {k: v for k, v in audit.totals.items() if v} == {**dict.fromkeys(KEYS, 1), "": 1}
    by_source = {row.source: row for row in audit.rows}
    assert by_source["manual"].breaks == {"source": 1}
    assert by_source["site"].leads == 7
    assert by_source["site"].unbroken == 1


def test_the_trace_reads_a_bounded_number_of_queries(leads_by_break, django_assert_max_num_queries):
    lead = Lead.objects.select_related("business", "contact", "owner__user").get(pk=leads_by_break[None].pk)
    with django_assert_max_num_queries(20):
        lead_trace(lead)


def test_a_dm_only_lead_may_be_answered_inside_metas_window_and_the_sql_agrees(business):
    from agents.capture.base import Capture
    from agents.capture.identity import capture_apply

    written = timezone.now() - timedelta(hours=23)
    capture = Capture(
        channel="dm",
        occurred_at=written,
        handles=[("instagram", "1122334455")],
        message_body="Hi, can you fix my roof?",
        message_sid="mid.trace",
        touch={"provider": "instagram"},
    )
    source = Source.objects.create(business=business, key="ig", provider="instagram", config={"account_id": "1"})
    applied = capture_apply(business=business, capture=capture, source=source)
    lead = applied.lead
    now, later = timezone.now(), timezone.now() + timedelta(hours=2)

    inside = lead_trace(lead, now=now)
    assert inside.questions[1].ok and "instagram to 1122334455: yes, messaging_window" in inside.questions[1].answer
    assert applied.message.public_id in inside.questions[1].evidence
    outside = lead_trace(lead, now=later)
    assert not outside.questions[1].ok and "no (outside_window)" in outside.questions[1].answer
    assert (inside.first_break, outside.first_break) == ("next_action_owner", "may_contact")
    for at, trace in ((now, inside), (later, outside)):
        assert lead_first_breaks(Lead.objects.filter(pk=lead.pk), now=at)[lead.public_id] == trace.first_break
