from __future__ import annotations

from collections import deque
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from crm.models import CLOSED_STAGES, Business, Lead, Receipt, Stage, TeamMember
from crm.services.lead_sync import (
    LEAD_CLOSED,
    TRANSITIONS,
    ForbiddenTransition,
    LeadSyncError,
    lead_assign,
    lead_set_hold,
    lead_set_next_action,
    lead_transition,
)
from tests.factories import BusinessFactory, lead_create, member_create

ALLOWED = sorted((from_stage, to_stage) for from_stage, targets in TRANSITIONS.items() for to_stage in targets)
FORBIDDEN = sorted(
    (from_stage, to_stage)
    for from_stage in Stage.values
    for to_stage in Stage.values
    if to_stage not in TRANSITIONS.get(from_stage, frozenset())
)


def path_from_new(stage: str) -> list[str]:
    """The shortest list of stages that lead_transition walks from "new" to `stage`."""
    came_from: dict[str, str | None] = {Stage.NEW: None}
    queue = deque([str(Stage.NEW)])
    while queue:
        current = queue.popleft()
        if current == stage:
            path: list[str] = []
            step: str | None = current
            while step is not None and step != Stage.NEW:
                path.append(step)
                step = came_from[step]
            return path[::-1]
        for target in sorted(TRANSITIONS.get(current, frozenset())):
            if target not in came_from:
                came_from[target] = current
                queue.append(target)
    raise AssertionError(f"stage {stage!r} cannot be reached from 'new'")


def lead_at(business: Business, stage: str) -> Lead:
    lead = lead_create(business)
    for step in path_from_new(stage):
        lead_transition(lead, step, actor="test", reason=f"walking to {stage}")
    assert lead.stage == stage
    return lead


def receipts_of(lead: Lead) -> int:
    return Receipt.objects.filter(lead=lead).count()


def test_every_stage_can_be_reached_from_new() -> None:
    assert {stage: path_from_new(stage)[-1:] for stage in Stage.values} == {
        stage: ([] if stage == Stage.NEW else [stage]) for stage in Stage.values
    }


def test_the_table_lists_every_stage_and_only_known_stages() -> None:
    assert set(TRANSITIONS) == set(Stage.values)
    assert set().union(*TRANSITIONS.values()) <= set(Stage.values)


@pytest.mark.parametrize(("from_stage", "to_stage"), ALLOWED)
def test_an_allowed_transition_moves_the_lead_and_writes_one_receipt(
    business: Business, from_stage: str, to_stage: str
) -> None:
    lead = lead_at(business, from_stage)
    before = receipts_of(lead)

    lead_transition(lead, to_stage, actor="sam", reason=f"{from_stage} to {to_stage}")

    stored = Lead.objects.get(pk=lead.pk)
    assert stored.stage == to_stage
    assert (stored.closed_at is not None) == (to_stage in CLOSED_STAGES)
    assert receipts_of(lead) == before + 1
    receipt = Receipt.objects.filter(lead=lead).latest("id")
    assert (receipt.actor, receipt.action, receipt.reason, receipt.subject) == (
        "sam",
        "lead.stage_changed",
        f"{from_stage} to {to_stage}",
        lead.public_id,
    )
    assert (receipt.before["stage"], receipt.after["stage"]) == (from_stage, to_stage)
    # Closing stamps closed_at and reopening clears it; the receipt records that too.
    closing, reopening = to_stage in CLOSED_STAGES, from_stage in CLOSED_STAGES and to_stage not in CLOSED_STAGES
    if closing or reopening:
        # A lead lost through a transition keeps the reason it was given as its lost reason.
        lost = {"lost_reason"} if to_stage == Stage.LOST else set()
        assert set(receipt.before) == set(receipt.after) == {"stage", "closed_at"} | lost
        assert (receipt.before["closed_at"] is None, receipt.after["closed_at"] is None) == (closing, reopening)
    else:
        assert (receipt.before, receipt.after) == ({"stage": from_stage}, {"stage": to_stage})


@pytest.mark.parametrize(("from_stage", "to_stage"), FORBIDDEN)
def test_a_forbidden_transition_is_refused_and_writes_nothing(
    business: Business, from_stage: str, to_stage: str
) -> None:
    lead = lead_at(business, from_stage)
    before = Receipt.objects.count()

    with pytest.raises(ForbiddenTransition) as refused:
        lead_transition(lead, to_stage, actor="sam", reason="trying")

    assert (refused.value.from_stage, refused.value.to_stage) == (from_stage, to_stage)
    assert Lead.objects.get(pk=lead.pk).stage == from_stage
    assert Receipt.objects.count() == before


def test_an_unknown_stage_is_refused_and_writes_nothing(business: Business) -> None:
    lead = lead_create(business)
    before = Receipt.objects.count()

    with pytest.raises(LeadSyncError, match="unknown stage"):
        lead_transition(lead, "limbo", actor="sam", reason="typo")

    assert Lead.objects.get(pk=lead.pk).stage == Stage.NEW
    assert Receipt.objects.count() == before


