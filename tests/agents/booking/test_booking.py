"""Calendar Booking: approved slots, the booking and what it sets off,
reminders, reschedule, cancel, and the next state after a held visit."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.core import mail

from agents.booking.services import (
    REMINDER_TIMER,
    AlreadyBooked,
    AppointmentClosed,
    BookingError,
    SlotFull,
    appointment_book,
    appointment_cancel,
    appointment_mark_held,
    appointment_next_state,
    appointment_reschedule,
)
from agents.booking.slots import NotASlot, slots_offer
from agents.followup.sequences.engine import enrollment_start
from agents.orchestrator import orchestrate_pending
from crm.models import (
    Appointment,
    Availability,
    Enrollment,
    Estimate,
    Lead,
    Message,
    MessageTemplate,
    Receipt,
    Role,
    Sequence,
    Stage,
    Task,
    Timer,
)
from crm.services.records import estimate_record
from crm.services.timers import timers_run_due
from tests.agents.notices import run_queued_notices
from tests.factories import member_create
from tests.helpers.booking import (
    MON_9_LABEL,
    NOW,
    TUE_9,
    TUE_9_LABEL,
    TUE_13,
    TUE_13_LABEL,
    local,
    owned_lead,
)

pytestmark = pytest.mark.django_db


def book(lead, rule, starts=TUE_9, actor="sam", now=NOW, **kw):
    return appointment_book(lead, availability=rule, starts_at=starts, actor=actor, now=now, **kw)


# --- slots ---------------------------------------------------------------------


def test_slots_are_the_rules_windows_in_the_business_zone_and_skip_what_has_started(lead, rule):
    slots = slots_offer(lead, now=NOW, days_ahead=1)
    # Monday 7th and Tuesday 8th; both windows each day, 09:00 and 13:00 Chicago = 15:00 and 19:00 UTC.
    assert [s.starts_at for s in slots] == [local(0, 9), local(0, 13), local(1, 9), local(1, 13)]
    assert slots[0].local_label(ZoneInfo("America/Chicago")) == MON_9_LABEL
    later = slots_offer(lead, now=NOW + timedelta(hours=2), days_ahead=1)
    assert local(0, 9) not in [s.starts_at for s in later]


def test_weekends_have_no_slots_and_a_full_slot_is_not_offered(lead, rule, shop, setter):
    saturday = NOW + timedelta(days=5)
    assert all(s.starts_at.weekday() < 5 for s in slots_offer(lead, now=saturday, days_ahead=2) if s)
    book(owned_lead(shop, setter, phone="+12125550148"), rule)
    offered = [s.starts_at for s in slots_offer(lead, now=NOW, days_ahead=1)]
    assert TUE_9 not in offered and TUE_13 in offered
    full = next(s for s in slots_offer(lead, now=NOW, days_ahead=1, include_full=True) if s.starts_at == TUE_9)
    assert (full.taken, full.remaining) == (1, 0)


def test_a_rule_for_a_service_line_serves_only_leads_of_that_line(lead, rule, shop):
    from tests.factories import ServiceLineFactory

    plumbing = ServiceLineFactory.create(business=shop, slug="plumbing")
    rule.service_lines.add(plumbing)
    assert slots_offer(lead, now=NOW) == []
    Lead.objects.filter(pk=lead.pk).update(service_line=plumbing)
    lead.refresh_from_db()
    assert slots_offer(lead, now=NOW)


def test_a_technician_out_of_office_takes_their_slots_with_them(lead, rule, tech):
    tech.out_of_office_until = TUE_9 + timedelta(hours=1)
    tech.save()
    offered = [s.starts_at for s in slots_offer(lead, now=NOW, days_ahead=1)]
    assert TUE_9 not in offered and TUE_13 in offered


def test_slots_cost_a_fixed_number_of_queries_however_many_rules_and_days(
    lead, rule, shop, tech, django_assert_num_queries
):
    # The business, the rules, their members, the members' users, their lines, the counts,
    # the members' calendar busy blocks.
    fresh = Lead.objects.get(pk=lead.pk)
    with django_assert_num_queries(7):
        assert len(slots_offer(fresh, now=NOW, days_ahead=14)) == 22
    second = Availability.objects.create(business=shop, days=["sat"], slots=["10:00-12:00"], capacity=2)
    second.members.add(tech, member_create(shop, Role.TECHNICIAN, username="ted"))
    fresh = Lead.objects.get(pk=lead.pk)
    with django_assert_num_queries(7):
        # 21 weekdays with two windows each, and 4 Saturdays with one, in four weeks.
        assert len(slots_offer(fresh, now=NOW, days_ahead=28)) == 21 * 2 + 4


# --- booking ----------------------------------------------------------------------


def test_booking_books_the_lead_confirms_through_the_gate_and_schedules_two_reminders(lead, rule, tech, templates):
    booked = book(lead, rule)
    appointment = booked.appointment
    lead.refresh_from_db()

    assert (appointment.status, appointment.starts_at, appointment.assigned_to) == ("scheduled", TUE_9, tech)
    assert appointment.ends_at == TUE_9 + timedelta(hours=2) and appointment.availability == rule
    assert lead.stage == Stage.BOOKED
    assert lead.next_action == f"Visit {TUE_9_LABEL} with Tom Technician"
    assert lead.next_action_due_at == TUE_9
    task = Task.objects.get(lead=lead, kind="next_action", status="open")
    assert (task.title, task.owner.user.username) == (lead.next_action, "sam")

    confirmation = booked.confirmation
    assert confirmation.status == Message.Status.DRY_RUN
    assert confirmation.body == (f"Hi Rosa, Acme Heating & Air has you booked {TUE_9_LABEL}. Reply STOP to opt out.")
    assert (confirmation.actor, confirmation.automated, confirmation.to) == ("sam", False, "+12125550147")

    reminders = Timer.objects.filter(kind=REMINDER_TIMER).order_by("due_at")
    assert [(t.due_at, t.dedupe_key, t.status) for t in reminders] == [
        (TUE_9 - timedelta(hours=24), f"{REMINDER_TIMER}:{appointment.public_id}:24h", "pending"),
        (TUE_9 - timedelta(hours=2), f"{REMINDER_TIMER}:{appointment.public_id}:2h", "pending"),
    ]
    assert "Technician brief" in appointment.brief and lead.public_id in appointment.brief
    assert Receipt.objects.filter(subject=appointment.public_id, action="appointment.booked").exists()
    assert (
        Receipt.objects.get(subject=lead.public_id, action="lead.stage_changed", after__stage="booked").actor == "sam"
    )


def test_the_booking_event_emails_the_brief_to_the_technician_once(
    lead, rule, templates, mailoutbox, django_capture_on_commit_callbacks
):
    appointment = book(lead, rule).appointment
    with django_capture_on_commit_callbacks(execute=True):
        assert orchestrate_pending() == 1
    assert mailoutbox == []  # handed to a task of its own, not sent inside the step
    assert run_queued_notices() == 1
    assert [m.to for m in mailoutbox] == [["tom@example.com"]]
    assert mailoutbox[0].body == Appointment.objects.get(pk=appointment.pk).brief
    # The event is recorded once per appointment: recording it again runs nothing twice.
    from agents.events import lead_event

    with django_capture_on_commit_callbacks(execute=True):
        lead_event(lead, "booking", key=appointment.public_id, data={"appointment": appointment.public_id})
        assert orchestrate_pending() == 0
    from agents.booking.technician_brief import brief_email

    assert brief_email(appointment) == "already emailed"
    assert run_queued_notices() == 0
    assert len(mail.outbox) == 1


def test_booking_stops_the_nurture_path(lead, rule, shop, templates):
    MessageTemplate.objects.create(business=shop, key="nudge_sms", channel="sms", approved=True, body="Still there?")
    Sequence.objects.create(
        business=shop,
        key="no_reply",
        trigger="no_reply",
        steps=[{"after": "15m", "channel": "sms", "template": "nudge_sms"}],
    )
    enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOW)
    assert enrollment is not None and enrollment.status == Enrollment.Status.ACTIVE

    book(lead, rule)

    enrollment.refresh_from_db()
    assert (enrollment.status, enrollment.stop_reason) == ("stopped", "booking")


def test_without_an_approved_confirmation_text_a_person_confirms(lead, rule):
    booked = book(lead, rule)
    assert booked.confirmation is None and not Message.objects.exists()
    task = Task.objects.get(kind="follow_up")
    assert task.title == f"Confirm the visit {TUE_9_LABEL} with Rosa Diaz yourself"
    assert task.owner.user.username == "sam"


def test_a_blocked_confirmation_leaves_a_task_for_a_person(shop, setter, rule, templates):
    lead = owned_lead(shop, setter, phone="+12125550149")
    lead.contact.points.update(is_valid=True)
    from crm.services.consent import consent_record

    consent_record(contact_point=lead.contact.points.get(), channel="sms", granted=False, basis="keyword", actor="t")
    booked = book(lead, rule)
    assert (booked.confirmation.status, booked.confirmation.block_reason) == ("blocked", "revoked")
    assert Task.objects.filter(kind="follow_up", title__startswith="Confirm the visit").exists()


def test_a_time_between_slots_is_refused_and_nothing_is_written(lead, rule):
    with pytest.raises(NotASlot, match="10:00 is not the start of a slot"):
        book(lead, rule, starts=TUE_9 + timedelta(hours=1))
    with pytest.raises(NotASlot, match="no slots on sat"):
        book(lead, rule, starts=TUE_9 + timedelta(days=4))
    with pytest.raises(NotASlot, match="already started"):
        book(lead, rule, starts=TUE_9, now=TUE_9 + timedelta(minutes=1))
    lead.refresh_from_db()
    assert lead.stage == Stage.ASSIGNED and not Appointment.objects.exists()


def test_the_last_place_goes_to_one_lead_and_the_next_is_told(lead, rule, shop, setter):
    book(lead, rule)
    other = owned_lead(shop, setter, phone="+12125550148")
    with pytest.raises(SlotFull, match=re.escape(f"{TUE_9_LABEL} is full (1 of 1 booked)")):
        book(other, rule)
    other.refresh_from_db()
    assert other.stage == Stage.ASSIGNED and Appointment.objects.count() == 1


def test_a_lead_with_a_scheduled_visit_is_rescheduled_not_booked_twice(lead, rule):
    book(lead, rule)
    with pytest.raises(AlreadyBooked, match="reschedule it"):
        book(lead, rule, starts=TUE_13)


def test_a_won_lead_cannot_be_booked(lead, rule):
    from crm.services import lead_sync

    for stage in (Stage.QUALIFIED, Stage.ESTIMATE_SENT, Stage.WON):
        lead_sync.lead_transition(lead, stage, actor="sam", reason="test")
    with pytest.raises(BookingError, match="won"):
        book(lead, rule)


def test_a_new_unowned_lead_is_booked_by_way_of_engaged(shop, rule, templates):
    from tests.factories import lead_create

    lead = lead_create(shop, phone="+12125550150")
    book(lead, rule)
    moves = list(
        Receipt.objects.filter(subject=lead.public_id, action="lead.stage_changed").values_list(
            "after__stage", flat=True
        )
    )
    assert moves == ["engaged", "booked"]


# --- reminders -------------------------------------------------------------------------


def test_reminders_go_out_through_the_gate_when_due_and_once(lead, rule, templates):
    appointment = book(lead, rule).appointment
    run = timers_run_due(now=TUE_9 - timedelta(hours=24), kinds=[REMINDER_TIMER])
    assert (run.claimed, run.done) == (1, 1)
    reminder = Message.objects.get(idempotency_key=f"appointment.reminder:{appointment.public_id}:24h")
    assert reminder.status == "dry_run" and reminder.automated
    assert reminder.body == f"Reminder: Acme Heating & Air will see you {TUE_9_LABEL}. Reply STOP to opt out."
    assert timers_run_due(now=TUE_9 - timedelta(hours=24), kinds=[REMINDER_TIMER]).claimed == 0
    timers_run_due(now=TUE_9 - timedelta(hours=2), kinds=[REMINDER_TIMER])
    assert Message.objects.filter(idempotency_key__startswith="appointment.reminder:").count() == 2


def test_a_reminder_for_a_visit_canceled_after_it_was_claimed_sends_nothing(lead, rule, templates):
    from agents.booking.services import reminder_send

    appointment = book(lead, rule).appointment
    timer = Timer.objects.get(dedupe_key__endswith=":24h")
    appointment_cancel(appointment, actor="sam", reason="customer called", now=NOW)
    assert reminder_send(timer) == "skipped: the appointment no longer holds its place"
    assert not Message.objects.filter(idempotency_key__startswith="appointment.reminder:").exists()


def test_a_booking_less_than_a_day_ahead_gets_only_the_two_hour_reminder(lead, rule, templates):
    appointment = book(lead, rule, now=TUE_9 - timedelta(hours=5)).appointment
    assert list(Timer.objects.filter(kind=REMINDER_TIMER).values_list("dedupe_key", flat=True)) == [
        f"{REMINDER_TIMER}:{appointment.public_id}:2h"
    ]


# --- reschedule and cancel ------------------------------------------------------------------


def test_reschedule_moves_the_visit_and_its_reminders_and_keeps_the_lead_booked(lead, rule, templates):
    old = book(lead, rule).appointment
    moved = appointment_reschedule(old, availability=rule, starts_at=TUE_13, actor="sam", now=NOW)
    new = moved.appointment
    old.refresh_from_db()
    lead.refresh_from_db()

    assert (old.status, new.status, new.rescheduled_from) == ("canceled", "scheduled", old)
    assert new.starts_at == TUE_13 and lead.stage == Stage.BOOKED
    timers = dict(Timer.objects.filter(kind=REMINDER_TIMER).values_list("dedupe_key", "status"))
    assert timers == {
        f"{REMINDER_TIMER}:{old.public_id}:24h": "canceled",
        f"{REMINDER_TIMER}:{old.public_id}:2h": "canceled",
        f"{REMINDER_TIMER}:{new.public_id}:24h": "pending",
        f"{REMINDER_TIMER}:{new.public_id}:2h": "pending",
    }
    assert moved.confirmation.status == "dry_run" and "between 1:00 PM and 3:00 PM" in moved.confirmation.body
    assert lead.next_action.startswith(f"Visit {TUE_13_LABEL}")
    assert Receipt.objects.get(subject=old.public_id, action="appointment.rescheduled").after["rescheduled_to"] == (
        new.public_id
    )


def test_reschedule_into_a_full_slot_changes_nothing(lead, rule, shop, setter):
    old = book(lead, rule).appointment
    book(owned_lead(shop, setter, phone="+12125550148"), rule, starts=TUE_13)
    with pytest.raises(SlotFull):
        appointment_reschedule(old, availability=rule, starts_at=TUE_13, actor="sam", now=NOW)
    old.refresh_from_db()
    assert old.status == "scheduled" and Timer.objects.filter(status="pending", kind=REMINDER_TIMER).count() == 4


def test_cancel_frees_the_place_cancels_reminders_and_gives_the_owner_a_rebooking_task(
    lead, rule, templates, mailoutbox, django_capture_on_commit_callbacks
):
    appointment = book(lead, rule).appointment
    appointment_cancel(appointment, actor="sam", reason="customer is travelling", now=NOW)
    lead.refresh_from_db()
    assert lead.stage == Stage.QUALIFIED
    assert set(Timer.objects.filter(kind=REMINDER_TIMER).values_list("status", flat=True)) == {"canceled"}
    assert any(s.starts_at == TUE_9 for s in slots_offer(lead, now=NOW, days_ahead=1))

    with django_capture_on_commit_callbacks(execute=True):
        orchestrate_pending()
    task = Task.objects.get(lead=lead, kind="next_action", status="open")
    assert task.title == f"Rebook Rosa Diaz: the visit {TUE_9_LABEL} was canceled"
    assert task.owner.user.username == "sam"
    run_queued_notices()
    assert ["tom@example.com"] in [m.to for m in mailoutbox]
    with pytest.raises(AppointmentClosed):
        appointment_cancel(appointment, actor="sam", reason="again", now=NOW)


# --- held, and the next state ---------------------------------------------------------------


def test_a_held_visit_gives_the_owner_a_next_state_decision_with_a_due_time(lead, rule, templates):
    appointment = book(lead, rule).appointment
    with pytest.raises(BookingError, match="has not started yet"):
        appointment_mark_held(appointment, actor="tom", now=NOW)
    appointment_mark_held(appointment, actor="tom", now=TUE_9 + timedelta(hours=2))
    lead.refresh_from_db()
    assert lead.stage == Stage.APPOINTMENT_HELD
    orchestrate_pending()
    task = Task.objects.get(lead=lead, kind="next_action", status="open")
    assert task.title.startswith("After the visit: send the estimate, mark won, close as lost")
    assert task.owner.user.username == "sam" and task.due_at > appointment.ends_at
    lead.refresh_from_db()
    assert (lead.next_action, lead.next_action_due_at) == (task.title, task.due_at)


def test_a_held_visit_on_a_lead_without_an_owner_stops_for_the_manager(shop, rule, manager, templates):
    from tests.factories import lead_create

    lead = lead_create(shop, phone="+12125550150")
    appointment = book(lead, rule).appointment
    appointment_mark_held(appointment, actor="tom", now=TUE_9 + timedelta(hours=2))
    orchestrate_pending()
    task = Task.objects.get(lead=lead, kind="exception")
    assert task.title == "Give this lead an owner to decide what follows the visit"
    assert task.owner == manager


@pytest.mark.parametrize(
    ("state", "kw", "stage"),
    [("won", {}, "won"), ("lost", {"reason": "chose a cheaper quote"}, "lost")],
)
def test_after_the_visit_the_lead_can_be_closed(lead, rule, state, kw, stage):
    appointment = book(lead, rule).appointment
    appointment_mark_held(appointment, actor="tom", now=TUE_9 + timedelta(hours=2))
    appointment_next_state(lead, state, actor="sam", **kw)
    lead.refresh_from_db()
    assert lead.stage == stage and lead.next_action == ""
    assert not Task.objects.filter(lead=lead, kind="next_action", status="open").exists()
    if state == "lost":
        assert lead.lost_reason == "chose a cheaper quote"


def test_after_the_visit_a_lost_lead_needs_its_reason_and_an_estimate_must_exist(lead, rule):
    appointment = book(lead, rule).appointment
    appointment_mark_held(appointment, actor="tom", now=TUE_9 + timedelta(hours=2))
    with pytest.raises(BookingError, match="needs the reason"):
        appointment_next_state(lead, "lost", actor="sam")
    with pytest.raises(BookingError, match="no estimate has been sent"):
        appointment_next_state(lead, "estimate_sent", actor="sam")
    estimate_record(lead=lead, amount=Decimal("1200.00"), currency="USD", actor="sam", status=Estimate.Status.SENT)
    appointment_next_state(lead, "estimate_sent", actor="sam")
    lead.refresh_from_db()
    assert lead.stage == Stage.ESTIMATE_SENT


def test_after_the_visit_a_dated_follow_up_is_the_next_action(lead, rule, shop):
    appointment = book(lead, rule).appointment
    appointment_mark_held(appointment, actor="tom", now=TUE_9 + timedelta(hours=2))
    when = TUE_9 + timedelta(days=14)
    with pytest.raises(BookingError, match="date in the future"):
        appointment_next_state(lead, "follow_up", actor="sam", follow_up_at=TUE_9, now=TUE_9 + timedelta(hours=3))
    appointment_next_state(
        lead,
        "follow_up",
        actor="sam",
        follow_up_at=when,
        follow_up_title="Call back after their budget meeting",
        now=TUE_9 + timedelta(hours=3),
    )
    lead.refresh_from_db()
    assert (lead.stage, lead.next_action, lead.next_action_due_at) == (
        Stage.APPOINTMENT_HELD,
        "Call back after their budget meeting",
        when,
    )


def test_a_named_technician_must_work_the_slot(lead, rule, shop):
    other = member_create(shop, Role.TECHNICIAN, username="ted")
    with pytest.raises(NotASlot, match="does not work this slot"):
        book(lead, rule, assigned_to=other)
