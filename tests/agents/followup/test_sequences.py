"""The sequence engine: whole paths by time travel, the shared exits, one path
per person at a time, and the dry-run preview against what then happens."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from agents.followup.no_reply import no_reply_start
from agents.followup.sequences.engine import (
    STEP_TIMER,
    enrollment_resume_after_hold,
    enrollment_start,
    enrollments_stop,
    step_run,
)
from agents.followup.sequences.preview import sequence_preview
from agents.followup.sequences.steps import Step, step_due
from crm.models import Enrollment, Lead, Message, Receipt, Sequence, Stage, Task, Timer
from crm.services import lead_sync
from crm.services.records import contact_create, lead_open
from tests.helpers.followup import NOON_NY, make_lead, run_at

pytestmark = pytest.mark.django_db

T1 = NOON_NY + timedelta(minutes=15)  # the nudge text
T2 = T1 + timedelta(days=1)  # the call task
T3 = T2 + timedelta(days=2)  # the details email
T4 = T3 + timedelta(days=4)  # the voice call
T_END = T4 + timedelta(days=1)  # the last step had a day to be answered


def outbound(lead: Lead) -> list[tuple[str, str]]:
    return list(lead.messages.filter(direction="out").order_by("created_at", "pk").values_list("channel", "status"))


def test_a_whole_no_reply_path_runs_step_by_step_and_ends_unresponsive(lead: Lead) -> None:
    enrollment = no_reply_start(lead, now=NOON_NY)
    assert enrollment is not None and enrollment.status == "active"
    assert enrollment.next_step_due_at == T1

    assert run_at(T1 - timedelta(minutes=1)).claimed == 0  # nothing runs early
    run_at(T1)
    assert outbound(lead) == [("sms", "dry_run")]
    sms = lead.messages.get(channel="sms")
    assert (
        sms.body
        == "Hi Pat, Sam from Acme Heating & Air here. Still need help with your request? Reply STOP to opt out."
    )
    assert (sms.enrollment_id, sms.automated, sms.idempotency_key) == (
        enrollment.pk,
        True,
        f"seq:{enrollment.public_id}:0",
    )

    run_at(T2)
    task = lead.tasks.get(kind="follow_up")
    assert (task.title, task.owner.user.username, task.due_at) == ("Call the lead", "sam", T2)

    run_at(T3)
    email = lead.messages.get(channel="email")
    assert (email.status, email.subject, email.to) == (
        "dry_run",
        "Your request with Acme Heating & Air",
        "pat@example.com",
    )
    assert "call us at +13125550100" in email.body

    run_at(T4)
    assert outbound(lead) == [("sms", "dry_run"), ("email", "dry_run"), ("voice", "dry_run")]
    enrollment.refresh_from_db()
    assert (enrollment.status, enrollment.next_step_index, enrollment.next_step_due_at) == ("active", 4, T_END)

    run_at(T_END)
    enrollment.refresh_from_db()
    lead.refresh_from_db()
    assert (enrollment.status, enrollment.stop_reason, enrollment.ended_at) == ("completed", "completed", T_END)
    assert lead.stage == Stage.UNRESPONSIVE
    actions = list(Receipt.objects.filter(subject=enrollment.public_id).order_by("id").values_list("action", "reason"))
    assert actions[0] == ("enrollment.started", "trigger no_reply")
    assert [a for a, _ in actions].count("enrollment.step_ran") == 4
    assert actions[-1] == ("enrollment.completed", "completed")
    assert Receipt.objects.filter(lead=lead, action="lead.stage_changed", actor="agent:no_reply_follow_up").exists()
    assert run_at(T_END + timedelta(days=30)).claimed == 0  # nothing left on the clock


def test_no_reply_path_does_not_start_when_the_person_already_replied(lead: Lead) -> None:
    Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        direction="out",
        channel="sms",
        status="dry_run",
        idempotency_key="ack:x",
        body="ack",
    )
    Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        direction="in",
        channel="sms",
        status="received",
        body="yes please call",
    )
    assert no_reply_start(lead, now=NOON_NY) is None
    assert not Enrollment.objects.exists()


def test_a_path_starts_once_and_not_for_closed_held_or_pathless_leads(lead: Lead, business, owner) -> None:
    first = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    assert enrollment_start(lead, "no_reply", actor="test", now=NOON_NY) == first
    assert Timer.objects.filter(kind=STEP_TIMER).count() == 1
    assert enrollment_start(lead, "appointment", actor="test", now=NOON_NY) is None  # no such path
    held = make_lead(business, owner, phone="+12125550148", email="held@example.com")
    lead_sync.lead_set_hold(held, True, actor="test", reason="asked to wait")
    assert enrollment_start(held, "no_reply", actor="test", now=NOON_NY) is None
    lost = make_lead(business, owner, phone="+12125550149", email="lost@example.com")
    lead_sync.lead_transition(lost, Stage.LOST, actor="test", reason="gone")
    assert enrollment_start(lost, "no_reply", actor="test", now=NOON_NY) is None


# --- every exit ends every path --------------------------------------------------------------


def _second_lead_of_same_person(lead: Lead) -> Lead:
    """Another need of the same person, on its own path, waiting behind the first."""
    from tests.factories import ServiceLineFactory

    line = ServiceLineFactory.create(business=lead.business, slug="plumbing", name="Plumbing")
    other = lead_open(contact=lead.contact, actor="test", service_line=line, touch={"channel": "form"})
    assert lead.owner is not None
    lead_sync.lead_assign(other, lead.owner, actor="test", reason="test owner")
    return other


def _reply(lead: Lead) -> None:
    from agents.followup.replies import reply_record

    reply_record(lead, channel="email", body="Sorry, been busy. Tuesday works.", actor="sam", now=T1)


def _opt_out(lead: Lead) -> None:
    from agents.followup.replies import reply_log
    from agents.outbound.keyword_replies import inbound_text_apply

    message = Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        direction="in",
        channel="sms",
        status="received",
        body="STOP",
        contact_point=lead.contact.points.get(kind="phone"),
    )
    reading = inbound_text_apply(message=message, lead=lead)
    reply_log(message, lead=lead, reading=reading.kind, now=T1)


def _complaint(lead: Lead) -> None:
    from agents.followup.replies import reply_log
    from agents.outbound.keyword_replies import inbound_text_apply

    message = Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        direction="in",
        channel="sms",
        status="received",
        # A complaint that asks nothing to stop ("stop or I'll report you" is a
        # stop first: the opt_out exit).
        body="Your tech cracked my door frame, my lawyer will hear about this",
        contact_point=lead.contact.points.get(kind="phone"),
    )
    reading = inbound_text_apply(message=message, lead=lead)
    reply_log(message, lead=lead, reading=reading.kind, now=T1)


def _hold(lead: Lead) -> None:
    lead_sync.lead_set_hold(lead, True, actor="sam", reason="customer travelling")


def _to(*stages: str) -> Callable[[Lead], None]:
    def change(lead: Lead) -> None:
        for stage in stages:
            lead_sync.lead_transition(lead, stage, actor="sam", reason="test")

    return change


_stage = _to


def _booked(lead: Lead) -> None:
    lead_sync.lead_transition(lead, Stage.BOOKED, actor="sam", reason="booked by phone")


# (what happens, the reason every path of the lead ends with, whether it is the
# person's choice — then the other lead's path ends too — or this lead's).
EXITS = [
    ("reply", _reply, "reply", True),
    ("opt_out", _opt_out, "opt_out", True),
    ("complaint", _complaint, "complaint", True),
    ("hold", _hold, "hold", False),
    ("booking", _booked, "booking", False),
    ("won", _to(Stage.QUALIFIED, Stage.ESTIMATE_SENT, Stage.WON), "won", False),
    ("disqualified", _stage(Stage.DISQUALIFIED), "disqualified", False),
    ("stage_left", _stage(Stage.LOST), "stage_left", False),
    ("goal", _stage(Stage.QUALIFIED), "goal", False),
]


@pytest.mark.parametrize(("name", "cause", "reason", "whole_person"), EXITS, ids=[e[0] for e in EXITS])
def test_each_exit_ends_the_path_with_its_reason_and_nothing_more_is_sent(
    lead: Lead, name: str, cause, reason: str, whole_person: bool
) -> None:
    other = _second_lead_of_same_person(lead)
    first = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    waiting = enrollment_start(other, "no_reply", actor="test", now=NOON_NY)
    assert (first.status, waiting.status) == ("active", "waiting")
    cause(lead)

    run_at(T1)  # the exits the roles did not apply at once are found before the step runs
    first.refresh_from_db()
    waiting.refresh_from_db()
    assert (first.status, first.stop_reason) == ("completed" if reason == "goal" else "stopped", reason)
    assert first.ended_at is not None and first.next_step_due_at is None
    assert not lead.messages.filter(direction="out", enrollment=first).exists()
    assert Receipt.objects.filter(subject=first.public_id, action=f"enrollment.{first.status}", reason=reason).exists()
    assert not Timer.objects.filter(dedupe_key__startswith=f"seq:{first.public_id}:", status="pending").exists()
    if whole_person:
        assert (waiting.status, waiting.stop_reason) == ("stopped", reason)
    else:
        # The other need's path resumes: one path at a time, not none.
        assert waiting.status == "active"
    run_at(T_END + timedelta(days=10))
    assert not lead.messages.filter(direction="out", enrollment=first).exists()


def test_an_exit_blocks_the_paths_messages_that_have_not_gone_out(lead: Lead) -> None:
    # 20:50 in New York: the text is due at 21:05, inside quiet hours, so it waits for 08:00.
    late = datetime(2026, 12, 2, 1, 50, tzinfo=UTC)
    enrollment = enrollment_start(lead, "no_reply", actor="test", now=late)
    run_at(late + timedelta(minutes=15))
    deferred = lead.messages.get(direction="out")
    assert (deferred.status, deferred.deferred_until) == ("deferred", datetime(2026, 12, 2, 13, 0, tzinfo=UTC))

    enrollments_stop(lead=lead, reason="booking", actor="agent:calendar_booking", now=late + timedelta(hours=1))
    run_at(late + timedelta(days=1))  # the morning re-gate finds nothing to send
    deferred.refresh_from_db()
    assert (deferred.status, deferred.block_reason) == ("blocked", "stopped")
    assert Receipt.objects.filter(subject=deferred.public_id, action="message.blocked").exists()
    enrollment.refresh_from_db()
    assert enrollment.stop_reason == "booking"


# --- one path per person, by priority ---------------------------------------------------------


def test_a_better_path_replaces_the_running_one_which_waits_and_resumes_at_its_step(
    lead: Lead, playbook: dict[str, Sequence]
) -> None:
    no_reply = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    run_at(T1)  # the nudge text went out; the call task is next
    other = _second_lead_of_same_person(lead)
    _to(Stage.BOOKED, Stage.NO_SHOW)(other)  # the other need's visit was missed
    no_show = enrollment_start(other, "no_show", actor="test", now=T1 + timedelta(hours=1))
    no_reply.refresh_from_db()
    assert (no_show.status, no_reply.status, no_reply.next_step_index) == ("active", "waiting", 1)
    assert Enrollment.objects.filter(contact=lead.contact, status="active").count() == 1

    enrollments_stop(lead=other, reason="booking", actor="test", now=T1 + timedelta(hours=2))
    no_reply.refresh_from_db()
    assert no_reply.status == "active" and no_reply.next_step_index == 1
    assert no_reply.next_step_due_at == T1 + timedelta(hours=2, days=1)  # the step's own delay, from the resume
    run_at(no_reply.next_step_due_at)
    assert lead.tasks.filter(kind="follow_up", title="Call the lead").count() == 1
    assert lead.messages.filter(channel="sms", direction="out").count() == 1  # the first step did not run again
    assert Receipt.objects.filter(subject=no_reply.public_id, action="enrollment.resumed").exists()


def test_a_path_of_lower_priority_waits_behind_the_running_one(lead: Lead) -> None:
    other = _second_lead_of_same_person(lead)
    _to(Stage.BOOKED, Stage.NO_SHOW)(lead)
    no_show = enrollment_start(lead, "no_show", actor="test", now=NOON_NY)
    no_reply = enrollment_start(other, "no_reply", actor="test", now=NOON_NY)
    assert (no_show.status, no_reply.status) == ("active", "waiting")
    assert Timer.objects.filter(kind=STEP_TIMER, status="pending").count() == 1
    receipt = Receipt.objects.get(subject=no_reply.public_id, action="enrollment.waiting")
    assert "no_show" in receipt.reason


# --- hold and release -----------------------------------------------------------------------


def test_a_released_hold_resumes_the_path_at_the_step_it_reached(lead: Lead) -> None:
    from agents.followup.sequences.engine import hold_released_step, hold_set_step

    first = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    run_at(T1)
    lead_sync.lead_set_hold(lead, True, actor="sam", reason="customer travelling")
    assert hold_set_step(lead, {}) == "ended 1"
    first.refresh_from_db()
    assert first.stop_reason == "hold"
    assert enrollment_resume_after_hold(lead, actor="test", now=T2) is None  # still held
    lead_sync.lead_set_hold(lead, False, actor="sam", reason="back home")
    assert hold_released_step(lead, {}).startswith("resumed as enr_")
    again = Enrollment.objects.get(lead=lead, status="active")
    assert again.next_step_index == 1 and again.pk != first.pk


# --- at most once ----------------------------------------------------------------------------


def test_a_redelivered_or_stale_step_never_runs_twice(lead: Lead) -> None:
    enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    timer = Timer.objects.get(kind=STEP_TIMER)
    run_at(T1)
    assert step_run(enrollment.pk, 0, now=T1) == "skipped"  # a redelivered task
    # A run that died after its claim: the timer looks stale and is claimed again.
    Timer.objects.filter(pk=timer.pk).update(status="running", claimed_at=T1 - timedelta(hours=1))
    run_at(T1 + timedelta(minutes=1))
    assert lead.messages.filter(direction="out").count() == 1
    timer.refresh_from_db()
    assert timer.attempts == 2 and timer.status == "done"


# --- the clock -------------------------------------------------------------------------------


def test_business_clock_delays_count_only_open_hours_and_days(business) -> None:
    business.business_hours = {d: "08:00-17:00" for d in ("mon", "tue", "wed", "thu", "fri")}
    business.save()
    sequence = Sequence(business=business, key="x", trigger="no_reply")
    friday_4pm = datetime(2026, 12, 4, 22, 0, tzinfo=UTC)  # 16:00 in Chicago
    two_hours = Step(index=0, after="2h", channel="sms", clock="business")
    assert step_due(sequence, friday_4pm, two_hours) == datetime(2026, 12, 7, 15, 0, tzinfo=UTC)  # Monday 09:00
    one_day = Step(index=0, after="1d", channel="sms", clock="business")
    assert step_due(sequence, friday_4pm, one_day) == datetime(2026, 12, 7, 22, 0, tzinfo=UTC)  # Monday 16:00
    absolute = Step(index=0, after="2h", channel="sms")
    assert step_due(sequence, friday_4pm, absolute) == friday_4pm + timedelta(hours=2)


# --- the dry-run preview ------------------------------------------------------------------------


def test_the_preview_shows_what_then_happens(lead: Lead, playbook: dict[str, Sequence]) -> None:
    # Start at 20:50 in New York: the first text falls in quiet hours and waits.
    start = datetime(2026, 12, 2, 1, 50, tzinfo=UTC)
    preview = sequence_preview(lead, playbook["no_reply"], start)
    assert not Message.objects.exists() and not Enrollment.objects.exists()  # a preview writes nothing
    assert [(p.channel, p.verdict, p.reason) for p in preview] == [
        ("sms", "deferred", "quiet_hours"),
        ("task", "task", ""),
        ("email", "dry_run", ""),  # email keeps no quiet hours
        ("voice", "deferred", "quiet_hours"),
    ]
    assert preview[0].deferred_until == datetime(2026, 12, 2, 13, 0, tzinfo=UTC)  # 08:00 in New York

    enrollment_start(lead, "no_reply", actor="test", now=start)
    for item in preview:
        run_at(item.due_at)
        if item.deferred_until:
            run_at(item.deferred_until)
    happened = {m.channel: m for m in lead.messages.filter(direction="out")}
    for item in preview:
        if item.channel == "task":
            task = lead.tasks.get(kind="follow_up")
            assert (task.title, task.due_at, task.owner.user.username) == (item.body, item.due_at, item.owner)
            continue
        message = happened[item.channel]
        assert (message.body, message.subject, message.created_at) == (item.body, item.subject, item.due_at)
        final = "dry_run" if item.verdict == "deferred" else item.verdict  # re-gated in the morning
        assert message.status == final
        assert Receipt.objects.filter(subject=message.public_id, action=f"message.{item.verdict}").exists()


def test_the_preview_says_when_the_gate_would_block(lead: Lead, playbook: dict[str, Sequence]) -> None:
    from crm.services.consent import consent_record

    consent_record(
        contact_point=lead.contact.points.get(kind="phone"), channel="sms", granted=False, basis="keyword", actor="test"
    )
    preview = sequence_preview(lead, playbook["no_reply"], NOON_NY)
    assert (preview[0].verdict, preview[0].reason) == ("blocked", "revoked")
    # Without a text on the path, the call is not made: voice comes after SMS and email.
    assert preview[3].verdict == "skipped" and "text" in preview[3].reason


def test_the_preview_counts_its_earlier_sends_against_the_daily_cap(
    lead: Lead, business, playbook: dict[str, Sequence]
) -> None:
    business.max_texts_per_day = 1
    business.save()
    sequence = playbook["no_reply"]
    sequence.steps = [
        {"after": "15m", "channel": "sms", "template": "nudge_sms"},
        {"after": "1h", "channel": "sms", "template": "nudge_sms"},
    ]
    sequence.save()
    # Nothing is on record yet: only the first step's projected text fills the cap.
    preview = sequence_preview(lead, sequence, NOON_NY)
    assert [(p.verdict, p.reason) for p in preview] == [("dry_run", ""), ("blocked", "daily_cap")]

    enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    for item in preview:
        run_at(item.due_at)
    assert outbound(lead) == [("sms", "dry_run"), ("sms", "blocked")]
    assert lead.messages.get(status="blocked").block_reason == "daily_cap"


def test_a_step_without_an_approved_text_goes_to_a_person(lead: Lead, playbook: dict[str, Sequence]) -> None:
    from crm.models import MessageTemplate

    MessageTemplate.objects.filter(key="nudge_sms").update(approved=False)
    assert sequence_preview(lead, playbook["no_reply"], NOON_NY)[0].verdict == "task"
    enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    run_at(T1)
    assert not lead.messages.filter(direction="out").exists()
    task = Task.objects.get(lead=lead, kind="follow_up")
    assert "nudge_sms" in task.title and task.owner.user.username == "sam"


def test_enrollments_stop_needs_exactly_one_scope(lead: Lead) -> None:
    with pytest.raises(ValueError):
        enrollments_stop(reason="reply", actor="test")
    contact = contact_create(business=lead.business, actor="test", first_name="Nobody")
    assert enrollments_stop(contact=contact, reason="reply", actor="test") == 0


def test_a_lead_closed_from_its_next_actions_outcome_ends_its_path_at_once(lead: Lead) -> None:
    from crm.services.next_action import next_action_set, task_complete

    enrollment = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    task = next_action_set(lead, "Call Rosa back", NOON_NY + timedelta(hours=2), actor="sam", reason="test")

    task_complete(task, actor="sam", outcome="went elsewhere", terminal_stage=Stage.LOST, lost_reason="chose a rival")

    # At once, by the one close every role uses: not only when the next step finds the lead closed.
    enrollment.refresh_from_db()
    assert (enrollment.status, enrollment.stop_reason) == ("stopped", "stage_left")
    lead.refresh_from_db()
    assert (lead.stage, lead.lost_reason, lead.next_action) == (Stage.LOST, "chose a rival", "")
    closed = Receipt.objects.get(subject=lead.public_id, action="lead.stage_changed", after__stage=Stage.LOST)
    assert closed.after["lost_reason"] == "chose a rival" and closed.reason == "chose a rival"


def test_closing_cancels_the_other_open_next_actions_with_a_receipt_each(lead: Lead) -> None:
    # A lead closed by a visit's outcome, with its next action still open.
    task = lead_sync_next_action(lead)

    lead_sync.lead_close(lead, Stage.UNRESPONSIVE, actor="agent:no_show", reason="no answer after the no-show")

    task.refresh_from_db()
    assert (task.status, task.outcome) == ("canceled", "lead closed: unresponsive")
    assert Receipt.objects.filter(subject=task.public_id, action="task.canceled").count() == 1
    with pytest.raises(lead_sync.LeadSyncError, match="needs the reason"):
        lead_sync.lead_close(lead, Stage.LOST, actor="sam", reason="")


def lead_sync_next_action(lead: Lead) -> Task:
    from crm.services.next_action import next_action_set

    return next_action_set(lead, "Call back", NOON_NY + timedelta(hours=2), actor="sam", reason="test")


def test_a_plain_word_revocation_mid_sequence_stops_it_and_sends_only_the_confirmation(lead: Lead) -> None:
    from agents.followup.replies import reply_log
    from agents.outbound.keyword_replies import inbound_text_apply

    enrollment = no_reply_start(lead, now=NOON_NY)
    run_at(T1)
    assert outbound(lead) == [("sms", "dry_run")]  # the first nudge went out
    message = Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        direction="in",
        channel="sms",
        status="received",
        body="not interested, pls dont contact me again",  # no ledger keyword, no pattern needed
        contact_point=lead.contact.points.get(kind="phone"),
        created_at=T1 + timedelta(hours=1),
    )

    reading = inbound_text_apply(message=message, lead=lead)
    reply_log(message, lead=lead, reading=reading.kind, now=T1 + timedelta(hours=1))
    run_at(T_END + timedelta(days=10))

    enrollment.refresh_from_db()
    assert (enrollment.status, enrollment.stop_reason) == ("stopped", "opt_out")
    sent = list(lead.messages.filter(direction="out").order_by("created_at", "pk").values_list("body", flat=True))
    # The nudge, then the one confirmation: nothing of the path after it.
    assert len(sent) == 2 and sent[1].endswith("You won't get more texts from us. Reply START to resume.")