@pytest.mark.parametrize("stage", CLOSED_STAGES)
def test_a_lead_closed_by_a_transition_keeps_no_next_action_and_stops_its_automation(
    business: Business, stage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job completed or an estimate accepted closes a lead through
    lead_transition: the lead must end as lead_close leaves it, not won
    and still saying "Send the estimate"."""
    before_close: str = {Stage.WON: Stage.ESTIMATE_SENT, Stage.LOST: Stage.ESTIMATE_SENT}.get(
        Stage(stage), Stage.CONTACTED
    )
    lead = lead_at(business, before_close)
    lead_set_next_action(lead, "Send the estimate", timezone.now(), actor="sam", reason="visit held")
    closed: list[tuple[str, str]] = []
    monkeypatch.setitem(LEAD_CLOSED._items, "test", lambda lead, stage, actor: closed.append((lead.public_id, stage)))

    lead_transition(lead, stage, actor="agent:jobs", reason="job completed")

    lead.refresh_from_db()
    assert (lead.stage, lead.next_action, lead.next_action_due_at) == (stage, "", None)
    assert not lead.tasks.filter(kind="next_action", status="open").exists()
    assert closed == [(lead.public_id, stage)]


def test_reopening_a_lost_lead_clears_its_closed_time(business: Business) -> None:
    lead = lead_at(business, Stage.LOST)
    assert lead.closed_at is not None

    lead_transition(lead, Stage.ENGAGED, actor="sam", reason="customer replied")

    assert Lead.objects.get(pk=lead.pk).closed_at is None


# Assignment


def test_assigning_a_new_lead_gives_it_an_owner_and_moves_it_to_assigned(
    business: Business, setter: TeamMember
) -> None:
    lead = lead_create(business)

    lead_assign(lead, setter, actor="agent:router", reason="round robin")

    stored = Lead.objects.get(pk=lead.pk)
    assert (stored.owner, stored.stage) == (setter, Stage.ASSIGNED)
    receipt = Receipt.objects.filter(lead=lead).latest("id")
    assert (receipt.actor, receipt.action, receipt.reason) == ("agent:router", "lead.owner_changed", "round robin")
    assert receipt.before == {"owner": None, "stage": "new"}
    assert receipt.after == {"owner": "sam", "stage": "assigned"}


def test_reassigning_a_contacted_lead_keeps_its_stage(
    business: Business, setter: TeamMember, manager: TeamMember
) -> None:
    lead = lead_create(business)
    lead_assign(lead, setter, actor="agent:router", reason="round robin")
    lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")

    lead_assign(lead, manager, actor="mia", reason="taking over")

    stored = Lead.objects.get(pk=lead.pk)
    assert (stored.owner, stored.stage) == (manager, Stage.CONTACTED)
    receipt = Receipt.objects.filter(lead=lead).latest("id")
    assert (receipt.before, receipt.after) == ({"owner": "sam"}, {"owner": "mia"})


def test_a_member_of_another_business_cannot_own_the_lead(business: Business) -> None:
    lead = lead_create(business)
    outsider = member_create(BusinessFactory.create(slug="elsewhere"), username="olga")
    before = Receipt.objects.count()

    with pytest.raises(LeadSyncError, match="not on the team"):
        lead_assign(lead, outsider, actor="mia", reason="wrong pick")

    stored = Lead.objects.get(pk=lead.pk)
    assert (stored.owner, stored.stage) == (None, Stage.NEW)
    assert Receipt.objects.count() == before


def test_an_inactive_member_cannot_own_the_lead(business: Business) -> None:
    lead = lead_create(business)
    departed = member_create(business, username="dan", is_active=False)
    before = Receipt.objects.count()

    with pytest.raises(LeadSyncError, match="not active"):
        lead_assign(lead, departed, actor="mia", reason="old habit")

    stored = Lead.objects.get(pk=lead.pk)
    assert (stored.owner, stored.stage) == (None, Stage.NEW)
    assert Receipt.objects.count() == before


def test_assigning_the_current_owner_again_is_refused(business: Business, setter: TeamMember) -> None:
    lead = lead_create(business)
    lead_assign(lead, setter, actor="agent:router", reason="round robin")
    before = Receipt.objects.count()

    with pytest.raises(LeadSyncError, match="already owned"):
        lead_assign(lead, setter, actor="agent:router", reason="double click")

    assert Receipt.objects.count() == before


# Next action


def test_a_next_action_without_a_due_time_is_refused(business: Business) -> None:
    lead = lead_create(business)
    before = Receipt.objects.count()

    with pytest.raises(LeadSyncError, match="due time"):
        lead_set_next_action(lead, "Call back", None, actor="sam", reason="asked for a call")

    assert Lead.objects.get(pk=lead.pk).next_action == ""
    assert Receipt.objects.count() == before


def test_a_next_action_with_a_due_time_is_set_with_a_receipt(business: Business) -> None:
    lead = lead_create(business)
    due = timezone.now() + timedelta(hours=2)

    lead_set_next_action(lead, "Call back", due, actor="sam", reason="asked for a call")

    stored = Lead.objects.get(pk=lead.pk)
    assert (stored.next_action, stored.next_action_due_at) == ("Call back", due)
    receipt = Receipt.objects.filter(lead=lead).latest("id")
    assert receipt.action == "lead.next_action_set"
    assert receipt.before == {"next_action": "", "next_action_due_at": None}
    assert receipt.after["next_action"] == "Call back"
    recorded_due = parse_datetime(receipt.after["next_action_due_at"])
    # JSON keeps datetimes to the millisecond.
    assert recorded_due is not None and abs(recorded_due - due) < timedelta(milliseconds=1)


def test_clearing_the_next_action_clears_its_due_time(business: Business) -> None:
    lead = lead_create(business)
    lead_set_next_action(lead, "Call back", timezone.now(), actor="sam", reason="asked for a call")

    lead_set_next_action(lead, "", timezone.now(), actor="sam", reason="done")

    stored = Lead.objects.get(pk=lead.pk)
    assert (stored.next_action, stored.next_action_due_at) == ("", None)


# Hold


def test_putting_a_lead_on_hold_and_releasing_it_each_write_a_receipt(business: Business) -> None:
    lead = lead_create(business)

    lead_set_hold(lead, True, actor="mia", reason="customer complained")
    held = Lead.objects.get(pk=lead.pk)
    lead_set_hold(lead, False, actor="mia", reason="sorted out")
    released = Lead.objects.get(pk=lead.pk)

    assert (held.hold, held.hold_reason) == (True, "customer complained")
    assert (released.hold, released.hold_reason) == (False, "")
    hold_set, hold_released = Receipt.objects.filter(lead=lead).order_by("id")[1:]
    assert (hold_set.action, hold_set.reason, hold_set.after) == (
        "lead.hold_set",
        "customer complained",
        {"hold": True, "hold_reason": "customer complained"},
    )
    assert (hold_released.action, hold_released.reason, hold_released.after) == (
        "lead.hold_released",
        "sorted out",
        {"hold": False, "hold_reason": ""},
    )


def test_holding_a_lead_already_on_hold_is_refused(business: Business) -> None:
    lead = lead_create(business)
    lead_set_hold(lead, True, actor="mia", reason="complaint")
    before = Receipt.objects.count()

    with pytest.raises(LeadSyncError, match="already on hold"):
        lead_set_hold(lead, True, actor="mia", reason="complaint again")

    assert Lead.objects.get(pk=lead.pk).hold_reason == "complaint"
    assert Receipt.objects.count() == before


# Atomicity


class _CallerFailed(Exception):
    """The caller's own failure after CRM Sync wrote."""


def test_the_change_and_its_receipt_roll_back_together_when_the_caller_fails(business: Business) -> None:
    lead = lead_create(business)
    before = Receipt.objects.count()

    with pytest.raises(_CallerFailed), transaction.atomic():
        lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")
        assert Receipt.objects.count() == before + 1
        raise _CallerFailed

    assert Lead.objects.get(pk=lead.pk).stage == Stage.NEW
    assert Receipt.objects.count() == before


@pytest.mark.django_db
def test_a_lead_held_by_its_unit_of_work_is_written_once_at_the_end_and_read_from_memory() -> None:
    from django.db import connection

    from crm.services.lead_sync import lead_current, lead_for_update

    business = BusinessFactory.create()
    setter = member_create(business, "setter", username="sam")
    lead = lead_create(business)
    statements: list[str] = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with transaction.atomic():
        Lead.objects.select_for_update(no_key=True).get(pk=lead.pk)  # the unit's lock
        with connection.execute_wrapper(record), lead_current(lead):
            lead_assign(lead, setter, actor="t", reason="t")
            lead_set_next_action(lead, "Call Rosa", timezone.now(), actor="t", reason="t")
            # Another object of the same lead is handed the held one: no read.
            assert lead_for_update(lead.pk) is lead
            reads = [s for s in statements if '"crm_lead"' in s]
            assert reads == []  # neither read nor written yet
            assert Lead.objects.get(pk=lead.pk).owner_id is None
        lead_updates = [s for s in statements if s.startswith('UPDATE "crm_lead"')]
        assert len(lead_updates) == 1  # both changes, one UPDATE
    lead.refresh_from_db()
    assert (lead.owner, lead.stage, lead.next_action) == (setter, "assigned", "Call Rosa")
    assert list(Receipt.objects.filter(lead=lead).values_list("action", flat=True).order_by("id"))[-2:] == [
        "lead.owner_changed",
        "lead.next_action_set",
    ]


@pytest.mark.django_db
def test_a_held_lead_whose_block_fails_writes_nothing() -> None:
    from crm.services.lead_sync import lead_current

    business = BusinessFactory.create()
    setter = member_create(business, "setter", username="sam")
    lead = lead_create(business)
    with pytest.raises(RuntimeError), transaction.atomic(), lead_current(lead):
        lead_assign(lead, setter, actor="t", reason="t")
        raise RuntimeError("the step failed")
    lead.refresh_from_db()
    assert lead.owner is None and not Receipt.objects.filter(lead=lead, action="lead.owner_changed").exists()
