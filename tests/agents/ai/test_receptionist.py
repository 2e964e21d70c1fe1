"""The after-hours receptionist, end to end: the real signed Twilio webhook,
the real queued task, the real SDKs against local model servers, the booking
flow and the send gate. What goes out after hours is approved playbook
content only; everything else is a take-over task for a person, with why."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from agents import tasks
from agents.ai.inbound import RECEPTION_TIMER as TIMER_KIND
from crm.models import (
    DAYS,
    Appointment,
    Business,
    ConsentState,
    ConsentStatus,
    Contact,
    Message,
    Receipt,
    Task,
    Timer,
)
from crm.services.business_file import business_file_parse, business_spec_apply
from tests.agents.ai.conftest import BUSINESS_FILE
from tests.helpers.capture import run_queued_events
from tests.helpers.llm import GOOD_DRAFT, PROMISING_DRAFT, ModelServer
from tests.helpers.twilio import SMS, post

pytestmark = pytest.mark.django_db

WARRANTY = "1-year labor warranty on repairs we make."
RECEPTION_FILE = (
    BUSINESS_FILE.replace("ai: {enabled: true}", "ai: {enabled: true, receptionist: true}")
    + """
  - key: after_hours_sms
    channel: sms
    approved: true
    body: "Thanks, {first_name}. {business} is closed now; someone will get back to you when we open."
  - key: slots_offer_sms
    channel: sms
    approved: true
    body: "{business} can come {slot_options}. Reply with the number that suits you."
  - key: appointment_confirmation_sms
    channel: sms
    approved: true
    body: "{business} has you booked {appointment_time}. Reply STOP to opt out."
team:
  - {username: mia, name: Mia Manager, email: mia@acme.example, role: manager}
  - {username: tom, name: Tom Tech, email: tom@acme.example, role: technician}
availability:
  - {members: [tom], days: [mon, tue, wed, thu, fri, sat, sun], slots: ["09:00-11:00", "13:00-15:00"], capacity: 1}
