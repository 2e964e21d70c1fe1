"""A language model on inbound texts, end to end: the real signed Twilio
webhook, the real task the queue runs, the real SDKs against local servers,
the approval queue and the send gate.

Done when: an inbound "how much to replace my AC, can you come tomorrow?"
yields a draft in the thread that waits for approval, shows why, and goes
out only after a person approves it, through the gate."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django_q.models import OrmQ
from django_q.signing import SignedPackage
from rest_framework.test import APIClient

from agents import tasks
from agents.ai.inbound import TIMER_KIND
from agents.ai.intents import MODEL_BELOW
from agents.reader.model import reader
from approvals.models import ApprovalRequest
from crm.models import Business, ConsentState, Contact, Lead, Message, ModelCall, Receipt, TeamMember, Timer
from tests.factories import lead_create
from tests.helpers.capture import run_queued_events
from tests.helpers.llm import GOOD_DRAFT, PROMISING_DRAFT, ModelServer
from tests.helpers.twilio import SMS, post

pytestmark = pytest.mark.django_db

DONE_WHEN = "how much to replace my AC, can you come tomorrow?"
_sids = iter(range(1, 10_000))


def text(body: str, sender: str = "+12125550147") -> dict[str, str]:
    sid = f"SM{next(_sids):032d}"
    return {"MessageSid": sid, "SmsSid": sid, "From": sender, "To": "+13125550100", "Body": body, "NumMedia": "0"}


def deliver(capture: Any, body: str, sender: str = "+12125550147") -> Message:
    """The text through the signed webhook, its processing, and then the
    model's reading as the cluster would run it (the queued task)."""
    with capture(execute=True):
        assert post(SMS, text(body, sender)).status_code == 200
    with capture(execute=True):
        assert run_queued_events() == ["processed"]
    run_queued_ai_tasks(capture)
    return Message.objects.filter(direction="in").latest("pk")


def run_queued_ai_tasks(capture: Any) -> list[str]:
    outcomes = []
    for queued in OrmQ.objects.order_by("id"):
        task = SignedPackage.loads(queued.payload)
        if task["func"] != "agents.tasks.ai_inbound":
            continue
        with capture(execute=True):
            outcomes.append(tasks.ai_inbound(*task["args"]))
        queued.delete()
    return outcomes


def draft_of(message: Message) -> Message | None:
    return Message.objects.filter(idempotency_key=f"ai-draft:{message.public_id}").first()


def api(member: TeamMember) -> APIClient:
    client = APIClient()
    client.force_login(member.user)
    return client


