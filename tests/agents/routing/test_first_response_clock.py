"""The first-response clock: a missed call starts it like any new lead, and a
booked visit stops it (someone reached the person)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.orchestrator import orchestrate_pending
from crm import inbox
from crm.inbox import InboxQuery, inbox_page
from crm.models import Lead, Stage
from crm.services import lead_sync
from leadops.workspace.selectors import lead_for_thread, thread_read
from tests.factories import lead_create
from tests.helpers.twilio import (  # noqa: F401 - fixtures: pytest finds them here
    call_missed,
    twilio_settings,
    twilio_source,
)

pytestmark = pytest.mark.django_db


@pytest.mark.usefixtures("twilio_settings", "twilio_source")
def test_a_missed_call_from_a_new_caller_starts_the_first_response_clock(
    business, setter, django_capture_on_commit_callbacks
):
    call_missed(django_capture_on_commit_callbacks, sid="CA" + "4" * 32)
    orchestrate_pending()
    lead = Lead.objects.get()
    assert lead.first_response_at is None
    assert lead.sla_due_at is not None, "a caller nobody answered is waiting for a first response"


def test_a_booked_lead_has_no_first_response_clock(business, setter):
    lead = lead_create(business, phone="+12125550147")
    lead_sync.lead_assign(lead, setter, actor="test", reason="owner")
    now = timezone.now()
    lead_sync.lead_set_sla(lead, now + timedelta(minutes=5), actor="test", reason="t")
    lead_sync.lead_transition(lead, Stage.BOOKED, actor="test", reason="booked on Calendly")
    page = inbox_page(setter.user, InboxQuery(), now=now)
    assert [row.bucket for row in page.rows] == [inbox.REST]
    shown = lead_for_thread(setter.user, lead.public_id)
    assert shown is not None
    assert thread_read(setter.user, shown, now=now, tz=timezone.get_current_timezone()).sla.words == ""
