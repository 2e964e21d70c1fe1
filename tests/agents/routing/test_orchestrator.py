"""The Lead Orchestrator's table, row by row (the rows of routing and SLA;
follow-up, booking and revenue rows are tested beside their roles)."""

from __future__ import annotations

from datetime import time, timedelta

import pytest
from django.utils import timezone

from agents.events import EVENTS, lead_event
from agents.orchestrator import STEPS, orchestrate, orchestrate_pending
from approvals.models import ApprovalRequest
from crm.models import Lead, Message, MessageTemplate, Receipt, Role, ServiceArea, Task, Timer
from crm.services.records import contact_create, lead_open
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(business):
    business.quiet_hours_start, business.quiet_hours_end = time(0, 0), time(23, 59, 59)
    business.save()
    MessageTemplate.objects.create(
        business=business,
        key="ack_sms",
        channel="sms",
        approved=True,
        body="Hi {first_name}, this is {business}. We got your request. Reply STOP to opt out.",
    )
    ServiceArea.objects.create(business=business, name="Metro", postal_codes=["606*"])
    return member_create(business, Role.SETTER, username="sam"), member_create(business, Role.MANAGER, username="mia")


def _step_receipt(lead: Lead, event: str) -> Receipt:
    return Receipt.objects.get(lead=lead, action__in=["orchestrator.step", "orchestrator.stopped"], after__event=event)


def test_the_table_has_one_step_for_every_event() -> None:
    assert set(STEPS) == set(EVENTS)
    with pytest.raises(ValueError, match="unknown lead event"):
        lead_event(Lead(), "lead.teleported", key="x")


def test_new_lead_gets_fit_owner_next_action_and_an_sla_clock(business, team) -> None:
    sam, _ = team
    lead = lead_create(business, first_name="Rosa")
    lead.contact.postal_code = "60614"
    lead.contact.save()
    lead_event(lead, "lead.new", key=lead.public_id)
    orchestrate_pending()
    lead.refresh_from_db()
    assert lead.owner == sam and lead.stage == "assigned"
    assert lead.facts["territory"] == "in_area" and lead.fit_score is not None and lead.fit_reasons
    task = Task.objects.get(lead=lead, kind="next_action", status="open")
    assert task.owner == sam and task.title == "First contact: reach Rosa Doe" and task.due_at == lead.sla_due_at
    assert lead.next_action == task.title
    sla = Timer.objects.get(lead=lead, kind="orchestrate", payload__event="sla.due")
    assert sla.status == "pending" and sla.due_at == lead.sla_due_at
    assert Message.objects.filter(lead=lead, idempotency_key=f"ack:{lead.public_id}").exists()
    assert "fit" in _step_receipt(lead, "lead.new").after["outcome"]


def test_a_lead_without_a_postal_code_is_asked_for_one(business, team) -> None:
    lead = lead_create(business, first_name="Noel")
    lead_event(lead, "lead.new", key=lead.public_id)
    orchestrate_pending()
    lead.refresh_from_db()
    assert lead.next_action == "First contact: reach Noel Doe and ask for their postal code"
    assert lead.facts["territory"] == "unknown" and "out_of_area" not in lead.exceptions


def test_new_lead_stops_for_a_person_when_nobody_can_be_contacted(business, team) -> None:
    contact = contact_create(business=business, actor="t", first_name="Ghost")
    lead = lead_open(contact=contact, actor="t", touch={"channel": "form"})
    lead_event(lead, "lead.new", key=lead.public_id)
    orchestrate_pending()
    lead.refresh_from_db()
    stopped = _step_receipt(lead, "lead.new")
    assert stopped.action == "orchestrator.stopped" and stopped.reason == "missing contact details"
    task = Task.objects.get(lead=lead, kind="exception")
    assert task.title.startswith("Find a way to reach this lead") and task.owner is not None
    assert not Message.objects.filter(lead=lead).exists(), "no acknowledgement to nobody"
    assert not Timer.objects.filter(lead=lead, payload__event="sla.due").exists()


def test_an_event_is_recorded_once_and_its_step_runs_once(business, team) -> None:
    lead = lead_create(business)
    first = lead_event(lead, "lead.new", key=lead.public_id)
    again = lead_event(lead, "lead.new", key=lead.public_id)
    assert first.pk == again.pk
    assert orchestrate(first.pk) == "done"
    assert orchestrate(first.pk) == "already claimed", "a redelivered task does nothing"
    assert Receipt.objects.filter(lead=lead, action="orchestrator.step", after__event="lead.new").count() == 1


def test_touch_added_keeps_the_returning_lead_owned_and_moving(business, team) -> None:
    sam, _ = team
    lead = lead_create(business, first_name="Ivy")
    lead_event(lead, "touch.added", key="tch_1", data={"channel": "call"})
    orchestrate_pending()
    lead.refresh_from_db()
    assert lead.owner == sam
    assert lead.next_action == "Follow up: Ivy Doe came back (call)"


def test_an_answered_postal_code_outside_the_area_takes_the_exception_path(business, team) -> None:
    lead = lead_create(business)
    lead.contact.postal_code = "99501"
    lead.contact.save()
    lead_event(lead, "qualification.answered", key="q1", data={"postal_code": "99501"})
    orchestrate_pending()
    lead.refresh_from_db()
    assert "out_of_area" in lead.exceptions and lead.facts["territory"] == "out_of_area"
    approval = ApprovalRequest.objects.get(lead=lead, kind="exception")
    assert approval.status == "pending" and approval.payload["flags"] == ["out_of_area"]
    assert approval.proposed_by == "agent:fit"


