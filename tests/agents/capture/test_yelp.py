"""Yelp Leads: unsigned notifications kept only for our businesses, the lead
and its thread read back from Yelp's Leads API (a real local stand-in:
devtools/simulator/marketplace_api.py) with the source's token, each event once,
the daily resync of missed leads, marking read only what a person read, and
the webhook subscription."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from agents.capture.processing import event_process, event_replay
from agents.capture.providers.yelp_sync import yelp_sync
from crm.models import Business, InboundEvent, Lead, Message, PollCursor, RejectedDelivery, Role, Source
from crm.services.conversations import conversation_read
from devtools.simulator.marketplace_api import MarketplaceServer
from tests.factories import member_create
from tests.helpers.capture import run_queued_events
from tests.helpers.marketplaces import marketplace

pytestmark = pytest.mark.django_db

__all__ = ["marketplace"]  # a fixture: pytest finds it here
SAMPLES = Path(__file__).parent / "samples"
WEBHOOK = (SAMPLES / "yelp_webhook.json").read_bytes()
LEAD = json.loads((SAMPLES / "yelp_lead.json").read_bytes())
EVENTS = json.loads((SAMPLES / "yelp_lead_events.json").read_bytes())["events"]
BUSINESS_ID = "SoVHhx7Hel_XX0DKCLp72Q"
LEAD_ID = "TbvEUYEi02cmSBmqCjQbkg"
EVENT_ID = "IsKxQAYZNqCjvRRmNoiCUw"
FIRST_TEXT = EVENTS[0]["event_content"]["text"]
TOKEN, API_KEY = "yelp-biz-user-token", "yelp-partner-api-key"
URL = "/hooks/yelp/"


@pytest.fixture
def yelp_source(business: Business) -> Source:
    return Source.objects.create(
        business=business,
        key="yelp-acme",
        provider="yelp",
        secret=API_KEY,
        page_token=TOKEN,
        config={"business_id": BUSINESS_ID},
    )


@pytest.fixture
def yelp(marketplace: MarketplaceServer, yelp_source: Source) -> MarketplaceServer:
    marketplace.tokens = {TOKEN, API_KEY}
    return marketplace


def post(body: bytes | dict[str, Any]) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Client().post(URL, data=data, content_type="application/json")


def notification(event_id: str, *, lead_id: str = LEAD_ID, business_id: str = BUSINESS_ID) -> dict[str, Any]:
    body = json.loads(WEBHOOK)
    body["data"]["id"] = business_id
    body["data"]["updates"][0].update(event_id=event_id, lead_id=lead_id)
    return body


def consumer_event(event_id: str, text: str, *, minutes: int = 5) -> dict[str, Any]:
    event = copy.deepcopy(EVENTS[0])
    at = (timezone.now() - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    event.update(id=event_id, cursor=f"c-{event_id}", time_created=at)
    event["event_content"] = {"text": text, "fallback_text": text}
    return event


def test_yelps_verification_is_answered_with_its_string() -> None:
    assert Client().get(URL, {"verification": "abcXYZ123"}).json() == {"verification": "abcXYZ123"}
    assert Client().get(URL, {"verification": "<script>"}).status_code == 400


def test_a_notification_is_stored_then_the_lead_is_read_from_yelp_with_its_source_and_campaign(
    yelp: MarketplaceServer, yelp_source: Source
) -> None:
    yelp.yelp_lead(LEAD, EVENTS)

    response = post(WEBHOOK)

    assert response.status_code == 200 and response.json()["duplicate"] is False
    event = InboundEvent.objects.get()
    assert (event.provider, event.kind, event.external_id, event.source) == (
        "yelp",
        "lead_event",
        EVENT_ID,
        yelp_source,
    )
    assert bytes(event.body) == WEBHOOK
    assert yelp.seen == []  # nothing read before the event is stored
    assert run_queued_events() == ["processed"]

    assert [(r["method"], r["path"]) for r in yelp.seen] == [
        ("GET", f"/v3/leads/{LEAD_ID}"),
        ("GET", f"/v3/leads/{LEAD_ID}/events"),
    ]
    assert {r["authorization"] for r in yelp.seen} == {f"Bearer {TOKEN}"}
    lead = Lead.objects.get()
    contact = lead.contact
    assert (contact.first_name, contact.last_name, contact.postal_code) == ("Austin", "D.", "60614")
    assert {(p.kind, p.value) for p in contact.points.all()} == {("yelp", LEAD_ID), ("phone", "+13125550188")}
    touch = lead.touches.get()
    assert (touch.provider, touch.channel, touch.source) == ("yelp", "yelp", yelp_source)
    assert (touch.campaign_id, touch.thread_id) == ("Water Heater Repair", LEAD_ID)
    assert touch.answers["survey"] == {
        "What type of water heater do you have?": "Tank (gas)",
        "What's the issue?": ["Leaking", "No hot water"],
    }
    assert touch.answers["job_names"] == ["Water Heater Repair"]
    assert lead.request_text == LEAD["project"]["additional_info"]
    message = lead.messages.get(direction="in")
    assert (message.channel, message.body, message.provider_sid) == ("yelp", FIRST_TEXT, f"yelp:{EVENT_ID}")
    assert (message.contact_point.kind, message.to) == ("yelp", LEAD_ID)


def test_a_notification_for_a_business_we_do_not_hold_is_refused_counted_and_not_stored(
    yelp: MarketplaceServer,
) -> None:
    stranger = post(notification("e1", business_id="someone-elses-business"))
    garbage = post(b"not json at all")

    assert [stranger.status_code, garbage.status_code] == [403, 403]
    assert stranger.json()["error"] == "unknown_business"
    assert not InboundEvent.objects.exists()
    assert RejectedDelivery.objects.get().count == 2
    assert yelp.seen == []


def test_a_forged_lead_id_for_our_business_records_nothing(yelp: MarketplaceServer) -> None:
    post(notification("forged-event", lead_id="no-such-lead"))

    assert run_queued_events() == ["failed"]
    event = InboundEvent.objects.get()
    assert "HTTP 404" in event.error and TOKEN not in event.error
    assert not Lead.objects.exists()


def test_a_repeated_notification_is_acknowledged_and_not_processed_again(yelp: MarketplaceServer) -> None:
    yelp.yelp_lead(LEAD, EVENTS)

    assert post(WEBHOOK).json()["duplicate"] is False
    assert post(WEBHOOK).json()["duplicate"] is True

    assert run_queued_events() == ["processed"]
    assert InboundEvent.objects.count() == 1 and Message.objects.filter(direction="in").count() == 1


def test_a_later_message_is_recorded_once_on_the_thread(yelp: MarketplaceServer) -> None:
    yelp.yelp_lead(LEAD, EVENTS)
    post(WEBHOOK)
    assert run_queued_events() == ["processed"]

    yelp.yelp_event(LEAD_ID, consumer_event("e2", "Tomorrow after 3 works for us", minutes=1))
    post(notification("e2"))
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    bodies = list(lead.messages.filter(direction="in").order_by("created_at").values_list("body", flat=True))
    assert bodies == [FIRST_TEXT, "Tomorrow after 3 works for us"]
    assert lead.touches.count() == 1
    assert Message.objects.get(provider_sid="yelp:e2").channel == "yelp"


def test_a_message_announced_before_its_lead_records_the_whole_thread_in_order(yelp: MarketplaceServer) -> None:
    yelp.yelp_lead(LEAD, [*EVENTS, consumer_event("e2", "Also the pilot light is out", minutes=1)])
    post(notification("e2"))  # the second message's notification comes first
    post(WEBHOOK)

    assert run_queued_events() == ["processed", "ignored"]  # the first read the whole thread

    lead = Lead.objects.get()
    bodies = list(lead.messages.filter(direction="in").order_by("created_at").values_list("body", flat=True))
    assert bodies == [FIRST_TEXT, "Also the pilot light is out"]


def test_a_notification_yelp_cannot_answer_yet_waits_and_is_read_later(yelp: MarketplaceServer) -> None:
    post(WEBHOOK)  # Yelp does not show the lead through its API yet

    assert run_queued_events() == ["failed"]
    event = InboundEvent.objects.get()
    assert event.retry_at is not None and not Lead.objects.exists()

    yelp.yelp_lead(LEAD, EVENTS)
    assert event_process(event.pk, now=event.retry_at + timedelta(seconds=1)) == "processed"
    assert Lead.objects.get().messages.get(direction="in").body == FIRST_TEXT


def test_a_malformed_body_about_our_business_is_stored_failed_and_replayable(yelp: MarketplaceServer) -> None:
    body = json.dumps({"object": "business", "data": {"id": BUSINESS_ID, "updates": "NEW_EVENT"}}).encode()

    response = post(body)

    assert response.status_code == 200
    event = InboundEvent.objects.get()
    assert (event.status, event.kind) == ("failed", "delivery")
    assert event.error == "malformed payload: data.updates is not a list"
    assert bytes(event.body) == body
    assert event_replay(event) == "failed"  # kept, and replayed on demand: the same bytes fail alike
    assert not Lead.objects.exists()


def test_the_daily_resync_stores_the_leads_a_webhook_missed(yelp: MarketplaceServer, yelp_source: Source) -> None:
    other = {**copy.deepcopy(LEAD), "id": "SecondLead0000000000aa", "user": {"display_name": "Rosa Diaz"}}
    other.pop("phone_number")
    yelp.yelp_lead(LEAD, EVENTS)
    yelp.yelp_lead(other, [consumer_event("o1", "Need a quote for a new water heater")])

    counts = yelp_sync()

    assert counts["resynced_sources"] == 1 and counts["leads_stored"] == 2
    assert sorted(InboundEvent.objects.values_list("kind", flat=True)) == ["lead_sync", "lead_sync"]
    assert run_queued_events() == ["processed", "processed"]
    assert sorted(Lead.objects.values_list("contact__first_name", flat=True)) == ["Austin", "Rosa"]
    assert PollCursor.objects.get(source=yelp_source, name="yelp_resync").value
    # Once a day: the next run lists nothing.
    assert yelp_sync()["resynced_sources"] == 0
    assert len([r for r in yelp.seen if r["path"].endswith("/lead_ids")]) == 1


def test_a_resync_yelp_does_not_answer_is_tried_again_on_the_next_run(
    yelp: MarketplaceServer, yelp_source: Source
) -> None:
    yelp.yelp_lead(LEAD, EVENTS)
    yelp.plan = [503]

    assert yelp_sync()["resynced_sources"] == 0
    assert yelp_sync()["leads_stored"] == 1


def test_a_thread_is_marked_read_at_yelp_only_after_a_person_read_it(
    business: Business, yelp: MarketplaceServer
) -> None:
    yelp.yelp_lead(LEAD, EVENTS)
    post(WEBHOOK)
    assert run_queued_events() == ["processed"]
    lead = Lead.objects.get()
    PollCursor.objects.create(
        source=Source.objects.get(key="yelp-acme"), name="yelp_resync", value=timezone.now().isoformat()
    )

    assert yelp_sync()["marked_read"] == 0
    assert yelp.read == []

    setter = member_create(business, Role.SETTER, username="sam")
    conversation_read(setter.user, lead)
    assert yelp_sync()["marked_read"] == 1
    assert yelp.read == [LEAD_ID]
    [mark] = yelp.posts("/v3/leads/")
    assert mark["authorization"] == f"Bearer {TOKEN}"
    # Read once, marked once.
    assert yelp_sync()["marked_read"] == 0 and yelp.read == [LEAD_ID]


def test_a_mark_yelp_refuses_is_tried_again(business: Business, yelp: MarketplaceServer) -> None:
    yelp.yelp_lead(LEAD, EVENTS)
    post(WEBHOOK)
    run_queued_events()
    PollCursor.objects.create(
        source=Source.objects.get(key="yelp-acme"), name="yelp_resync", value=timezone.now().isoformat()
    )
    conversation_read(member_create(business, Role.SETTER, username="sam").user, Lead.objects.get())
    yelp.plan = [500]

    assert yelp_sync()["failed"] == 1
    assert yelp_sync()["marked_read"] == 1 and yelp.read == [LEAD_ID]


def test_the_subscribe_command_asks_yelp_for_the_business_webhooks(yelp: MarketplaceServer) -> None:
    call_command("yelp_subscribe", "yelp-acme")

    assert yelp.subscriptions == [{"subscription_types": ["WEBHOOK"], "business_ids": [BUSINESS_ID]}]
    assert yelp.posts()[0]["authorization"] == f"Bearer {API_KEY}"
