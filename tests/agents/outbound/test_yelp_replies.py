"""Replies to a Yelp lead go back into its thread as lead events through
Yelp's Leads API (a real local stand-in: devtools/simulator/marketplace_api.py),
never as texts to the phone Yelp shares, through the one gate and dispatcher."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.outbound.dispatch import message_dispatch
from agents.outbound.gate import message_send
from agents.outbound.reconcile import messages_reconcile
from crm.models import Business, Lead, Message, MessageTemplate
from devtools.simulator.marketplace_api import MarketplaceServer
from tests.agents.capture.test_yelp import EVENTS, LEAD, LEAD_ID, TOKEN, WEBHOOK, post, yelp, yelp_source
from tests.helpers.capture import run_queued_events
from tests.helpers.marketplaces import marketplace

pytestmark = pytest.mark.django_db

__all__ = ["marketplace", "yelp", "yelp_source"]  # fixtures: pytest finds them here
REPLY = "Hi Austin, we can come tomorrow at 10. — Sam"
EVENTS_PATH = f"/v3/leads/{LEAD_ID}/events"


def lead_in(server: MarketplaceServer) -> Lead:
    server.yelp_lead(LEAD, EVENTS)
    post(WEBHOOK)
    assert run_queued_events() == ["processed"]
    return Lead.objects.get()


def reply(lead: Lead, body: str = REPLY) -> Message:
    return message_send(lead=lead, channel="yelp", body=body, actor="sam", idempotency_key="reply:1", automated=False)


def test_a_reply_goes_back_as_a_yelp_lead_event_not_as_a_text(yelp: MarketplaceServer) -> None:
    message = reply(lead_in(yelp))

    assert (message.status, message.to, message.from_number) == ("queued", LEAD_ID, "yelp-acme")
    assert message_dispatch(message.pk) == "sent"

    [sent] = [p for p in yelp.posts() if p["path"] == EVENTS_PATH]
    assert sent["json"] == {"request_content": REPLY, "request_type": "TEXT"}
    assert sent["authorization"] == f"Bearer {TOKEN}"
    message.refresh_from_db()
    assert message.status == "sent"
    assert not Message.objects.filter(channel="sms").exists()


def test_the_first_acknowledgement_of_a_yelp_lead_without_consent_to_text_goes_to_yelp(
    business: Business, yelp: MarketplaceServer
) -> None:
    MessageTemplate.objects.create(
        business=business, key="ack_sms", channel="sms", approved=True, body="Hi {first_name}, this is {business}."
    )
    lead = lead_in(yelp)  # Yelp shares the person's phone, with no consent to text it

    ack = Message.objects.get(direction="out")
    assert (ack.idempotency_key, ack.channel, ack.to) == (f"ack:{lead.public_id}", "yelp", LEAD_ID)
    assert message_dispatch(ack.pk) == "sent"
    assert [p["json"]["request_content"] for p in yelp.posts(EVENTS_PATH)] == ["Hi Austin, this is Acme Heating & Air."]


def test_a_yelp_reply_whose_answer_was_lost_is_found_among_the_leads_events(yelp: MarketplaceServer) -> None:
    message = reply(lead_in(yelp))
    yelp.plan = ["stall"]

    assert message_dispatch(message.pk) == "unknown"
    assert messages_reconcile(now=timezone.now() + timedelta(minutes=2))["found"] == 1

    message.refresh_from_db()
    biz = [e for e in yelp.events[LEAD_ID] if e["user_type"] == "BIZ"]
    assert (message.status, message.provider_sid) == ("sent", f"yelp:{biz[0]['id']}")
    assert len(yelp.posts(EVENTS_PATH)) == 1