"""
)
_sids = iter(range(1, 10_000))


@pytest.fixture
def acme(db: None) -> Business:
    return business_spec_apply(business_file_parse(RECEPTION_FILE, path="acme-ai.yaml")).business


def hours(business: Business, *, open_now: bool) -> None:
    """Business hours open around the clock, or closed all day today (and
    still closed at tomorrow's first minutes, should midnight pass mid-test)."""
    today = DAYS[timezone.now().astimezone(ZoneInfo(business.timezone)).weekday()]
    tomorrow = DAYS[(DAYS.index(today) + 1) % 7]
    opening = dict.fromkeys(DAYS, "00:00-24:00") if open_now else {tomorrow: "08:00-18:00"}
    Business.objects.filter(pk=business.pk).update(business_hours=opening)


@pytest.fixture
def after_hours(acme: Business) -> None:
    hours(acme, open_now=False)


def deliver(capture: Any, body: str, sender: str = "+12125550147") -> Message:
    """The text through the signed webhook, its processing, then the AI
    queue's tasks as the cluster runs them."""
    sid = f"SM{next(_sids):032d}"
    form = {"MessageSid": sid, "SmsSid": sid, "From": sender, "To": "+13125550100", "Body": body, "NumMedia": "0"}
    with capture(execute=True):
        assert post(SMS, form).status_code == 200
    with capture(execute=True):
        assert run_queued_events() == ["processed"]
    # The orchestrator's steps (a reply's take-over task among them), then the
    # AI queue's: the order a cluster drains them in.
    for func in ("agents.tasks.orchestrate", "agents.tasks.ai_inbound"):
        for queued in OrmQ.objects.order_by("id"):
            task = SignedPackage.loads(queued.payload)
            if task["func"] == func:
                with capture(execute=True):
                    getattr(tasks, func.rsplit(".", 1)[1])(*task["args"])
                queued.delete()
    return Message.objects.filter(direction="in").latest("pk")


def reply_to(inbound: Message) -> Message | None:
    return Message.objects.filter(idempotency_key=f"reception:{inbound.public_id}").first()


def handovers() -> list[Task]:
    return list(Task.objects.filter(kind="take_over", title__startswith="After hours:").order_by("pk"))


def take_overs() -> list[str]:
    """Every open take-over task's title, whoever opened it: one conversation, one person to take it."""
    return list(Task.objects.filter(kind="take_over", status="open").order_by("pk").values_list("title", flat=True))


def sent_bodies() -> list[str]:
    """What reached (in dry run: would reach) the person."""
    return list(Message.objects.filter(direction="out", status="dry_run").order_by("pk").values_list("body", flat=True))


def test_after_hours_a_question_the_playbook_answers_gets_the_approved_fact_through_the_gate(
    acme: Business, after_hours: None, twilio_settings: None, django_capture_on_commit_callbacks: Any
) -> None:
    inbound = deliver(django_capture_on_commit_callbacks, "Do you give a warranty on repairs?")

    reply = reply_to(inbound)
    assert reply is not None and reply.body == WARRANTY
    assert (reply.status, reply.automated, reply.actor) == ("dry_run", True, "agent:receptionist")
    assert Receipt.objects.filter(subject=reply.public_id, action="message.dry_run", actor="agent:send_gate").exists()
    answered = Receipt.objects.get(action="reception.answered")
    assert answered.subject == inbound.public_id and answered.after["facts"] == ["fact:1"]
    # Answered within the playbook: nobody has to take the conversation over tonight.
    assert handovers() == [] and take_overs() == []


def test_after_hours_a_visit_request_gets_the_offered_slots_and_a_picked_number_is_booked(
    acme: Business, after_hours: None, twilio_settings: None, django_capture_on_commit_callbacks: Any
) -> None:
    asked = deliver(django_capture_on_commit_callbacks, "Can someone come out to look at my furnace?")
    offer = reply_to(asked)
    assert offer is not None and offer.status == "dry_run" and offer.template_key == "slots_offer_sms"
    assert "1) " in offer.body and "2) " in offer.body and "3) " in offer.body
    slots = Receipt.objects.get(action="reception.slots_offered").after["slots"]
    assert len(slots) == 3

    deliver(django_capture_on_commit_callbacks, "2")

    appointment = Appointment.objects.get()
    assert appointment.lead == asked.lead and appointment.status == "scheduled"
    assert f"{appointment.availability.public_id}|{appointment.starts_at.isoformat()}" == slots[1]
    assert Receipt.objects.filter(action="reception.booked", after__appointment=appointment.public_id).exists()
    # The booking flow's own approved confirmation, through the gate.
    confirmation = Message.objects.get(template_key="appointment_confirmation_sms")
    assert confirmation.status == "dry_run"
    assert handovers() == []


def test_within_business_hours_the_receptionist_does_nothing(
    acme: Business, twilio_settings: None, django_capture_on_commit_callbacks: Any
) -> None:
    hours(acme, open_now=True)
    inbound = deliver(django_capture_on_commit_callbacks, "Do you give a warranty on repairs?")

    assert reply_to(inbound) is None
    assert not Timer.objects.filter(kind=TIMER_KIND).exists()
    assert not Receipt.objects.filter(action__startswith="reception.").exists()
    assert handovers() == []
    # The person writes again: the reply logger gives the owner the conversation, as always within hours.
    deliver(django_capture_on_commit_callbacks, "Are you there?")
    [title] = take_overs()
    assert "replied — take over the conversation" in title


def test_a_business_without_the_receptionist_gets_nothing_new_after_hours(
    acme: Business, after_hours: None, twilio_settings: None, django_capture_on_commit_callbacks: Any
) -> None:
    Business.objects.filter(pk=acme.pk).update(ai_receptionist=False)
    inbound = deliver(django_capture_on_commit_callbacks, "Do you give a warranty on repairs?")
    assert reply_to(inbound) is None and not Timer.objects.filter(kind=TIMER_KIND).exists()
    deliver(django_capture_on_commit_callbacks, "Are you there?")
    assert ["replied — take over the conversation" in title for title in take_overs()] == [True]


def test_a_known_person_after_hours_has_one_take_over_task_and_it_says_why(
    acme: Business, twilio_settings: None, django_capture_on_commit_callbacks: Any
) -> None:
    """The person wrote before (a reply, not a new lead): the receptionist
    answers what it may, and only its handover gives the owner the
    conversation, once, with the reason."""
    hours(acme, open_now=True)
    deliver(django_capture_on_commit_callbacks, "Hi, I filled in your form about my furnace")
    hours(acme, open_now=False)

    asked = deliver(django_capture_on_commit_callbacks, "Do you give a warranty on repairs?")
    assert reply_to(asked) is not None and take_overs() == []

    deliver(django_capture_on_commit_callbacks, "Can I talk to a real person please")
    [task] = handovers()
    assert "asked to talk to a person" in task.title and take_overs() == [task.title]


@pytest.mark.parametrize(
    ("body", "reason", "says", "acknowledged"),
    [
        ("Can I talk to a real person please", "asked_for_person", "asked to talk to a person", True),
        ("hablar con alguien por favor", "asked_for_person", "asked to talk to a person", True),
        ("Do you install solar panels?", "no_answer", "no approved answer", True),
        ("This is unacceptable, worst service ever", "complaint", "complained", False),
        ("wrong number, who is this", "wrong_number", "wrong number", False),
        ("please stop texting me", "revocation", "asked not to be contacted", False),
    ],
)
def test_each_handover_is_one_task_for_the_owner_with_its_reason_and_a_receipt(
    acme: Business,
    after_hours: None,
    twilio_settings: None,
    django_capture_on_commit_callbacks: Any,
    body: str,
    reason: str,
    says: str,
    acknowledged: bool,
) -> None:
    inbound = deliver(django_capture_on_commit_callbacks, body)

    [task] = handovers()
    assert says in task.title and task.status == "open" and task.owner is not None
    # The owner has one conversation to take over, and the task says why.
    assert take_overs() == [task.title]
    handed = Receipt.objects.get(action="reception.handed_over")
    assert handed.subject == inbound.public_id and handed.after["reason"] == reason
    assert handed.after["task"] == task.public_id
    created = Receipt.objects.get(subject=task.public_id, action="task.created")
    assert says in created.reason
    reply = reply_to(inbound)
    # A person waiting on an answer hears that someone will get back to them; nothing else goes out.
    assert (reply is not None) == acknowledged
    if reply is not None:
        assert reply.template_key == "after_hours_sms"

    # Said again: the owner has the conversation; no second task, nothing more sent.
    again = deliver(django_capture_on_commit_callbacks, body)
    assert len(handovers()) == 1 and reply_to(again) is None and take_overs() == [task.title]


def test_saying_the_same_thing_a_third_time_without_a_persons_answer_goes_to_a_person(
    acme: Business, after_hours: None, twilio_settings: None, django_capture_on_commit_callbacks: Any
) -> None:
    first = deliver(django_capture_on_commit_callbacks, "Do you give a warranty on repairs?")
    second = deliver(django_capture_on_commit_callbacks, "Do you give a warranty on repairs?")
    assert reply_to(first) is not None and reply_to(second) is not None and handovers() == []

    deliver(django_capture_on_commit_callbacks, "do you give a WARRANTY on repairs")

    [task] = handovers()
    assert "said the same thing 3 times" in task.title
    assert Receipt.objects.get(action="reception.handed_over").after["reason"] == "repeated"


def test_a_revocation_after_hours_still_pauses_the_person_and_only_the_confirmation_is_sent(
    acme: Business, after_hours: None, twilio_settings: None, django_capture_on_commit_callbacks: Any
) -> None:
    deliver(django_capture_on_commit_callbacks, "Do you give a warranty on repairs?")
    before = Message.objects.filter(direction="out").count()

    revoked = deliver(django_capture_on_commit_callbacks, "no me escriban más")

    assert revoked.intent == "revocation"
    assert Contact.objects.get().automation_paused
    assert ConsentState.objects.get(channel="sms").status == ConsentStatus.REVOKED
    sent = Message.objects.filter(direction="out").order_by("pk")
    # The one confirmation the carrier rules allow, whatever the hour; nothing else.
    assert sent.count() == before + 1
    assert sent.last().body.endswith("You won't get more texts from us. Reply START to resume.")
    [task] = handovers()
    assert "asked not to be contacted" in task.title


def test_a_stop_keyword_after_hours_is_the_ledgers_alone(
    acme: Business, after_hours: None, twilio_settings: None, django_capture_on_commit_callbacks: Any
) -> None:
    deliver(django_capture_on_commit_callbacks, "Do you give a warranty on repairs?")
    deliver(django_capture_on_commit_callbacks, "STOP")
    assert Timer.objects.filter(kind=TIMER_KIND).count() == 1  # the first message's only
    assert ConsentState.objects.get(channel="sms").status == ConsentStatus.REVOKED
    assert handovers() == []


def test_with_a_model_the_approved_fact_it_picks_goes_out_and_its_own_words_never_do(
    acme: Business,
    after_hours: None,
    twilio_settings: None,
    model: ModelServer,
    django_capture_on_commit_callbacks: Any,
) -> None:
    model.default = {
        "intent": "question",
        "confidence": 0.9,
        "reply": "Yes! Every repair we make has our 1-year labor warranty, {first_name}.",
        "facts": ["fact:1"],
    }
    inbound = deliver(django_capture_on_commit_callbacks, "Are your repairs covered for a while afterwards?")

    assert (inbound.intent, inbound.intent_source) == ("question", "model")
    reply = reply_to(inbound)
    assert reply is not None and reply.body == WARRANTY and reply.status == "dry_run"
    assert not Message.objects.filter(direction="out", body__startswith="Yes! Every repair").exists()
    assert len(model.posts()) == 1  # one call: the receptionist's reading is the model's only one


def test_a_model_draft_the_guard_holds_is_handed_over_and_waits_for_approval_even_with_auto_reply(
    acme: Business,
    after_hours: None,
    twilio_settings: None,
    model: ModelServer,
    django_capture_on_commit_callbacks: Any,
) -> None:
    Business.objects.filter(pk=acme.pk).update(ai_auto_reply=["price_question", "booking_request"])
    model.default = PROMISING_DRAFT
    inbound = deliver(django_capture_on_commit_callbacks, "how much to replace my AC, can you come tomorrow?")

    draft = Message.objects.get(idempotency_key=f"ai-draft:{inbound.public_id}")
    assert draft.status == "pending_approval"
    assert not any("$4,500" in body for body in sent_bodies())
    [task] = handovers()
    assert "the claims guard held the model's draft" in task.title
    assert Receipt.objects.get(action="reception.handed_over").after["reason"] == "claims_guard"


def test_a_model_that_gives_no_answer_hands_the_conversation_over(
    acme: Business,
    after_hours: None,
    twilio_settings: None,
    openai_model: ModelServer,
    django_capture_on_commit_callbacks: Any,
) -> None:
    openai_model.default = 500
    deliver(django_capture_on_commit_callbacks, "Do you give a warranty on repairs?")
    [task] = handovers()
    assert "the model gave no answer" in task.title
    assert not any(body == WARRANTY for body in sent_bodies())


def test_with_a_model_a_visit_request_still_gets_only_the_approved_slots(
    acme: Business,
    after_hours: None,
    twilio_settings: None,
    openai_model: ModelServer,
    django_capture_on_commit_callbacks: Any,
) -> None:
    openai_model.default = GOOD_DRAFT
    inbound = deliver(django_capture_on_commit_callbacks, "Can someone come look at my furnace this week?")
    reply = reply_to(inbound)
    assert reply is not None and reply.template_key == "slots_offer_sms" and reply.status == "dry_run"
    assert not Message.objects.filter(idempotency_key=f"ai-draft:{inbound.public_id}").exists()
