"""Know the line before texting: with `policy.line_type_lookup` on, the
first text to a number asks Twilio Lookup v2 what line it is (the real
twilio SDK against scripts.fake_twilio, Lookup's shape); a landline or a
toll-free number gets a call task instead of a text (a number that reads
as toll-free is refused by the gate before any lookup), the answer is kept per
number, and a Lookup that cannot answer never holds a text back."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from agents.outbound.dispatch import message_dispatch
from agents.outbound.gate import message_send
from crm.models import Business, Message, NumberLookup, Receipt, Role, Task
from crm.services.business_file import BusinessFileError, business_file_parse, business_spec_apply
from crm.services.consent import consent_record
from scripts.fake_twilio import FakeTwilio
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db

NOON_NY = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)
SID, TOKEN, LINE = "AC" + "a" * 32, "acme-own-token-1111", "+13125550100"
LANDLINE, MOBILE = "+12125550147", "+12125550148"


@pytest.fixture
def twilio(settings: Any) -> Iterator[FakeTwilio]:
    fake = FakeTwilio({SID: TOKEN}, lines={LANDLINE: "landline"})
    fake.start()
    settings.SEND_MODE = "live"
    settings.TWILIO_API_BASE_URL = fake.url
    settings.TWILIO_LOOKUP_URL = ""
    yield fake
    fake.stop()


def load(lookup: bool) -> Business:
    policy = "\npolicy: {line_type_lookup: true}" if lookup else ""
    text = f"""
business: {{slug: acme, name: Acme, timezone: America/New_York, region: US}}{policy}
sources:
  - {{key: acme-line, provider: twilio, phone_number: "{LINE}", account_sid: "{SID}", auth_token: "{TOKEN}"}}
"""
    business_spec_apply(business_file_parse(text, path="acme.yaml"))
    return Business.objects.get(slug="acme")


def queue(business: Business, phone: str, key: str = "1") -> Message:
    lead = next(iter(business.leads.filter(contact__points__value=phone)), None) or lead_create(
        business, phone=phone, first_name="Rosa", last_name="Diaz"
    )
    consent_record(
        contact_point=lead.contact.points.get(), channel="sms", granted=True, basis="form_disclosure", actor="t"
    )
    message = message_send(
        lead=lead,
        channel="sms",
        body="Hello from Acme.",
        actor="agent:ack",
        idempotency_key=f"acme:{phone}:{key}",
        automated=True,
        now=NOON_NY,
    )
    assert message.status == "queued"
    return message


def test_a_text_to_a_landline_becomes_a_call_task_and_never_reaches_twilio(twilio):
    business = load(lookup=True)
    manager = member_create(business, Role.MANAGER, username="mia")
    message = queue(business, LANDLINE)

    assert message_dispatch(message.pk) == "failed"

    message.refresh_from_db()
    assert (message.status, message.block_reason, message.error_code) == ("failed", "cannot_text", "lookup:landline")
    assert twilio.taken() == []  # no text went to Twilio
    task = Task.objects.get(lead=message.lead, kind="follow_up")
    assert task.title == f"Call Rosa Diaz: {LANDLINE} is a landline and cannot take texts"
    assert task.owner == manager  # the lead has no owner yet: its manager calls
    receipt = Receipt.objects.get(subject=message.public_id, action="message.failed")
    assert "is a landline line, which cannot take texts" in receipt.reason
    kept = NumberLookup.objects.get(number=LANDLINE)
    assert (kept.line_type, kept.carrier_name) == ("landline", "AT&T Local")


def test_a_mobile_is_texted_and_looked_up_once_however_many_texts_follow(twilio):
    business = load(lookup=True)

    assert message_dispatch(queue(business, MOBILE, "1").pk) == "sent"
    assert message_dispatch(queue(business, MOBILE, "2").pk) == "sent"

    assert twilio.lookups == {MOBILE: 1}
    assert len(twilio.taken()) == 2
    lookup = next(s for s in twilio.seen if s.path.startswith("/v2/"))
    assert (lookup.username, lookup.password) == (SID, TOKEN)  # the business's own account asks
    assert lookup.form == {"Fields": "line_type_intelligence"}
    assert NumberLookup.objects.get(number=MOBILE).line_type == "mobile"


def test_a_business_that_does_not_look_up_texts_without_asking(twilio):
    business = load(lookup=False)
    assert message_dispatch(queue(business, LANDLINE).pk) == "sent"
    assert twilio.lookups == {}
    assert not NumberLookup.objects.exists()


def test_a_lookup_that_cannot_answer_never_holds_a_text_back(twilio, settings):
    business = load(lookup=True)
    with socket.socket() as closed:  # a port nothing listens on: Lookup is unreachable
        closed.bind(("127.0.0.1", 0))
        settings.TWILIO_LOOKUP_URL = f"http://127.0.0.1:{closed.getsockname()[1]}"
    assert message_dispatch(queue(business, LANDLINE).pk) == "sent"
    assert not NumberLookup.objects.exists()  # nothing kept: the next text asks again


def test_the_thread_says_what_line_each_number_is(twilio):
    business = load(lookup=True)
    manager = member_create(business, Role.MANAGER, username="mia")
    message = queue(business, LANDLINE)
    message_dispatch(message.pk)
    client = Client()
    client.force_login(manager.user)

    page = client.get(f"/app/leads/{message.lead.public_id}/").content.decode()

    assert '<span class="line-type" title="What Twilio Lookup says this number is">landline</span>' in page


def test_the_business_file_switch_is_refused_when_it_is_not_a_yes_or_no():
    text = "business: {slug: acme, name: Acme, timezone: America/New_York, region: US}\n"
    text += "policy: {line_type_lookup: maybe}\n"
    with pytest.raises(BusinessFileError, match="line_type_lookup"):
        business_file_parse(text, path="acme.yaml")
