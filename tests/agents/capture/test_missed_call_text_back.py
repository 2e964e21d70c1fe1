"""Missed-call text-back, bounded: however many times a person calls and
nobody answers, they get at most one automated text per window, only where
they may lawfully be texted, and the owner gets one next action, the call
back, that counts their calls. Driven through the real, signed webhooks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from agents.capture.missed_call import call_status_record, status_update_from, text_back_key, text_back_window_start
from agents.capture.processing import event_process
from agents.orchestrator import orchestrate_pending
from crm.models import Business, Call, InboundEvent, Lead, Message, MessageTemplate, Receipt, Task
from crm.services.business_file import business_file_parse, business_spec_apply
from tests.factories import lead_create
from tests.helpers.capture import run_queued_events
from tests.helpers.twilio import (
    CALLER,
    LINE,
    SMS,
    STATUS,
    VOICE,
    call_comes_in,
    call_missed,
    caller_leg_ended,
    deliver,
    dial_ended,
    incoming,
    text_in,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("twilio_settings")]

TEXT_BACK = "Sorry we missed your call to {business}. We will call you back shortly. Reply STOP to opt out."
TEXT_BACK_ACTOR = "agent:missed_call"
# The gate's verdicts that mean the text goes (now, or when quiet hours end).
GOING = ("dry_run", "queued", "deferred")


def sid(n: int) -> str:
    return f"CA{n:032d}"


@pytest.fixture
def text_back_on(business: Business) -> Business:
    business.missed_call_text_back = True
    business.save(update_fields=["missed_call_text_back"])
    MessageTemplate.objects.create(
        business=business, key="missed_call_sms", channel="sms", approved=True, body=TEXT_BACK
    )
    return business


def automated_texts(**filters: Any) -> list[Message]:
    return list(Message.objects.filter(direction="out", **filters).order_by("created_at", "pk"))


def open_tasks(lead: Lead) -> list[Task]:
    return list(lead.tasks.filter(status="open").order_by("pk"))


def call_later(django_capture_on_commit_callbacks, *, sid: str, at: datetime) -> None:
    """A call that rings out at `at` (in the future): its first delivery is
    stored and moved to `at` before it is processed, as the call's time is
    its first event's arrival."""
    deliver(django_capture_on_commit_callbacks, VOICE, incoming(sid=sid))
    InboundEvent.objects.filter(kind="voice", status="received").update(received_at=at)
    assert run_queued_events() == ["processed"]
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer", CallSid=sid))
    assert run_queued_events() == ["processed"]


