"""What one new website lead costs the database, end to end, through the
real webhook and the real task functions run as a worker runs them."""

from __future__ import annotations

from datetime import time
from pathlib import Path

import pytest

from crm.models import Business, Message, Receipt, TeamMember
from crm.services.business_file import business_file_load
from scripts.lead_statements import grouped, new_website_lead

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_FILE = Path(__file__).resolve().parents[2] / "demo" / "acme-hvac.yaml"
# Statements per new lead from capture to the acknowledgement decision, a
# receipt costing its one INSERT (savepoints and the broker's own dequeue
# and acknowledgement not counted). It was 122 before this budget was set.
# 92 off-hours, 95 in the sending window (the acknowledgement sent and its
# dispatch enqueued), measured on the costlier path (see below); receipts are
# sealed after commit (one seal call per transaction) and the new-lead notice
# is a task of its own. Issue 12's goal is 40 end to end.
TASKS_BUDGET = 95
ACCEPTANCE_BUDGET = 7


def _open_round_the_clock() -> None:
    """The path a lead takes depends on the hour: inside the sending window
    the acknowledgement is sent (and a dispatch enqueued), outside it the
    send is deferred; a setter on shift or not changes the routing. The
    budget is measured on one path whatever the clock says: the costlier
    one, everyone on shift and every hour a sending hour."""
    Business.objects.update(
        quiet_hours_start=time(0, 0), quiet_hours_end=time.max, quiet_hours_by_state={}, business_hours={}
    )
    TeamMember.objects.update(hours={})  # {}: round the clock


def test_a_new_website_lead_stays_within_its_statement_budget() -> None:
    business_file_load(DEMO_FILE)
    _open_round_the_clock()
    receipts_before = Receipt.objects.count()

    cost = new_website_lead()

    lead = cost.lead
    # The whole path ran: owned, one next action, the acknowledgement decided.
    # (The owner's new-lead notice goes out in a task of its own: no network call holds the lead.)
    assert cost.task_names == [
        "agents.tasks.process_inbound_event",
        "agents.tasks.orchestrate",
        "agents.tasks.notice_deliver",
    ]
    assert lead.owner is not None and lead.next_action.startswith("First contact")
    assert Message.objects.filter(lead=lead, direction="out", idempotency_key=f"ack:{lead.public_id}").exists()
    table = "\n".join(f"{n:3} {k:<8} {t}" for k, t, n in grouped(cost.tasks.realistic))
    assert len(cost.tasks.realistic) <= TASKS_BUDGET, f"{len(cost.tasks.realistic)} statements:\n{table}"
    assert len(cost.acceptance.realistic) <= ACCEPTANCE_BUDGET
    # Every receipt written is in the count, as its INSERT: none was dropped to fit.
    receipt_inserts = [s for s in cost.tasks.realistic if '"crm_receipt"' in s and "INSERT INTO" in s]
    assert len(receipt_inserts) == Receipt.objects.count() - receipts_before
