"""A person reached the lead (or tried to): speed to lead once, the stage
it moves, calls logged by hand; and a leader's reassignment."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.followup.replies import reply_record
from agents.routing.assign import lead_reassign
from crm.models import Call, Conversation, LeadException, Note, Receipt, Role, Stage, Task
from crm.services import lead_sync
from crm.services.next_action import next_action_set
from crm.services.reached import call_log, lead_reached
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db


def test_the_first_time_a_person_reaches_the_lead_is_its_speed_to_lead_once(business, setter):
    lead = lead_sync.lead_assign(lead_create(business), setter, actor="t", reason="t")
    first_at = timezone.now()
    assert lead_reached(lead, actor="sam", how="phoned", at=first_at)
    assert not lead_reached(lead, actor="sam", how="phoned again", at=first_at + timedelta(hours=1))
    lead.refresh_from_db()
    assert (lead.first_response_at, lead.stage) == (first_at, Stage.CONTACTED)
    assert Receipt.objects.filter(lead=lead, action="lead.first_contact").count() == 1


def test_a_logged_call_they_talked_on_reaches_the_lead_and_answers_what_they_wrote(business, setter):
    lead = lead_sync.lead_assign(lead_create(business), setter, actor="t", reason="t")
    reply_record(lead, channel="sms", body="Call me?", actor="test", now=timezone.now() - timedelta(minutes=5))
    call = call_log(lead, actor="sam", outcome="connected", minutes=3, note="Wants a Tuesday visit")
    assert (call.direction, call.status, call.outcome, call.duration_seconds) == ("out", "completed", "connected", 180)
    assert Receipt.objects.get(subject=call.public_id).action == "call.logged"
    assert Note.objects.get(lead=lead).body == f"Call {call.public_id}: Wants a Tuesday visit"
    lead.refresh_from_db()
    assert lead.first_response_at is not None and lead.stage == Stage.CONTACTED
    assert Conversation.objects.get(lead=lead).awaiting_since is None


def test_a_call_nobody_answered_reaches_no_one_and_an_unknown_outcome_is_refused(business, setter):
    lead = lead_sync.lead_assign(lead_create(business), setter, actor="t", reason="t")
    reply_record(lead, channel="sms", body="Call me?", actor="test")
    call_log(lead, actor="sam", outcome="no_answer")
    lead.refresh_from_db()
    assert lead.first_response_at is None and lead.stage == Stage.ASSIGNED
    assert Conversation.objects.get(lead=lead).awaiting_since is not None
    with pytest.raises(ValueError, match="unknown call outcome"):
        call_log(lead, actor="sam", outcome="maybe")
    assert Call.objects.filter(lead=lead).count() == 1


def test_a_reassignment_moves_the_next_action_and_takes_the_lead_out_of_the_manager_queue(business, manager):
    sara = member_create(business, Role.SETTER, username="sara")
    lead = lead_sync.lead_assign(lead_create(business), manager, actor="t", reason="manager_queue", advance=False)
    lead_sync.lead_flag_exception(lead, LeadException.NO_ELIGIBLE_OWNER, actor="t", reason="nobody covered it")
    lead_sync.lead_set_routing_reason(lead, "nobody covered it", actor="t")
    next_action_set(lead, "First contact", timezone.now(), actor="t", reason="t")

    lead_reassign(lead, sara, actor="mia", reason="Sara covers it now")
    lead.refresh_from_db()
    assert (lead.owner_id, lead.stage, lead.routing_reason) == (sara.pk, Stage.ASSIGNED, "")
    assert LeadException.NO_ELIGIBLE_OWNER not in lead.exceptions
    assert Task.objects.get(lead=lead, kind="next_action", status="open").owner_id == sara.pk