def test_three_missed_calls_within_an_hour_send_one_text_and_keep_one_call_back_naming_the_three_calls(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    for n in (1, 2, 3):
        call_missed(django_capture_on_commit_callbacks, sid=sid(n))

    lead = Lead.objects.get()
    (text,) = automated_texts()
    assert text.status in GOING and text.actor == TEXT_BACK_ACTOR
    assert text.body == TEXT_BACK.format(business=text_back_on.name)
    # One open task: the call back, and it is the lead's one next action.
    (task,) = open_tasks(lead)
    assert task.kind == "next_action" and task.owner == lead.owner
    assert lead.next_action == task.title
    assert "called 3 times, last at" in task.title
    # Every call was added to that one task, each with its receipt.
    assert {r.after["task"] for r in Receipt.objects.filter(action="call.missed")} == {task.public_id}
    assert Receipt.objects.filter(subject=task.public_id, action="task.created").count() == 1
    assert set(Call.objects.values_list("callback_task", flat=True)) == {task.pk}


def test_a_first_missed_call_from_a_new_number_gets_one_text_not_an_acknowledgement_as_well(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    MessageTemplate.objects.create(
        business=text_back_on,
        key="ack_sms",
        channel="sms",
        approved=True,
        body="Hi {first_name}, this is {business}. We got your request. Reply STOP to opt out.",
    )
    call_missed(django_capture_on_commit_callbacks, sid=sid(1))

    (text,) = automated_texts()
    assert text.actor == TEXT_BACK_ACTOR
    (task,) = open_tasks(Lead.objects.get())
    assert task.kind == "next_action" and task.title.startswith(f"Call back {CALLER}")


def test_a_missed_call_after_the_window_sends_a_second_text_and_adds_to_the_open_call_back(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    call_missed(django_capture_on_commit_callbacks, sid=sid(1))
    call_later(django_capture_on_commit_callbacks, sid=sid(2), at=timezone.now() + timedelta(hours=25))

    first, second = automated_texts()
    assert first.status in GOING and second.status in GOING
    assert first.idempotency_key != second.idempotency_key
    (task,) = open_tasks(Lead.objects.get())
    assert "called 2 times" in task.title


def test_two_calls_either_side_of_a_fixed_windows_end_still_get_one_text(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    # The idempotency key names the fixed 24-hour window a call falls in;
    # the window a caller gets one text in is rolling. A second after the
    # first call's fixed window ends is still well within a day of it.
    now = timezone.now()
    if now - text_back_window_start(text_back_on, now) < timedelta(seconds=5):
        time.sleep(5)  # else "a second after its end" would be a whole day after the first call
    call_missed(django_capture_on_commit_callbacks, sid=sid(1))
    first_call = Call.objects.get()
    window_end = text_back_window_start(text_back_on, first_call.started_at) + timedelta(hours=24)
    call_later(django_capture_on_commit_callbacks, sid=sid(2), at=window_end + timedelta(seconds=1))

    second_call = Call.objects.get(provider_sid=sid(2))
    assert second_call.started_at - first_call.started_at < timedelta(hours=24)
    assert first_call.contact is not None
    assert text_back_key(text_back_on, first_call.contact, first_call.started_at) != text_back_key(
        text_back_on, first_call.contact, second_call.started_at
    )
    (text,) = automated_texts()
    assert text.idempotency_key == text_back_key(text_back_on, first_call.contact, first_call.started_at)
    receipt = Receipt.objects.get(action="call.missed", subject=second_call.public_id)
    assert receipt.after["text_back"].startswith(f"not sent: {text.public_id}")


def test_every_call_in_one_fixed_window_names_the_same_key(business):
    contact = lead_create(business).contact
    start = text_back_window_start(business, timezone.now())
    keys = {text_back_key(business, contact, start + timedelta(hours=h)) for h in (0, 1, 12, 23.99)}
    assert len(keys) == 1 and start.tzinfo is not None and start.timestamp() % (24 * 3600) == 0
    assert text_back_key(business, contact, start + timedelta(hours=24)) not in keys


def test_a_call_to_a_line_nobody_answers_gives_the_call_back_to_the_owner_routing_chose(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    # Without a forwarding number the call is missed as it opens the lead,
    # before the new lead's step has given it an owner.
    twilio_source.config = {"phone_number": LINE}
    twilio_source.save(update_fields=["config"])
    call_comes_in(django_capture_on_commit_callbacks, incoming(sid=sid(1)))
    orchestrate_pending()

    lead = Lead.objects.get()
    (task,) = open_tasks(lead)
    assert lead.owner == setter and task.owner == setter
    assert task.kind == "next_action" and lead.next_action == task.title
    assert len(automated_texts()) == 1


def test_a_caller_who_texted_stop_gets_no_text_but_the_call_back_task(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    deliver(django_capture_on_commit_callbacks, SMS, text_in("STOP", OptOutType="STOP"))
    assert run_queued_events() == ["processed"]
    stop_reply = set(Message.objects.filter(direction="out").values_list("pk", flat=True))

    call_missed(django_capture_on_commit_callbacks, sid=sid(1))

    lead = Lead.objects.get()
    texts = automated_texts(actor=TEXT_BACK_ACTOR)
    assert [(t.status, t.block_reason) for t in texts] == [("blocked", "revoked")]
    assert set(Message.objects.filter(direction="out").values_list("pk", flat=True)) == stop_reply | {texts[0].pk}
    next_action = lead.tasks.get(status="open", kind="next_action")
    assert next_action.title.startswith(f"Call back {CALLER}") and lead.next_action == next_action.title


def test_an_anonymous_caller_gets_only_the_call_back_task(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    call_missed(django_capture_on_commit_callbacks, sid=sid(1), caller="anonymous")

    assert not Message.objects.filter(direction="out").exists()
    lead = Lead.objects.get()
    next_action = lead.tasks.get(status="open", kind="next_action")
    assert "withheld" in next_action.title and lead.next_action == next_action.title
    assert "no number to text" in Receipt.objects.get(action="call.missed").after["text_back"]


def test_a_landline_caller_gets_no_text_only_the_call_back_task(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    # A London landline: outside NANP a fixed line is told apart from a mobile.
    landline = "+442079460123"
    Business.objects.filter(pk=text_back_on.pk).update(contact_countries=["US", "GB"])
    call_missed(django_capture_on_commit_callbacks, sid=sid(1), caller=landline)

    assert [(t.status, t.block_reason) for t in automated_texts()] == [("blocked", "number_not_allowed")]
    lead = Lead.objects.get()
    assert lead.tasks.get(status="open", kind="next_action").title.startswith(f"Call back {landline}")


def test_without_the_opt_in_a_missed_call_sends_no_text_and_the_call_back_is_the_next_action(
    business, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    call_missed(django_capture_on_commit_callbacks, sid=sid(1))
    call_missed(django_capture_on_commit_callbacks, sid=sid(2))

    assert not Message.objects.filter(direction="out", actor=TEXT_BACK_ACTOR).exists()
    lead = Lead.objects.get()
    (task,) = lead.tasks.filter(status="open", kind="next_action")
    assert "called 2 times" in task.title and lead.next_action == task.title
    assert not lead.tasks.filter(status="open", kind="call_back").exists()


BUSINESS_FILE = """\
business: {{slug: acme, name: Acme Heating & Air, timezone: America/Chicago}}
sources:
  - {{key: main-line, provider: twilio, phone_number: "{line}", forward_to: "+13125550199"}}
policy: {{missed_call_text_back: true{window}}}
templates:
  - {{key: missed_call_sms, channel: sms, approved: true, body: "{body}"}}
"""


def business_file(window: str = "") -> str:
    return BUSINESS_FILE.format(line=LINE, window=window, body=TEXT_BACK)


def test_the_window_comes_from_the_business_file_and_is_a_day_by_default(business):
    business_spec_apply(business_file_parse(business_file()))
    assert Business.objects.get(slug="acme").missed_call_text_back_window_hours == 24
    business_spec_apply(business_file_parse(business_file(", missed_call_text_back_window_hours: 2")))
    assert Business.objects.get(slug="acme").missed_call_text_back_window_hours == 2


def test_a_window_of_no_hours_is_refused_with_its_line(business):
    from crm.services.business_file import BusinessFileError

    with pytest.raises(BusinessFileError, match="missed_call_text_back_window_hours") as refused:
        business_file_parse(business_file(", missed_call_text_back_window_hours: 0"))
    assert "line 4" in str(refused.value)


def test_a_two_hour_window_from_the_business_file_texts_again_three_hours_later(
    business, setter, manager, django_capture_on_commit_callbacks
):
    business_spec_apply(business_file_parse(business_file(", missed_call_text_back_window_hours: 2")))
    call_missed(django_capture_on_commit_callbacks, sid=sid(1))
    call_missed(django_capture_on_commit_callbacks, sid=sid(2))  # within two hours: no second text
    call_later(django_capture_on_commit_callbacks, sid=sid(3), at=timezone.now() + timedelta(hours=3))

    assert len(automated_texts(actor=TEXT_BACK_ACTOR)) == 2
    (task,) = Lead.objects.get().tasks.filter(status="open", kind="next_action")
    assert "called 3 times" in task.title


def race(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run `calls` at once on threads, each with its own database connection,
    as cluster workers would; a barrier releases them together."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        try:
            barrier.wait(timeout=30)
            return call()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


@pytest.mark.django_db(transaction=True)
def test_racing_status_callbacks_of_three_calls_from_one_caller_send_one_text(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    sids = [sid(n) for n in (1, 2, 3)]
    for call_sid in sids:
        call_comes_in(django_capture_on_commit_callbacks, incoming(sid=call_sid))
    for call_sid in sids:
        deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer", CallSid=call_sid))
    statuses = list(InboundEvent.objects.filter(kind="voice_status").values_list("pk", flat=True))

    # Every worker tries every status callback: redeliveries race as well.
    outcomes = race([partial(event_process, pk) for pk in statuses for _ in range(2)])
    assert sorted(o for o in outcomes if o != "skipped") == ["processed"] * 3

    lead = Lead.objects.get()
    assert len(automated_texts(actor=TEXT_BACK_ACTOR)) == 1
    (task,) = open_tasks(lead)
    assert task.kind == "next_action" and "called 3 times" in task.title
    assert Receipt.objects.filter(action="call.missed").count() == 3


@pytest.mark.django_db(transaction=True)
def test_racing_missed_calls_to_a_line_nobody_answers_send_one_text(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    # Without a forwarding number each call is missed as it is processed.
    twilio_source.config = {"phone_number": LINE}
    twilio_source.save(update_fields=["config"])
    call_missed(django_capture_on_commit_callbacks, sid=sid(1))  # the person and their lead exist
    for n in (2, 3, 4):
        deliver(django_capture_on_commit_callbacks, VOICE, incoming(sid=sid(n)))
    voices = list(InboundEvent.objects.filter(kind="voice", status="received").values_list("pk", flat=True))

    outcomes = race([partial(event_process, pk) for pk in voices])
    assert outcomes == ["processed"] * 3

    assert len(automated_texts(actor=TEXT_BACK_ACTOR)) == 1
    (task,) = open_tasks(Lead.objects.get())
    assert "called 4 times" in task.title


def test_redelivered_and_later_callbacks_of_one_missed_call_add_nothing(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    call_missed(django_capture_on_commit_callbacks, sid=sid(1))
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer", CallSid=sid(1)))  # Twilio retried
    deliver(django_capture_on_commit_callbacks, STATUS, {**caller_leg_ended("completed", 27), "CallSid": sid(1)})
    assert run_queued_events() == ["processed"]  # the retry was a duplicate, stored once
    # The detector itself, handed the same outcome again (a redelivered task).
    update = status_update_from(dial_ended("no-answer", CallSid=sid(1)))
    assert call_status_record(Call.objects.get(), update, at=timezone.now()) is None

    assert len(automated_texts(actor=TEXT_BACK_ACTOR)) == 1
    (task,) = open_tasks(Lead.objects.get())
    assert "called" not in task.title and Receipt.objects.filter(action="call.missed").count() == 1


def test_a_call_back_done_and_then_another_missed_call_opens_a_new_call_back_but_no_second_text(
    text_back_on, twilio_source, setter, manager, django_capture_on_commit_callbacks
):
    from crm.services.next_action import task_complete

    call_missed(django_capture_on_commit_callbacks, sid=sid(1))
    lead = Lead.objects.get()
    (first,) = open_tasks(lead)
    task_complete(
        first,
        actor="sam",
        outcome="left a voicemail",
        next_title="Try again tomorrow",
        next_due_at=timezone.now() + timedelta(days=1),
    )
    call_missed(django_capture_on_commit_callbacks, sid=sid(2))

    assert len(automated_texts(actor=TEXT_BACK_ACTOR)) == 1
    (task,) = open_tasks(lead)
    assert task.pk != first.pk and task.title.startswith(f"Call back {CALLER}") and "called" not in task.title
    assert lead.tasks.get(title="Try again tomorrow").status == "canceled"
