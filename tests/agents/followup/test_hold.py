"""A person holds a lead's automation from the workspace: the path ends at
once, every send waits, and releasing it resumes the path where it was."""

from __future__ import annotations

import pytest

from agents.followup.hold import automation_hold
from agents.followup.sequences.engine import enrollment_start
from agents.orchestrator import orchestrate_pending
from agents.outbound.gate import message_send
from crm.models import Enrollment, Lead, Receipt
from crm.services.lead_sync import LeadSyncError

pytestmark = pytest.mark.django_db


def test_a_hold_ends_the_path_at_once_and_a_release_resumes_it_where_it_was(lead: Lead) -> None:
    first = enrollment_start(lead, "no_reply", actor="test")
    assert first is not None

    automation_hold(lead, hold=True, actor="sam", reason="customer travelling")
    assert orchestrate_pending() == 1
    first.refresh_from_db()
    assert (first.status, first.stop_reason) == ("stopped", "hold")
    assert Receipt.objects.filter(lead=lead, action="lead.hold_set", actor="sam").count() == 1
    blocked = message_send(lead=lead, channel="sms", body="Hi", actor="sam", idempotency_key="h1", automated=False)
    assert (blocked.status, blocked.block_reason) == ("blocked", "hold")

    automation_hold(lead, hold=False, actor="sam", reason="back home")
    assert orchestrate_pending() == 1
    again = Enrollment.objects.get(lead=lead, status="active")
    assert again.pk != first.pk and again.sequence_id == first.sequence_id


def test_holding_a_held_lead_is_refused_and_records_nothing(lead: Lead) -> None:
    automation_hold(lead, hold=True, actor="sam", reason="complaint")
    with pytest.raises(LeadSyncError, match="already on hold"):
        automation_hold(lead, hold=True, actor="sam", reason="again")
    assert Receipt.objects.filter(lead=lead, action="lead.hold_set").count() == 1
    assert orchestrate_pending() == 1  # the one hold's step, not a second
