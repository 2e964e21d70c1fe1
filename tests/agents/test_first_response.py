"""First response: acknowledge through the gate, hand over, tell the owner."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail

from agents.first_response.acknowledge import lead_first_response
from crm.models import Lead, Message, MessageTemplate, Role
from crm.services.consent import consent_record
from tests.agents.notices import run_queued_notices
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db
NOON_NY = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)


@pytest.fixture
def playbook(business):
    MessageTemplate.objects.create(
        business=business,
        key="ack_sms",
        channel="sms",
        approved=True,
        body="Hi {first_name}, this is {business}. We got your request. Reply STOP to opt out.",
    )


@pytest.fixture
def boss(business):
    return member_create(business, Role.MANAGER, username="mia", email="mia@example.com")


def with_consent(lead: Lead) -> Lead:
    consent_record(
        contact_point=lead.contact.points.get(), channel="sms", granted=True, basis="form_disclosure", actor="t"
    )
    return lead


def test_a_new_lead_is_acknowledged_handed_over_and_announced(
    business, playbook, boss, django_capture_on_commit_callbacks
):
    lead = with_consent(lead_create(business, first_name="Rosa"))
    with django_capture_on_commit_callbacks(execute=True):
        assert lead_first_response(lead.pk, now=NOON_NY) == "dry_run"
    ack = Message.objects.get(direction="out")
    assert ack.body == f"Hi Rosa, this is {business.name}. We got your request. Reply STOP to opt out."
    lead.refresh_from_db()
    assert lead.acknowledged_at is not None and lead.first_response_at is None
    assert lead.next_action == "First contact: reach Rosa Doe" and lead.next_action_due_at is not None
    task = lead.tasks.get(kind="next_action")
    assert task.owner == boss
    run_queued_notices()
    assert mail.outbox[0].to == ["mia@example.com"] and lead.public_id in mail.outbox[0].body


def test_a_redelivered_first_response_does_nothing_more(business, playbook, boss):
    lead = with_consent(lead_create(business))
    lead_first_response(lead.pk, now=NOON_NY)
    assert lead_first_response(lead.pk, now=NOON_NY) == "skipped"
    assert Message.objects.filter(direction="out").count() == 1 and lead.tasks.count() == 1


def test_without_consent_the_gate_blocks_and_a_person_gets_the_task(business, playbook, boss):
    lead = lead_create(business)
    assert lead_first_response(lead.pk, now=NOON_NY) == "blocked"
    assert Message.objects.get(direction="out").block_reason == "no_consent"
    assert Lead.objects.get(pk=lead.pk).acknowledged_at is None
    assert lead.tasks.filter(kind="follow_up", title__startswith="Reach this lead yourself").exists()


def test_without_an_approved_acknowledgement_a_person_acknowledges(business, boss):
    lead = with_consent(lead_create(business))
    assert lead_first_response(lead.pk, now=NOON_NY) == "task"
    assert not Message.objects.filter(direction="out").exists()
    assert lead.tasks.filter(title="Acknowledge this lead yourself").exists()


def test_test_leads_get_no_first_response(business, playbook, boss):
    lead = with_consent(lead_create(business))
    Lead.objects.filter(pk=lead.pk).update(is_test=True)
    assert lead_first_response(lead.pk, now=NOON_NY) == "skipped"


def test_the_owner_notice_also_goes_to_slack_when_configured(
    business, playbook, boss, settings, django_capture_on_commit_callbacks
):
    received: list[dict] = []

    class Slack(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slack)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        settings.SLACK_WEBHOOK_URL = f"http://127.0.0.1:{server.server_address[1]}/hook"
        lead = with_consent(lead_create(business))
        with django_capture_on_commit_callbacks(execute=True):
            lead_first_response(lead.pk, now=NOON_NY)
        assert received == []  # a task of its own posts it
        run_queued_notices()
    finally:
        server.shutdown()
    assert len(received) == 1 and lead.public_id in received[0]["text"]


def test_a_lead_booked_before_its_first_response_gets_no_acknowledgement(business, playbook, boss):
    from datetime import timedelta

    from crm.services.records import appointment_record

    lead = with_consent(lead_create(business, first_name="Quick"))
    appointment_record(
        lead=lead, starts_at=NOON_NY + timedelta(days=1), ends_at=NOON_NY + timedelta(days=1, hours=1), actor="sam"
    )
    assert lead_first_response(lead.pk, now=NOON_NY) == "not sent: the lead is already new"
    assert not Message.objects.filter(lead=lead, direction="out").exists()
    lead.refresh_from_db()
    assert lead.next_action == "First contact: reach Quick Doe", "the person still owns a next action"
