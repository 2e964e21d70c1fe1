"""Our own tracking numbers: a twilio source per number, with its campaign in
the business file. A call or text to it is attributed to that source and
campaign, a call is forwarded to the business line, and a missed call is
texted back from the number the person called. Driven through the real,
signed Twilio webhooks."""

from __future__ import annotations

import pytest

from agents.outbound.gate import sender_for
from crm.models import Business, Call, Lead, Message, Source
from crm.services.business_file import business_file_parse, business_spec_apply
from tests.helpers.capture import run_queued_events
from tests.helpers.twilio import CALLER, FORWARD_TO, LINE, SMS, STATUS, VOICE, deliver, dial_ended, incoming, text_in

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("twilio_settings")]

TRACKING = "+13125550177"
CAMPAIGN = "Yard signs 2026"
TEXT_BACK = "Sorry we missed your call to {business}. We will call you back shortly. Reply STOP to opt out."
BUSINESS_FILE = f"""\
business: {{slug: acme, name: Acme Heating & Air, timezone: America/Chicago}}
sources:
  - {{key: main-line, provider: twilio, phone_number: "{LINE}", forward_to: "{FORWARD_TO}"}}
  - key: yard-signs
    provider: twilio
    phone_number: "(312) 555-0177"
    forward_to: "{FORWARD_TO}"
    campaign: {CAMPAIGN}
    utm_source: yard_sign
    utm_medium: offline
    keyword: furnace repair
policy: {{missed_call_text_back: true, quiet_hours: "00:00-24:00"}}
templates:
  - {{key: missed_call_sms, channel: sms, approved: true, body: "{TEXT_BACK}"}}
"""
SID = "CA" + "7" * 32


@pytest.fixture
def tracking_line(business: Business, setter, manager) -> Source:
    business_spec_apply(business_file_parse(BUSINESS_FILE))
    return Source.objects.get(key="yard-signs")


def test_the_business_file_keeps_the_tracking_numbers_campaign_on_its_source(tracking_line):
    assert tracking_line.config == {
        "phone_number": TRACKING,
        "forward_to": FORWARD_TO,
        "campaign": CAMPAIGN,
        "utm_source": "yard_sign",
        "utm_medium": "offline",
        "keyword": "furnace repair",
    }


def test_a_call_to_a_tracking_number_is_forwarded_and_lands_attributed_to_its_campaign(
    tracking_line, django_capture_on_commit_callbacks
):
    response = deliver(django_capture_on_commit_callbacks, VOICE, incoming(to=TRACKING, sid=SID))
    twiml = response.content.decode()
    assert f"<Number>{FORWARD_TO}</Number>" in twiml and f'callerId="{CALLER}"' in twiml
    assert run_queued_events() == ["processed"]

    touch = Lead.objects.get().touches.get()
    assert (touch.channel, touch.provider, touch.source) == ("call", "twilio", tracking_line)
    assert touch.campaign_id == CAMPAIGN
    assert touch.utm == {"source": "yard_sign", "medium": "offline", "campaign": CAMPAIGN, "term": "furnace repair"}
    assert Call.objects.get().to == TRACKING


def test_a_missed_call_on_a_tracking_number_is_texted_back_from_that_number(
    tracking_line, django_capture_on_commit_callbacks
):
    deliver(django_capture_on_commit_callbacks, VOICE, incoming(to=TRACKING, sid=SID))
    assert run_queued_events() == ["processed"]
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer", CallSid=SID, To=TRACKING))
    assert run_queued_events() == ["processed"]

    (text,) = Message.objects.filter(direction="out")
    assert (text.actor, text.status, text.to) == ("agent:missed_call", "dry_run", CALLER)
    assert text.from_number == TRACKING
    lead = Lead.objects.get()
    assert lead.contact.sticky_from_number == TRACKING
    assert lead.tasks.get(status="open").title.startswith(f"Call back {CALLER}")


def test_a_text_to_a_tracking_number_is_attributed_to_its_campaign_and_answered_from_it(
    tracking_line, django_capture_on_commit_callbacks
):
    deliver(django_capture_on_commit_callbacks, SMS, text_in("Saw your sign, do you fix furnaces?", To=TRACKING))
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    touch = lead.touches.get()
    assert (touch.channel, touch.source, touch.campaign_id) == ("sms", tracking_line, CAMPAIGN)
    (message,) = Message.objects.filter(direction="in")
    assert message.to == TRACKING
    assert sender_for(lead.contact, "sms") == TRACKING


def test_a_person_who_reached_the_main_line_first_keeps_it_as_their_one_sender(
    tracking_line, django_capture_on_commit_callbacks
):
    deliver(django_capture_on_commit_callbacks, SMS, text_in("Hi, is this Acme?"))
    assert run_queued_events() == ["processed"]
    deliver(django_capture_on_commit_callbacks, VOICE, incoming(to=TRACKING, sid=SID))
    deliver(django_capture_on_commit_callbacks, STATUS, dial_ended("no-answer", CallSid=SID, To=TRACKING))
    assert run_queued_events() == ["processed", "processed"]

    (text,) = Message.objects.filter(direction="out")
    assert text.from_number == LINE
    # The call still counts for the campaign whose number was called.
    touches = Lead.objects.get().touches.order_by("received_at", "pk")
    assert [(t.channel, t.campaign_id) for t in touches] == [("sms", ""), ("call", CAMPAIGN)]


def test_a_line_without_a_campaign_stamps_none(tracking_line, django_capture_on_commit_callbacks):
    deliver(django_capture_on_commit_callbacks, VOICE, incoming(sid=SID))
    assert run_queued_events() == ["processed"]
    touch = Lead.objects.get().touches.get()
    assert (touch.source.key, touch.campaign_id, touch.utm) == ("main-line", "", {})
