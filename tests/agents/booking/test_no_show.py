"""No-Show Recovery: marked, the owner told, a rebooking offered through the
gate (or the business's no_show path), an outreach task, and a defined end."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.booking.no_show import REBOOK_WAIT, no_show_record, no_show_stats
from agents.booking.services import (
    NO_SHOW_DEADLINE_TIMER,
    REMINDER_TIMER,
    AppointmentClosed,
    appointment_book,
    appointment_cancel,
    appointment_mark_held,
)
from agents.orchestrator import orchestrate_pending
from crm.models import Enrollment, Message, MessageTemplate, Receipt, Sequence, Stage, Task, Timer
from crm.services.timers import timers_run_due
from tests.agents.notices import run_queued_notices
from tests.helpers.booking import NOW, TUE_9, TUE_9_LABEL, TUE_13, owned_lead

pytestmark = pytest.mark.django_db

AFTER = TUE_9 + timedelta(hours=3)


def booked(lead, rule, starts=TUE_9, now=NOW):
    return appointment_book(lead, availability=rule, starts_at=starts, actor="sam", now=now).appointment


def recover(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return orchestrate_pending()


def test_a_no_show_is_marked_and_the_lead_moves_to_no_show(lead, rule, templates):
    appointment = booked(lead, rule)
    with pytest.raises(Exception, match="has not started yet"):
        no_show_record(appointment, actor="tom", now=NOW)
    no_show_record(appointment, actor="tom", now=AFTER)
    appointment.refresh_from_db()
    lead.refresh_from_db()
    assert (appointment.status, appointment.outcome_at, lead.stage) == ("no_show", AFTER, Stage.NO_SHOW)
    assert set(Timer.objects.filter(kind=REMINDER_TIMER).values_list("status", flat=True)) == {"canceled"}
    assert Receipt.objects.filter(subject=appointment.public_id, action="appointment.no_show").count() == 1
    # Marking it again (a Calendly redelivery, a double click) changes nothing.
    no_show_record(appointment, actor="tom", now=AFTER)
    assert Receipt.objects.filter(subject=appointment.public_id, action="appointment.no_show").count() == 1


def test_recovery_tells_the_owner_offers_a_rebooking_and_creates_the_outreach_task(
    lead, rule, templates, mailoutbox, django_capture_on_commit_callbacks
):
    appointment = booked(lead, rule)
    orchestrate_pending()  # the booking's own step
    no_show_record(appointment, actor="tom", now=AFTER)

    assert recover(django_capture_on_commit_callbacks) == 1

    offer = Message.objects.get(idempotency_key=f"no_show.rebook:{appointment.public_id}")
    assert offer.status == "dry_run" and offer.body.startswith("Hi Rosa, we missed you today.")
    task = Task.objects.get(lead=lead, kind="next_action", status="open")
    assert task.title == f"Call Rosa Diaz to rebook the missed visit ({TUE_9_LABEL})"
    assert task.owner.user.username == "sam"
    run_queued_notices()
    notice = next(m for m in mailoutbox if m.subject == "No-show")
    assert notice.to == ["sam@example.com"] and appointment.public_id in notice.body
    deadline = Timer.objects.get(kind=NO_SHOW_DEADLINE_TIMER)
    assert deadline.status == "pending" and deadline.dedupe_key == f"{NO_SHOW_DEADLINE_TIMER}:{appointment.public_id}"


def test_with_a_no_show_sequence_the_rebooking_offer_is_that_path(lead, rule, shop, templates):
    Sequence.objects.create(
        business=shop,
        key="no_show",
        trigger="no_show",
        steps=[
            {"after": "30m", "channel": "sms", "template": "no_show_sms"},
            {"after": "1d", "channel": "task", "title": "Call to rebook the visit"},
        ],
    )
    appointment = booked(lead, rule)
    no_show_record(appointment, actor="tom", now=AFTER)
    orchestrate_pending()

    enrollment = Enrollment.objects.get(lead=lead)
    assert (enrollment.sequence.key, enrollment.status) == ("no_show", "active")
    # One automated path per person: no separate rebooking text beside the path.
    assert not Message.objects.filter(idempotency_key__startswith="no_show.rebook:").exists()


def test_rebooking_moves_the_lead_back_to_booked_and_cancels_the_deadline(lead, rule, shop, templates):
    Sequence.objects.create(
        business=shop,
        key="no_show",
        trigger="no_show",
        steps=[{"after": "30m", "channel": "sms", "template": "no_show_sms"}],
    )
    appointment = booked(lead, rule)
    no_show_record(appointment, actor="tom", now=AFTER)
    orchestrate_pending()

    again = appointment_book(
        lead, availability=rule, starts_at=TUE_13 + timedelta(days=1), actor="sam", now=AFTER
    ).appointment

    lead.refresh_from_db()
    assert lead.stage == Stage.BOOKED and again.status == "scheduled"
    assert Timer.objects.get(kind=NO_SHOW_DEADLINE_TIMER).status == "canceled"
    enrollment = Enrollment.objects.get(lead=lead)
    assert (enrollment.status, enrollment.stop_reason) == ("stopped", "booking")
    # The deadline, were it to run anyway, leaves a rebooked lead alone.
    from agents.booking.no_show import no_show_deadline

    assert no_show_deadline(appointment) == "skipped: the lead is booked"


def test_no_answer_by_the_deadline_ends_unresponsive(lead, rule, templates):
    appointment = booked(lead, rule)
    no_show_record(appointment, actor="tom", now=AFTER)
    orchestrate_pending()

    run = timers_run_due(now=timezone.now() + REBOOK_WAIT + timedelta(minutes=1), kinds=[NO_SHOW_DEADLINE_TIMER])

    assert (run.claimed, run.done) == (1, 1)
    lead.refresh_from_db()
    assert (lead.stage, lead.next_action) == (Stage.UNRESPONSIVE, "")
    assert not Task.objects.filter(lead=lead, kind="next_action", status="open").exists()
    receipt = Receipt.objects.get(subject=lead.public_id, action="lead.stage_changed", after__stage="unresponsive")
    assert receipt.actor == "agent:no_show_recovery" and "no answer and no rebooking within 7 days" in receipt.reason


def test_an_answer_without_a_rebooking_ends_lost_with_the_reason(lead, rule, templates):
    appointment = booked(lead, rule)
    no_show_record(appointment, actor="tom", now=AFTER)
    orchestrate_pending()
    Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        direction="in",
        channel="sms",
        status="received",
        body="Sorry, something came up. I'll get back to you.",
        created_at=AFTER + timedelta(hours=1),
    )

    timers_run_due(now=timezone.now() + REBOOK_WAIT + timedelta(minutes=1), kinds=[NO_SHOW_DEADLINE_TIMER])

    lead.refresh_from_db()
    assert lead.stage == Stage.LOST
    assert lead.lost_reason == f"no-show {appointment.public_id}: answered but did not rebook within 7 days"


def test_a_lead_on_hold_is_not_closed_by_the_deadline(lead, rule, templates):
    from agents.booking.no_show import no_show_deadline
    from crm.services import lead_sync

    appointment = booked(lead, rule)
    no_show_record(appointment, actor="tom", now=AFTER)
    lead_sync.lead_set_hold(lead, True, actor="mia", reason="customer in hospital")
    assert no_show_deadline(appointment) == "skipped: on hold"
    lead.refresh_from_db()
    assert lead.stage == Stage.NO_SHOW


def test_only_a_scheduled_visit_can_be_a_no_show(lead, rule, templates):
    appointment = booked(lead, rule)
    appointment_mark_held(appointment, actor="tom", now=AFTER)
    with pytest.raises(AppointmentClosed):
        no_show_record(appointment, actor="tom", now=AFTER)


def test_no_shows_are_counted_apart_with_what_became_of_them(shop, setter, rule, templates):
    MessageTemplate.objects.filter(key="no_show_sms").delete()  # the outreach task alone carries the offer
    first, second, third = (owned_lead(shop, setter, phone=f"+1212555016{i}") for i in range(3))
    rebooked = booked(first, rule)
    no_show_record(rebooked, actor="tom", now=AFTER)
    appointment_book(first, availability=rule, starts_at=TUE_9 + timedelta(days=1), actor="sam", now=AFTER)
    gone = booked(second, rule, starts=TUE_13)
    no_show_record(gone, actor="tom", now=TUE_13 + timedelta(hours=3))
    canceled = booked(third, rule, starts=TUE_9 + timedelta(days=2))
    appointment_cancel(canceled, actor="sam", reason="moved away", now=NOW)
    orchestrate_pending()
    timers_run_due(now=timezone.now() + REBOOK_WAIT + timedelta(minutes=1), kinds=[NO_SHOW_DEADLINE_TIMER])

    stats = no_show_stats(shop)

    assert (stats.no_shows, stats.rebooked, stats.waiting, stats.unresponsive, stats.lost) == (2, 1, 0, 1, 0)
    assert stats.held_after_rebooking == 0
