"""Intents in the workspace and the API: the inbox row shows what the
person's last message asks for, filters and sorts by it at a constant
number of queries, and the messages API carries it."""

from __future__ import annotations

from datetime import time, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from agents.followup.replies import reply_record
from agents.reader.model import reader
from crm.models import INTENTS, Business, Lead, Role, TeamMember
from crm.services import lead_sync
from tests.factories import BusinessFactory, lead_create, member_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def business(db: None) -> Business:
    return BusinessFactory.create(
        slug="acme", name="Acme", timezone="America/Chicago", quiet_hours_start=time(0), quiet_hours_end=time(23, 59)
    )


@pytest.fixture
def setter(business: Business) -> TeamMember:
    return member_create(business, Role.SETTER, username="sam")


def lead_saying(business: Business, owner: TeamMember, n: int, *texts: str) -> Lead:
    lead = lead_create(business, phone=f"+121255502{n:02d}", first_name=f"Person{n}", last_name="Doe")
    lead = lead_sync.lead_assign(lead, owner, actor="test", reason="test owner")
    for i, body in enumerate(texts):
        reply_record(lead, channel="sms", body=body, actor="test", now=timezone.now() - timedelta(minutes=10 - i))
    return lead


def login(member: TeamMember) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def rows(html: str) -> list[str]:
    return [part.split("</a>")[0].rsplit(">", 1)[-1] for part in html.split('class="row-name"')[1:]]


def test_the_inbox_row_shows_the_intent_of_the_last_message_in(business: Business, setter: TeamMember) -> None:
    lead_saying(business, setter, 1, "Can you come Tuesday?", "how much for a new furnace?")
    page = login(setter).get("/app/inbox/").content.decode()
    assert 'class="chip chip-intent intent-price_question"' in page and ">price question<" in page


def test_the_inbox_filters_and_sorts_by_intent(business: Business, setter: TeamMember) -> None:
    lead_saying(business, setter, 1, "how much for a new furnace?")
    lead_saying(business, setter, 2, "This is a scam, I'm calling my lawyer")
    lead_saying(business, setter, 3, "Can someone come out tomorrow morning?")
    client = login(setter)

    only = client.get("/app/inbox/", {"intent": "price_question"}).content.decode()
    assert rows(only) == ["Person1 Doe"]
    by_intent = client.get("/app/inbox/", {"sort": "intent"}).content.decode()
    assert rows(by_intent) == ["Person2 Doe", "Person3 Doe", "Person1 Doe"]  # complaint, booking, price
    # The pages link to themselves with the choice kept.
    assert "sort=intent" in by_intent


def test_filtering_and_sorting_by_intent_cost_the_same_queries_for_3_or_20_conversations(
    business: Business, setter: TeamMember, django_assert_num_queries: object
) -> None:
    for n in range(3):
        lead_saying(business, setter, n, "how much for a new furnace?")
    client = login(setter)
    client.get("/app/inbox/")

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get("/app/inbox/", {"sort": "intent", "intent": "price_question"}).status_code == 200
        return len(ctx.captured_queries)

    few = count()
    for n in range(3, 20):
        lead_saying(business, setter, n, "how much for a new furnace?", "And can you come Friday?")
        lead_saying(business, setter, 40 + n, "how much for a new furnace?")
    assert count() == few


def test_the_messages_api_carries_the_intent_and_who_read_it(business: Business, setter: TeamMember) -> None:
    lead = lead_saying(business, setter, 1, "no me escriban más")
    client = APIClient()
    client.force_login(setter.user)
    [row] = client.get("/api/v1/messages/", {"lead": lead.public_id}).json()["results"]
    assert (row["intent"], row["intent_source"]) == ("revocation", "reader")
    assert row["intent_confidence"] == pytest.approx(
        max(reader().read("no me escriban más").revocation, 0.9), abs=0.001
    )


def test_the_schema_documents_the_intent_fields(db: None) -> None:
    schema = APIClient().get("/api/schema/", {"format": "json"}).json()
    components = schema["components"]["schemas"]
    message = components["Message"]["properties"]

    def values(field: dict[str, Any]) -> set[str]:
        refs = [choice["$ref"].rsplit("/", 1)[-1] for choice in field["oneOf"]]
        return {value for ref in refs for value in components[ref]["enum"]}

    assert values(message["intent"]) == {*INTENTS, ""}
    assert message["intent_confidence"]["nullable"] is True and message["intent_confidence"]["type"] == "number"
    assert values(message["intent_source"]) == {"reader", "rules", "model", ""}


def test_the_thread_says_in_words_who_read_the_intent(business: Business, setter: TeamMember) -> None:
    lead = lead_saying(business, setter, 2, "how much is a new furnace installed?")
    client = Client()
    client.force_login(setter.user)
    page = client.get(f"/app/leads/{lead.public_id}/").content.decode()
    assert 'title="read by the trained reader, confidence' in page
