"""The send gate: its checks in order, and what each verdict records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agents.outbound.gate import daily_cap_reached, message_send
from approvals.models import ApprovalRequest
from crm.models import Enrollment, Message, Receipt, Sequence, Timer
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.timers import timers_run_due
from tests.factories import lead_create

pytestmark = pytest.mark.django_db

NY_PHONE = "+12125550147"  # America/New_York
FL_PHONE = "+13055550147"  # Florida, America/New_York
NOON_NY = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)  # 12:00 in New York


def consenting_lead(business, phone=NY_PHONE):
    # Granted on the sends' own clock (NOON_NY), never the wall clock's: the
    # consent-age test counts "much later" from NOON_NY, and a consent
    # recorded at the real date would be younger than that the day after.
    lead = lead_create(business, phone=phone)
    consent_record(
        contact_point=lead.contact.points.get(),
        channel="sms",
        granted=True,
        basis="form_disclosure",
        actor="test",
        at=NOON_NY,
    )
    return lead


def send(lead, key="k1", now=NOON_NY, **kw):
    kw.setdefault("automated", True)
    return message_send(
        lead=lead,
        channel="sms",
        body="Hi, we got your request.",
        actor="agent:test",
        idempotency_key=key,
        now=now,
        **kw,
    )


def test_an_allowed_send_in_dry_run_records_exactly_what_would_be_sent(business):
    lead = consenting_lead(business)
    message = send(lead)
    assert (message.status, message.block_reason, message.to) == ("dry_run", "", NY_PHONE)
    receipt = Receipt.objects.get(subject=message.public_id, action="message.dry_run")
    assert receipt.after["body"] == "Hi, we got your request." and receipt.after["to"] == NY_PHONE


def test_the_same_intended_message_is_created_once(business):
    lead = consenting_lead(business)
    first, second = send(lead, key="same"), send(lead, key="same")
    assert first.pk == second.pk and Message.objects.count() == 1


def test_a_lead_on_hold_is_blocked_first(business):
    lead = consenting_lead(business)
    lead_sync.lead_set_hold(lead, True, actor="mia", reason="customer asked to wait")
    assert (send(lead).status, Message.objects.get().block_reason) == ("blocked", "hold")


def test_paused_automation_stops_automated_sends_but_not_a_person(business):
    lead = consenting_lead(business)
    lead.contact.automation_paused = True
    lead.contact.save()
    assert send(lead, key="a").block_reason == "stopped"
    assert send(lead, key="b", automated=False).status == "dry_run"


def test_a_revoked_channel_is_blocked_for_everyone(business):
    lead = consenting_lead(business)
    consent_record(contact_point=lead.contact.points.get(), channel="sms", granted=False, basis="keyword", actor="test")
    assert send(lead, key="a").block_reason == "revoked"
    assert send(lead, key="b", automated=False).block_reason == "revoked"


def test_one_revocation_on_any_channel_stops_every_automated_text_and_call(business):
    """The person unsubscribed from email: the business's automated texts and
    calls stop too (all kinds, every number); a person answering them by
    text, where their SMS consent stands, still may."""
    lead = lead_create(business, phone=NY_PHONE, email="pat@example.com")
    phone, email = lead.contact.points.get(kind="phone"), lead.contact.points.get(kind="email")
    consent_record(contact_point=phone, channel="sms", granted=True, basis="form_disclosure", actor="t", at=NOON_NY)
    assert send(lead, key="before").status == "dry_run"
    consent_record(contact_point=email, channel="email", granted=False, basis="unsubscribe", actor="t", at=NOON_NY)

    blocked = send(lead, key="after")

    assert (blocked.status, blocked.block_reason) == ("blocked", "revoked")
    receipt = Receipt.objects.get(subject=blocked.public_id, action="message.blocked")
    assert f"revoked on email (email {email.public_id})" in receipt.reason
    assert send(lead, key="by-a-person", automated=False).status == "dry_run"


def test_no_consent_is_blocked_unless_the_person_wrote_in(business):
    lead = lead_create(business, phone=NY_PHONE)
    assert send(lead, key="a", now=None).block_reason == "no_consent"
    Message.objects.create(
        business=business,
        lead=lead,
        contact=lead.contact,
        contact_point=lead.contact.points.get(),
        direction="in",
        channel="sms",
        status="received",
        body="Hello?",
    )
    reply = send(lead, key="b", now=None, automated=False)
    assert (reply.status, reply.block_reason) in (("dry_run", ""), ("deferred", "quiet_hours"))


def test_consent_older_than_the_business_allows_is_no_permission_for_automation(business):
    lead = consenting_lead(business)
    much_later = NOON_NY + timedelta(days=business.consent_max_age_days + 1)
    assert send(lead, key="a", now=much_later).block_reason == "no_consent"
    assert send(lead, key="b", now=much_later, automated=False).status == "dry_run"


def test_a_text_at_night_is_deferred_to_the_recipients_morning_and_then_sent(business):
    lead = consenting_lead(business)
    night = datetime(2026, 12, 2, 4, 40, tzinfo=UTC)  # 23:40 in New York
    message = send(lead, now=night)
    assert message.status == "deferred" and message.deferred_until == datetime(2026, 12, 2, 13, 0, tzinfo=UTC)
    timer = Timer.objects.get(kind="outbound.regate")
    assert timer.due_at == message.deferred_until
    assert timers_run_due(now=night + timedelta(hours=1)).claimed == 0
    timers_run_due(now=message.deferred_until)
    message.refresh_from_db()
    assert message.status == "dry_run"


def test_florida_recipients_get_the_stricter_evening_window(business):
    evening = datetime(2026, 12, 2, 1, 30, tzinfo=UTC)  # 20:30 in New York and Miami
    assert send(consenting_lead(business, phone=FL_PHONE), key="fl", now=evening).status == "deferred"
    assert send(consenting_lead(business, phone="+12125550148"), key="ny", now=evening).status == "dry_run"


def test_a_business_can_add_a_stricter_state_window(business):
    business.quiet_hours_by_state = {"NY": "09:00-17:00"}
    business.save()
    late_afternoon = datetime(2026, 12, 1, 22, 30, tzinfo=UTC)  # 17:30 in New York
    assert send(consenting_lead(business), now=late_afternoon).status == "deferred"


def test_the_daily_cap_blocks_automated_texts_past_the_limit(business):
    lead = consenting_lead(business)
    statuses = [send(lead, key=f"k{i}").status for i in range(business.max_texts_per_day + 1)]
    assert statuses[:-1] == ["dry_run"] * business.max_texts_per_day
    assert Message.objects.get(idempotency_key=f"k{business.max_texts_per_day}").block_reason == "daily_cap"


def test_projected_sends_count_against_the_daily_cap_as_sent_ones_do(business):
    business.max_texts_per_day = 3
    assert not daily_cap_reached(business, sent=2)
    assert daily_cap_reached(business, sent=3)
    assert not daily_cap_reached(business, sent=1, projected=1)
    assert daily_cap_reached(business, sent=1, projected=2)
    assert daily_cap_reached(business, sent=0, projected=3)


def test_a_second_automated_path_is_blocked_while_one_is_active(business):
    lead = consenting_lead(business)
    sequence = Sequence.objects.create(business=business, key="no-reply", trigger="no_reply", steps=[])
    enrollment = Enrollment.objects.create(business=business, lead=lead, contact=lead.contact, sequence=sequence)
    assert send(lead, key="other").block_reason == "other_path_active"
    assert send(lead, key="mine", enrollment=enrollment).status == "dry_run"


def test_a_draft_that_needs_a_person_waits_for_approval(business):
    lead = consenting_lead(business)
    message = send(lead, needs_approval=True)
    assert message.status == "pending_approval"
    approval = ApprovalRequest.objects.get(kind="message_draft")
    assert approval.payload == {"message": message.public_id, "body": message.body}


def test_every_verdict_writes_a_receipt(business):
    lead = consenting_lead(business)
    lead_sync.lead_set_hold(lead, True, actor="mia", reason="wait")
    message = send(lead)
    receipt = Receipt.objects.get(subject=message.public_id)
    assert (receipt.action, receipt.reason, receipt.actor) == ("message.blocked", "hold", "agent:send_gate")