def test_done_when_a_promising_draft_waits_in_the_thread_shows_why_and_goes_out_only_once_a_manager_approves(
    acme: Business,
    twilio_settings: None,
    model: ModelServer,
    mia: TeamMember,
    sam: TeamMember,
    django_capture_on_commit_callbacks: Any,
) -> None:
    model.default = PROMISING_DRAFT
    inbound = deliver(django_capture_on_commit_callbacks, DONE_WHEN)

    # The message: the model read it too (it said the same); where the
    # trained reader is sure, its reading stays, on the record and in the API.
    reading = reader().read(DONE_WHEN)
    assert reading.confidence >= MODEL_BELOW
    assert (inbound.intent, inbound.intent_source) == ("price_question", "reader")
    assert inbound.intent_confidence == pytest.approx(reading.confidence, abs=0.001)
    # The draft: in the thread, waiting for a person, saying why.
    draft = draft_of(inbound)
    assert draft is not None and draft.status == "pending_approval" and draft.automated
    assert draft.actor == "agent:ai_assistant" and draft.lead == inbound.lead
    assert draft.body == "Hi there! A new AC runs about $4,500 installed and we can be there tomorrow at 9am."
    assert "not in the playbook" in draft.draft_reason
    assert "price “$4,500”" in draft.draft_reason and "arrival time “tomorrow" in draft.draft_reason
    approval = ApprovalRequest.objects.get(message=draft)
    assert (approval.kind, approval.status, approval.proposed_by) == ("message_draft", "pending", "agent:ai_assistant")
    assert "not in the playbook" in approval.summary
    # The call: one row you can count, one receipt with the digests and tokens.
    call = ModelCall.objects.get()
    assert (call.status, call.message, call.lead) == ("ok", inbound, inbound.lead)
    assert call.input_tokens > 0 and len(call.prompt_digest) == len(call.answer_digest) == 64
    receipt = Receipt.objects.get(action="ai.called")
    assert receipt.subject == call.public_id and receipt.after["answer_digest"] == call.answer_digest
    # Nothing else went out but the approved acknowledgement of a new lead, never the model's.
    assert list(Message.objects.filter(direction="out").exclude(pk=draft.pk).values_list("template_key", "status")) == [
        ("ack_sms", "dry_run")
    ]

    thread = Client()
    thread.force_login(mia.user)
    page = thread.get(f"/app/leads/{inbound.lead.public_id}/").content.decode()
    assert "Waiting for approval" in page and "Why: drafted by" in page and "$4,500" in page
    assert "price question" in page  # the inbound message's intent

    # Its proposer is a role: a setter may not decide, a manager may.
    refused = api(sam).post(f"/api/v1/approvals/{approval.public_id}/approve/", {}, format="json")
    assert refused.status_code == 403
    draft.refresh_from_db()
    assert draft.status == "pending_approval"
    approved = api(mia).post(f"/api/v1/approvals/{approval.public_id}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.content
    draft.refresh_from_db()
    # Through the gate (dry run: recorded exactly as it would be sent).
    assert draft.status == "dry_run"
    gate = Receipt.objects.filter(subject=draft.public_id, actor="agent:send_gate").order_by("pk")
    assert [r.action for r in gate] == ["message.pending_approval", "message.dry_run"]


def test_a_guarded_draft_is_the_composers_suggestion_and_waits_for_a_person(
    acme: Business,
    twilio_settings: None,
    openai_model: ModelServer,
    sam: TeamMember,
    django_capture_on_commit_callbacks: Any,
) -> None:
    openai_model.default = GOOD_DRAFT
    inbound = deliver(django_capture_on_commit_callbacks, "Can someone come look at my furnace this week?")

    draft = draft_of(inbound)
    assert draft is not None and draft.status == "pending_approval"
    assert draft.body == (
        "Hi there, thanks for reaching out to Acme Heating & Air. You can pick a time that suits you here: "
        "https://acme.example/book"
    )
    assert "relying on booking_url; no claim beyond the playbook" in draft.draft_reason
    client = Client()
    client.force_login(sam.user)
    inbound.lead.owner = sam
    Lead.objects.filter(pk=inbound.lead.pk).update(owner=sam)
    page = client.get(f"/app/leads/{inbound.lead.public_id}/").content.decode()
    assert "drafted by the ai assistant" in page and "https://acme.example/book" in page


def test_auto_reply_sends_a_guarded_draft_through_the_gate_without_a_person(
    acme: Business, twilio_settings: None, openai_model: ModelServer, django_capture_on_commit_callbacks: Any
) -> None:
    Business.objects.filter(pk=acme.pk).update(ai_auto_reply=["booking_request"])
    openai_model.default = GOOD_DRAFT
    inbound = deliver(django_capture_on_commit_callbacks, "Can someone come look at my furnace this week?")

    draft = draft_of(inbound)
    assert draft is not None and draft.status == "dry_run" and draft.automated
    assert "auto-reply is on for booking_request" in draft.draft_reason
    assert not ApprovalRequest.objects.filter(message=draft).exists()
    assert Receipt.objects.filter(subject=draft.public_id, action="message.dry_run", actor="agent:send_gate").exists()


def test_auto_reply_never_sends_a_claim_the_playbook_does_not_state(
    acme: Business, twilio_settings: None, openai_model: ModelServer, django_capture_on_commit_callbacks: Any
) -> None:
    Business.objects.filter(pk=acme.pk).update(ai_auto_reply=["price_question", "booking_request"])
    openai_model.default = PROMISING_DRAFT
    inbound = deliver(django_capture_on_commit_callbacks, DONE_WHEN)
    draft = draft_of(inbound)
    assert draft is not None and draft.status == "pending_approval"


@pytest.mark.parametrize(
    ("facts", "status"),
    [
        (["price:1"], "dry_run"),  # the playbook states it, and the draft cites it
        (["booking_url"], "pending_approval"),  # a true price, but the fact it cites does not state it
        ([], "pending_approval"),
    ],
)
def test_a_price_goes_out_on_its_own_only_when_the_cited_playbook_fact_states_it(
    acme: Business,
    twilio_settings: None,
    openai_model: ModelServer,
    django_capture_on_commit_callbacks: Any,
    facts: list[str],
    status: str,
) -> None:
    Business.objects.filter(pk=acme.pk).update(ai_auto_reply=["price_question"])
    openai_model.default = {
        "intent": "price_question",
        "confidence": 0.9,
        "reply": "Our diagnostic visit is $89.00, credited toward the repair. Book at {booking_url}",
        "facts": facts,
    }
    inbound = deliver(django_capture_on_commit_callbacks, "What's your diagnostic fee?")
    draft = draft_of(inbound)
    assert draft is not None and draft.status == status


@pytest.mark.parametrize("behaviour", ["malformed", "stall", 429])
def test_a_failed_call_falls_back_to_the_rules_with_a_receipt_saying_so(
    acme: Business,
    twilio_settings: None,
    model: ModelServer,
    django_capture_on_commit_callbacks: Any,
    behaviour: object,
) -> None:
    model.default = behaviour  # type: ignore[assignment]
    inbound = deliver(django_capture_on_commit_callbacks, DONE_WHEN)

    assert (inbound.intent, inbound.intent_source) == ("price_question", "reader")
    assert draft_of(inbound) is None
    call = ModelCall.objects.get()
    assert (
        call.status == "failed"
        and call.error == {"malformed": "malformed", "stall": "timeout", 429: "rate_limited"}[behaviour]
    )
    receipt = Receipt.objects.get(action="ai.failed")
    assert "the rules answered instead" in receipt.reason and receipt.subject == call.public_id
    # The timer is done, not retried into a second call.
    assert Timer.objects.get(kind=TIMER_KIND).status == "done"


def test_a_revocation_the_rules_found_stands_whatever_the_model_says(
    acme: Business, twilio_settings: None, model: ModelServer, django_capture_on_commit_callbacks: Any
) -> None:
    model.default = {"intent": "booking_request", "confidence": 0.99, "reply": "Great, see you at 9!", "facts": []}
    inbound = deliver(django_capture_on_commit_callbacks, "please stop texting me")

    assert (inbound.intent, inbound.intent_source) == ("revocation", "reader")
    assert Contact.objects.get().automation_paused
    # Treated as a stop by the consent check itself: recorded and confirmed, nobody asked.
    assert ConsentState.objects.get(channel="sms").status == "revoked"
    assert not ApprovalRequest.objects.filter(kind="opt_out_question").exists()
    assert draft_of(inbound) is None
    kept = Receipt.objects.get(action="message.intent_read")
    assert "the reader's revocation stands" in kept.reason


def test_the_model_may_add_a_revocation_the_rules_missed(
    acme: Business, twilio_settings: None, model: ModelServer, django_capture_on_commit_callbacks: Any
) -> None:
    model.default = {"intent": "revocation", "confidence": 0.93, "reply": "", "facts": []}
    # A text the trained reader reads as something else, unsure (so the model is asked).
    inbound = deliver(django_capture_on_commit_callbacks, "We are selling the house next month")

    assert (inbound.intent, inbound.intent_source) == ("revocation", "model")
    contact = Contact.objects.get()
    assert contact.automation_paused
    question = ApprovalRequest.objects.get(kind="opt_out_question")
    assert question.proposed_by == "agent:ai_assistant" and "The model reads this as a revocation" in question.summary
    assert draft_of(inbound) is None


def test_a_keyword_is_never_sent_to_a_model(
    acme: Business, twilio_settings: None, openai_model: ModelServer, django_capture_on_commit_callbacks: Any
) -> None:
    deliver(django_capture_on_commit_callbacks, "STOP")
    assert openai_model.posts() == [] and not ModelCall.objects.exists()
    assert not Timer.objects.filter(kind=TIMER_KIND).exists()
    assert Message.objects.get(direction="in").intent == "revocation"


def test_a_business_that_opted_out_never_calls_the_model(
    acme: Business, twilio_settings: None, openai_model: ModelServer, django_capture_on_commit_callbacks: Any
) -> None:
    Business.objects.filter(pk=acme.pk).update(ai_enabled=False)
    inbound = deliver(django_capture_on_commit_callbacks, DONE_WHEN)
    assert openai_model.posts() == [] and not ModelCall.objects.exists()
    assert (inbound.intent, inbound.intent_source) == ("price_question", "reader")


def test_the_monthly_cap_refuses_the_call_past_it_and_the_rules_answer(
    acme: Business, twilio_settings: None, openai_model: ModelServer, django_capture_on_commit_callbacks: Any
) -> None:
    Business.objects.filter(pk=acme.pk).update(ai_monthly_calls=1)
    deliver(django_capture_on_commit_callbacks, DONE_WHEN)
    second = deliver(django_capture_on_commit_callbacks, "And do you do ductwork?", sender="+12125550148")

    assert len(openai_model.posts()) == 1
    # The first was read by the model too (its call is the "ok" row below);
    # the second, over the cap, keeps the trained reader's reading alone.
    assert second.intent_source == "reader"
    assert list(ModelCall.objects.order_by("pk").values_list("status", "error")) == [
        ("ok", ""),
        ("refused", "over_cap"),
    ]
    refused = Receipt.objects.get(action="ai.refused")
    assert "this month's 1 model calls are used up" in refused.reason


def test_the_person_is_never_named_to_the_provider(
    acme: Business, twilio_settings: None, openai_model: ModelServer, django_capture_on_commit_callbacks: Any
) -> None:
    body = "Hi, this is Rosa Diaz, call me at (312) 555-0188 or rosa.diaz@example.com, how much for a tune-up?"
    deliver(django_capture_on_commit_callbacks, body)
    [request] = openai_model.posts()
    sent = str(request["json"])
    assert "555-0188" not in sent and "rosa.diaz@example.com" not in sent and "+12125550147" not in sent
    assert "[phone]" in sent and "[email]" in sent


def test_the_persons_names_and_address_never_reach_the_provider_whoever_wrote_them(
    acme: Business, twilio_settings: None, openai_model: ModelServer, django_capture_on_commit_callbacks: Any
) -> None:
    """Known from a form: the names and address the conversation repeats
    ("Hi Rosa", "this is Rosa Diaz at 12 Elm St") go as placeholders."""
    lead = lead_create(acme, phone="+12125550147", first_name="Rosa", last_name="Diaz")
    Contact.objects.filter(pk=lead.contact_id).update(address="12 Elm St", postal_code="60601")
    deliver(django_capture_on_commit_callbacks, "Hi, this is ROSA diaz at 12 elm st, 60601. How much for a tune-up?")
    [request] = openai_model.posts()
    sent = str(request["json"])
    assert not re.search(r"rosa|diaz|elm st|60601", sent, re.IGNORECASE), sent
    assert "{first_name} {last_name} at [address], [postal code]" in sent
