"""Replies inside a Thumbtack negotiation, through the one send gate and
dispatcher, against a real local server in Thumbtack's API shape
(devtools/simulator/marketplace_api.py): the first acknowledgement of a lead
without SMS consent, a setter's reply, Thumbtack's refusals and rate limits,
an answer lost in a timeout settled without a second post, and a person's
STOP in the thread."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from agents.first_response.acknowledge import lead_first_response
from agents.outbound.dispatch import message_dispatch
from agents.outbound.gate import message_send
from agents.outbound.reconcile import messages_reconcile
from crm.models import Business, ContactPoint, Lead, Message, MessageTemplate, Receipt, Source, Timer
from crm.services.consent import consent_record
from devtools.simulator.marketplace_api import MarketplaceServer
from tests.agents.capture.test_thumbtack import KEY, MESSAGE, NEGOTIATION, NEGOTIATION_ID, post, tt_source
from tests.helpers.capture import run_queued_events
from tests.helpers.marketplaces import marketplace

pytestmark = pytest.mark.django_db

__all__ = ["marketplace", "tt_source"]  # fixtures: pytest finds them here
TOKEN = "tt-access-token"
REPLY = "Thanks Olivia! We can be there tomorrow at 9. — Sam"
THREAD_PATH = f"/api/v4/negotiations/{NEGOTIATION_ID}/messages"


@pytest.fixture
def thumbtack(marketplace: MarketplaceServer, tt_source: Source) -> MarketplaceServer:
    marketplace.tokens = {TOKEN}
    return marketplace


@pytest.fixture
def playbook(business: Business) -> None:
    MessageTemplate.objects.create(
        business=business, key="ack_sms", channel="sms", approved=True, body="Hi {first_name}, this is {business}."
    )


def lead_in() -> Lead:
    post(NEGOTIATION)
    assert run_queued_events() == ["processed"]
    return Lead.objects.get()


def reply(lead: Lead, body: str = REPLY, *, key: str = "reply:1", **kw: Any) -> Message:
    return message_send(
        lead=lead, channel="thumbtack", body=body, actor="sam", idempotency_key=key, automated=False, **kw
    )


def actions(message: Message) -> list[str]:
    return list(Receipt.objects.filter(subject=message.public_id).order_by("pk").values_list("action", flat=True))


def later(minutes: int) -> datetime:
    return timezone.now() + timedelta(minutes=minutes)


def test_the_first_acknowledgement_of_a_lead_without_sms_consent_leaves_through_thumbtack(
    thumbtack: MarketplaceServer, playbook: None
) -> None:
    lead = lead_in()

    ack = Message.objects.get(direction="out")
    assert ack.idempotency_key == f"ack:{lead.public_id}"
    assert (ack.channel, ack.status, ack.to, ack.from_number) == ("thumbtack", "queued", NEGOTIATION_ID, KEY)
    assert ack.contact_point.kind == "thumbtack"
    assert message_dispatch(ack.pk) == "sent"

    [sent] = thumbtack.posts()
    assert sent["path"] == THREAD_PATH and sent["query"] == {}
    assert sent["authorization"] == f"Bearer {TOKEN}"
    assert sent["json"] == {"text": "Hi Olivia, this is Acme Heating & Air."}
    ack.refresh_from_db()
    [taken] = thumbtack.threads[NEGOTIATION_ID]
    assert (ack.status, ack.provider_sid) == ("sent", f"thumbtack:{taken['messageID']}")
    lead.refresh_from_db()
    assert lead.acknowledged_at is not None
    # Not a text: the person's phone was never texted.
    assert not Message.objects.filter(channel="sms").exists()


def test_with_consent_to_text_the_acknowledgement_is_a_text(business: Business, thumbtack: MarketplaceServer) -> None:
    lead = lead_in()  # no approved template yet: a person was asked to acknowledge
    assert not Message.objects.filter(direction="out").exists()
    MessageTemplate.objects.create(business=business, key="ack_sms", channel="sms", approved=True, body="Hi!")
    phone = ContactPoint.objects.get(kind="phone")
    consent_record(contact_point=phone, channel="sms", granted=True, basis="form_disclosure", actor="t")

    lead_first_response(lead.pk, now=timezone.now().replace(hour=17))

    ack = Message.objects.get(direction="out")
    assert (ack.channel, ack.to) == ("sms", "+13125550147")
    assert thumbtack.posts() == []


def test_a_setters_reply_goes_into_the_negotiation_not_by_sms(thumbtack: MarketplaceServer) -> None:
    lead = lead_in()

    message = reply(lead)

    assert (message.status, message.block_reason, message.to) == ("queued", "", NEGOTIATION_ID)
    assert message_dispatch(message.pk) == "sent"
    assert message_dispatch(message.pk) == "skipped"  # a redelivered task
    assert [p["json"] for p in thumbtack.posts()] == [{"text": REPLY}]
    message.refresh_from_db()
    assert message.status == "sent" and message.provider_sid.startswith("thumbtack:")
    assert actions(message) == ["message.queued", "message.sent"]


def test_an_answer_lost_in_a_timeout_is_found_in_the_thread_and_never_posted_twice(
    thumbtack: MarketplaceServer,
) -> None:
    message = reply(lead_in())
    thumbtack.plan = ["stall"]  # Thumbtack takes the message; its answer never comes

    assert message_dispatch(message.pk) == "unknown"
    assert messages_reconcile(now=later(2))["found"] == 1

    message.refresh_from_db()
    [taken] = thumbtack.threads[NEGOTIATION_ID]
    assert (message.status, message.provider_sid) == ("sent", f"thumbtack:{taken['messageID']}")
    assert len(thumbtack.posts()) == 1
    assert actions(message)[-1] == "message.reconciled_sent"


def test_a_reply_thumbtack_never_took_is_posted_again_after_the_sweep_reads_the_thread(
    thumbtack: MarketplaceServer,
) -> None:
    message = reply(lead_in())
    thumbtack.plan = [502]

    assert message_dispatch(message.pk) == "unknown"
    assert messages_reconcile(now=later(2))["requeued"] == 1
    assert message_dispatch(message.pk) == "sent"

    assert len(thumbtack.posts()) == 2 and len(thumbtack.threads[NEGOTIATION_ID]) == 1


def test_thumbtacks_rate_limit_queues_the_reply_again_with_a_backoff(thumbtack: MarketplaceServer) -> None:
    message = reply(lead_in())
    thumbtack.plan = [429]

    assert message_dispatch(message.pk) == "queued"

    message.refresh_from_db()
    assert (message.status, message.error_code) == ("queued", "429")
    assert Timer.objects.filter(kind="outbound.retry", payload={"message": message.pk}).exists()


def test_a_refusal_fails_the_reply_visibly(thumbtack: MarketplaceServer) -> None:
    message = reply(lead_in())
    thumbtack.plan = [403]

    assert message_dispatch(message.pk) == "failed"

    message.refresh_from_db()
    assert message.error_code == "HTTP 403"
    assert "HTTP 403" in Receipt.objects.get(subject=message.public_id, action="message.failed").reason


def test_a_source_without_an_access_token_fails_without_calling_thumbtack(thumbtack: MarketplaceServer) -> None:
    Source.objects.filter(key=KEY).update(page_token="")
    message = reply(lead_in())

    assert message_dispatch(message.pk) == "failed"
    message.refresh_from_db()
    assert message.error_code == "no_access_token"
    assert thumbtack.seen == []


def test_stop_in_the_thread_blocks_every_later_reply(thumbtack: MarketplaceServer) -> None:
    lead = lead_in()
    stop = json.loads(MESSAGE)
    stop["data"].update(messageID="m-stop", text="STOP")
    post(stop)
    assert run_queued_events() == ["processed"]

    message = reply(lead)

    assert (message.status, message.block_reason) == ("blocked", "revoked")
    assert thumbtack.posts() == []


def test_thumbtacks_echo_of_a_reply_whose_answer_was_lost_settles_it(thumbtack: MarketplaceServer) -> None:
    message = reply(lead_in())
    thumbtack.plan = ["stall"]
    assert message_dispatch(message.pk) == "unknown"
    [taken] = thumbtack.threads[NEGOTIATION_ID]

    echo = json.loads(MESSAGE)
    echo["data"].update(messageID=taken["messageID"], text=REPLY, **{"from": "Business"})
    post(echo)
    assert run_queued_events() == ["processed"]

    message.refresh_from_db()
    assert (message.status, message.provider_sid) == ("sent", f"thumbtack:{taken['messageID']}")
    assert not Message.objects.filter(direction="in", body=REPLY).exists()