def test_an_emergency_goes_only_to_someone_on_shift(business, team) -> None:
    sam, mia = team
    sam.hours = {"sun": "00:00-00:01"}
    sam.save()
    lead = lead_create(business)
    lead.request_text = "Emergency! water flooding the basement"
    lead.save()
    lead_event(lead, "lead.new", key=lead.public_id)
    orchestrate_pending()
    lead.refresh_from_db()
    assert "emergency" in lead.exceptions and "no_eligible_owner" in lead.exceptions
    assert lead.owner == mia and "off shift and the lead is urgent" in lead.routing_reason


def test_missed_call_routes_an_unowned_lead_and_asks_for_a_call_back(business, team) -> None:
    sam, _ = team
    lead = lead_create(business, first_name="Cy")
    lead_event(lead, "missed_call", key="call_1")
    orchestrate_pending()
    lead.refresh_from_db()
    assert lead.owner == sam and lead.next_action == "Call back Cy Doe"


def test_sla_due_on_a_closed_lead_does_nothing(business, team) -> None:
    lead = lead_create(business)
    lead_event(lead, "sla.due", key=lead.public_id, due_at=timezone.now() - timedelta(minutes=1))
    Lead.objects.filter(pk=lead.pk).update(stage="lost")
    orchestrate_pending()
    assert _step_receipt(lead, "sla.due").after["outcome"] == "closed"
    assert not Receipt.objects.filter(lead=lead, action="sla.breached").exists()


def test_the_lead_page_explains_the_fit_and_the_routing(business, team) -> None:
    from django.test import Client

    _, mia = team
    lead = lead_create(business, first_name="Ana")
    lead.contact.postal_code = "60601"
    lead.contact.save()
    lead_event(lead, "lead.new", key=lead.public_id)
    orchestrate_pending()
    client = Client()
    client.force_login(mia.user)
    page = client.get(f"/admin/crm/lead/{lead.pk}/change/").content.decode()
    assert "+30 in_area: postal code 60601 in Metro" in page
    assert "+15 has_phone: a valid phone number" in page


def _website_lead(business, django_capture_on_commit_callbacks, **form) -> Lead:
    """A website form posted to the real webhook and its event processed as a worker would."""
    import json

    from django.test import Client

    from crm.models import Source
    from tests.helpers.capture import run_queued_events

    Source.objects.get_or_create(
        business=business, key="site", defaults={"provider": "website", "secret": "site-secret-123"}
    )
    body = {
        "first_name": "Rosa",
        "last_name": "Diaz",
        "phone": "(312) 555-0147",
        "postal_code": "60614",
        "message": "Furnace is banging",
        "consent": True,
        **form,
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = Client().post(
            "/hooks/forms/site/",
            data=json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION="Bearer site-secret-123",
        )
    assert response.status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        assert run_queued_events() == ["processed"]
    return Lead.objects.get(contact__first_name=body["first_name"])


def test_a_new_leads_step_runs_in_its_captures_unit_of_work(business, team, django_capture_on_commit_callbacks):
    sam, _ = team
    lead = _website_lead(business, django_capture_on_commit_callbacks)

    # Owned, with its next action and SLA clock, and acknowledged, by the
    # capture's own task: no lead.new timer, no orchestrate task.
    assert lead.owner == sam and lead.stage == "assigned" and lead.next_action.startswith("First contact")
    assert lead.sla_due_at is not None and lead.acknowledged_at is not None
    assert not Timer.objects.filter(lead=lead, payload__event="lead.new").exists()
    assert Timer.objects.filter(lead=lead, payload__event="sla.due", status="pending").exists()
    assert _step_receipt(lead, "lead.new").after["run"] == "inline"


def test_a_new_leads_step_that_fails_is_rolled_back_alone_and_retried_as_a_timer(
    business, team, django_capture_on_commit_callbacks
):
    sam, _ = team
    # A fit rule without its points: the step fails on it (a business file
    # edited by hand past its checks).
    business.fit_rules = [{"rule": "has_phone"}]
    business.save()
    lead = _website_lead(business, django_capture_on_commit_callbacks)

    # The capture committed (the lead, its touch and consent); the step's
    # own writes did not: no owner, no fit, no next action, no receipt of it.
    assert lead.owner is None and lead.fit_score is None and lead.next_action == ""
    assert lead.touches.count() == 1 and lead.contact.points.get().consent_states.filter(status="granted").exists()
    assert not Receipt.objects.filter(lead=lead, action__in=["lead.fit_recorded", "orchestrator.step"]).exists()
    timer = Timer.objects.get(lead=lead, payload__event="lead.new")
    assert timer.status == "pending"

    business.fit_rules = [{"rule": "has_phone", "points": 10}]
    business.save()
    orchestrate_pending()
    lead.refresh_from_db()
    assert lead.owner == sam and lead.fit_score == 10 and lead.next_action.startswith("First contact")
    assert _step_receipt(lead, "lead.new").after["timer"] == timer.public_id
