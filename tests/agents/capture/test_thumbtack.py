"""Thumbtack webhooks: Basic credentials checked, raw body stored first and
deduplicated on Thumbtack's ids, a negotiation made a lead with its source,
category and thread, customer messages made the thread's inbound messages,
and a message that arrives before its negotiation held until it lands."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from agents.capture.processing import event_replay
from agents.capture.providers.thumbtack import basic_authorization
from agents.reporting.trace import lead_first_breaks, lead_trace
from crm.models import (
    Business,
    ConsentState,
    ContactPoint,
    InboundEvent,
    Lead,
    Message,
    MessageTemplate,
    RejectedDelivery,
    ServiceLine,
    Source,
)
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

SAMPLES = Path(__file__).parent / "samples"
NEGOTIATION = (SAMPLES / "thumbtack_negotiation.json").read_bytes()
MESSAGE = (SAMPLES / "thumbtack_message.json").read_bytes()
NEGOTIATION_ID = "519153480500518912"
CUSTOMER_ID = "519153480034934784"
DESCRIPTION = "Our water heater is leaking in the basement and the pilot keeps going out."
KEY, SECRET = "tt-acme", "tt-webhook-password-0123456789"
URL = f"/hooks/thumbtack/{KEY}/"


@pytest.fixture
def tt_source(business: Business) -> Source:
    return Source.objects.create(
        business=business,
        key=KEY,
        provider="thumbtack",
        secret=SECRET,
        page_token="tt-access-token",
        config={"business_id": "468046965846925323"},
    )


def post(body: bytes | dict[str, Any], *, password: str = SECRET, username: str = KEY, auth: bool = True) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Authorization": basic_authorization(username, password)} if auth else {}
    return Client().post(URL, data=data, content_type="application/json", headers=headers)


def message(text: str, *, message_id: str, sender: str = "Customer") -> dict[str, Any]:
    body = json.loads(MESSAGE)
    body["data"].update(messageID=message_id, text=text, **{"from": sender})
    return body


def test_a_negotiation_becomes_a_lead_with_its_source_category_and_thread(tt_source: Source) -> None:
    response = post(NEGOTIATION)

    assert response.status_code == 200 and response.json()["duplicate"] is False
    event = InboundEvent.objects.get()
    assert (event.provider, event.kind, event.external_id, event.source) == (
        "thumbtack",
        "negotiation",
        NEGOTIATION_ID,
        tt_source,
    )
    assert bytes(event.body) == NEGOTIATION
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    contact = lead.contact
    assert (contact.first_name, contact.last_name, contact.postal_code) == ("Olivia", "Y.", "60614")
    assert contact.address == "Chicago, IL"
    points = {(p.kind, p.value) for p in contact.points.all()}
    assert points == {("thumbtack", CUSTOMER_ID), ("phone", "+13125550147")}
    touch = lead.touches.get()
    assert (touch.provider, touch.channel, touch.source) == ("thumbtack", "thumbtack", tt_source)
    assert (touch.campaign_id, touch.thread_id) == ("Water Heater Repair", NEGOTIATION_ID)
    assert touch.received_at == datetime(2026, 3, 14, 15, 2, 11, tzinfo=UTC)
    assert touch.answers["category_id"] == "201565295100608806"
    assert touch.answers["details"] == {"What type of water heater?": "Gas, tank", "How old is it?": "10 - 15 years"}
    assert lead.request_text == DESCRIPTION
    # The request opens the thread, written from the person's Thumbtack handle.
    first = lead.messages.get(direction="in")
    assert (first.channel, first.body, first.contact_point.kind) == ("thumbtack", DESCRIPTION, "thumbtack")


def test_wrong_or_missing_credentials_are_refused_counted_and_not_stored(tt_source: Source) -> None:
    wrong = post(NEGOTIATION, password="last-years-password")
    other_user = post(NEGOTIATION, username="someone-else")
    missing = post(NEGOTIATION, auth=False)

    assert [r.status_code for r in (wrong, other_user, missing)] == [401, 401, 401]
    assert wrong.json()["error"] == "invalid_signature"
    assert not InboundEvent.objects.exists()
    assert RejectedDelivery.objects.get().count == 3


def test_an_unknown_key_is_404_and_a_switched_off_source_403(tt_source: Source) -> None:
    data = NEGOTIATION
    assert Client().post("/hooks/thumbtack/nope/", data=data, content_type="application/json").status_code == 404
    Source.objects.filter(pk=tt_source.pk).update(is_active=False)
    assert post(data).status_code == 403
    assert not InboundEvent.objects.exists()


def test_a_repeated_delivery_is_acknowledged_and_not_processed_again(tt_source: Source) -> None:
    assert post(NEGOTIATION).json()["duplicate"] is False
    assert post(NEGOTIATION).json()["duplicate"] is True
    assert post(message("Hello?", message_id="m1")).json()["duplicate"] is False
    assert post(message("Hello?", message_id="m1")).json()["duplicate"] is True

    assert run_queued_events() == ["processed", "processed"]
    assert InboundEvent.objects.count() == 2
    assert Lead.objects.count() == 1
    assert Message.objects.filter(direction="in").count() == 2  # the description, then "Hello?"


def test_a_message_before_its_negotiation_waits_and_joins_the_thread_once_it_lands(tt_source: Source) -> None:
    post(MESSAGE)
    assert run_queued_events() == ["received"]  # waiting, not failed
    waiting = InboundEvent.objects.get()
    assert waiting.status == "received" and waiting.retry_at is not None
    assert "has not arrived yet" in waiting.error
    assert not Lead.objects.exists()

    post(NEGOTIATION)
    assert run_queued_events() == ["processed"]  # the negotiation, which makes the message due now
    waiting.refresh_from_db()
    assert waiting.retry_at is not None and waiting.retry_at <= datetime.now(UTC)
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    bodies = list(lead.messages.filter(direction="in").order_by("created_at").values_list("body", flat=True))
    assert bodies == [DESCRIPTION, json.loads(MESSAGE)["data"]["text"]]
    assert lead.touches.count() == 1


def test_a_customer_message_is_an_inbound_message_read_like_a_text(tt_source: Source) -> None:
    post(NEGOTIATION)
    post(message("Can you come tomorrow morning? What does a visit cost?", message_id="m2"))
    assert run_queued_events() == ["processed", "processed"]

    reply = Message.objects.get(provider_sid="thumbtack:m2")
    lead = Lead.objects.get()
    assert (reply.lead, reply.direction, reply.channel, reply.status) == (lead, "in", "thumbtack", "received")
    assert (reply.contact_point.kind, reply.contact_point.value) == ("thumbtack", CUSTOMER_ID)
    assert (reply.to, reply.from_number) == (NEGOTIATION_ID, CUSTOMER_ID)
    assert reply.intent == "price_question" and reply.intent_source  # read like a text
    assert reply.created_at == datetime(2026, 3, 14, 15, 6, 40, tzinfo=UTC)
    assert lead.touches.count() == 1  # a message in the thread is a reply, not a new touch


def test_the_lead_description_message_and_business_messages_are_not_the_persons(tt_source: Source) -> None:
    post(NEGOTIATION)
    post(message(DESCRIPTION, message_id="m3"))
    post(message("Thanks for reaching out! We can help.", message_id="m4", sender="Business"))

    assert run_queued_events() == ["processed", "ignored", "ignored"]
    assert Message.objects.filter(direction="in").count() == 1


def test_a_message_in_another_thread_of_the_same_person_joins_that_threads_lead(
    business: Business, tt_source: Source
) -> None:
    ServiceLine.objects.create(business=business, slug="water-heaters", name="Water heater", keywords=["water heater"])
    ServiceLine.objects.create(business=business, slug="drains", name="Drains", keywords=["drain"])
    post(NEGOTIATION)
    other = json.loads(NEGOTIATION)
    other["data"]["negotiationID"] = "600000000000000001"
    other["data"]["request"]["category"] = {"categoryID": "1", "name": "Drain Cleaning"}
    other["data"]["request"]["description"] = "Kitchen drain is backing up."
    post(other)
    note = message("The drain is worse today", message_id="m5")
    note["data"]["negotiationID"] = "600000000000000001"
    post(note)
    assert run_queued_events() == ["processed", "processed", "processed"]

    assert Lead.objects.count() == 2  # two needs, two leads
    reply = Message.objects.get(provider_sid="thumbtack:m5")
    assert reply.lead.touches.get().thread_id == "600000000000000001"
    assert reply.to == "600000000000000001"


def test_stop_in_the_thread_revokes_the_thread_and_sends_no_text_back(tt_source: Source) -> None:
    post(NEGOTIATION)
    post(message("STOP", message_id="m6"))
    assert run_queued_events() == ["processed", "processed"]

    point = ContactPoint.objects.get(kind="thumbtack")
    assert ConsentState.objects.get(contact_point=point).channel == "thumbtack"
    assert ConsentState.objects.get(contact_point=point).status == "revoked"
    # No SMS carrier rule inside Thumbtack: nothing is owed back.
    assert not Message.objects.filter(direction="out", idempotency_key__startswith="keyword-reply:").exists()


def test_a_malformed_body_is_stored_failed_and_replayable(tt_source: Source) -> None:
    body = copy.deepcopy(json.loads(NEGOTIATION))
    body["data"]["customer"] = "Olivia Y."  # an object is expected
    data = json.dumps(body).encode()

    response = post(data)

    assert response.status_code == 200
    assert "stored as failed" in response.json()["detail"]
    event = InboundEvent.objects.get()
    assert (event.status, event.kind) == ("failed", "delivery")
    assert event.error == "malformed payload: customer is not an object"
    assert bytes(event.body) == data
    assert run_queued_events() == []  # never processed on its own
    # Kept for a person: a replay runs it again (the same bytes fail the same way).
    assert event_replay(event) == "failed"
    assert not Lead.objects.exists()


def test_an_unreadable_body_is_stored_failed_too(tt_source: Source) -> None:
    response = post(b'{"eventType": "NegotiationCreatedV4", "data": {"negotiationID": "5191')

    assert response.status_code == 200
    event = InboundEvent.objects.get()
    assert event.status == "failed" and event.error.startswith("malformed payload: invalid JSON")


def test_another_event_type_is_kept_and_ignored(tt_source: Source) -> None:
    post({"eventType": "ReviewCreatedV4", "data": {"reviewID": "1", "rating": 5}})

    assert run_queued_events() == ["ignored"]


def test_a_negotiation_for_another_thumbtack_business_fails_visibly(tt_source: Source) -> None:
    body = json.loads(NEGOTIATION)
    body["data"]["business"]["businessID"] = "999"
    post(body)

    assert run_queued_events() == ["failed"]
    assert "is for Thumbtack business 999" in InboundEvent.objects.get().error
    assert not Lead.objects.exists()


def test_a_thumbtack_lead_without_sms_consent_is_acknowledged_in_the_thread(
    business: Business, tt_source: Source
) -> None:
    MessageTemplate.objects.create(
        business=business, key="ack_sms", channel="sms", approved=True, body="Hi {first_name}, this is {business}."
    )
    post(NEGOTIATION)
    assert run_queued_events() == ["processed"]

    ack = Message.objects.get(direction="out")
    lead = Lead.objects.get()
    assert ack.idempotency_key == f"ack:{lead.public_id}"
    assert (ack.channel, ack.to, ack.from_number, ack.status) == ("thumbtack", NEGOTIATION_ID, KEY, "dry_run")
    assert ack.body == "Hi Olivia, this is Acme Heating & Air."


def test_the_trace_may_contact_a_thumbtack_lead_in_its_thread_until_it_is_revoked(tt_source: Source) -> None:
    post(NEGOTIATION)
    assert run_queued_events() == ["processed"]
    lead = Lead.objects.select_related("business", "contact", "owner__user").get()

    answered = lead_trace(lead).questions[1]
    assert answered.ok and f"thumbtack to {CUSTOMER_ID}: yes, marketplace_thread" in answered.answer
    assert lead_first_breaks(Lead.objects.filter(pk=lead.pk))[lead.public_id] == lead_trace(lead).first_break

    post(message("STOP", message_id="m-stop"))
    assert run_queued_events() == ["processed"]
    revoked = lead_trace(lead)
    assert not revoked.questions[1].ok
    assert lead_first_breaks(Lead.objects.filter(pk=lead.pk))[lead.public_id] == revoked.first_break
