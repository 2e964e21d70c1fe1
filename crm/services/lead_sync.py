"""CRM Sync: the single writer of a lead's stage, owner and next action.

Every change here locks the lead row, validates, writes, and appends a receipt
in the same transaction, so a change without its receipt (or a receipt without
its change) cannot exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from crm.context import unit, unit_entered
from crm.locks import row_lock
from crm.models import CLOSED_STAGES, EventType, Lead, Stage, TeamMember
from crm.permissions import role_allows
from crm.registry import Registry
from crm.services.outbox import event_emit
from crm.services.receipts import receipt_write
from crm.services.records import tasks_cancel

# The one transition table. A stage not listed as a target of the current
# stage is forbidden. Closed stages may reopen only where a person plausibly
# re-engages (a lost or unresponsive lead replies); a won lead stays won.
TRANSITIONS: dict[str, frozenset[str]] = {
    Stage.NEW: frozenset({Stage.ASSIGNED, Stage.CONTACTED, Stage.ENGAGED, Stage.DISQUALIFIED, Stage.LOST}),
    Stage.ASSIGNED: frozenset(
        {
            Stage.CONTACTED,
            Stage.ENGAGED,
            Stage.QUALIFIED,
            Stage.BOOKED,
            Stage.DISQUALIFIED,
            Stage.LOST,
            Stage.UNRESPONSIVE,
        }
    ),
    Stage.CONTACTED: frozenset(
        {Stage.ENGAGED, Stage.QUALIFIED, Stage.BOOKED, Stage.DISQUALIFIED, Stage.LOST, Stage.UNRESPONSIVE}
    ),
    Stage.ENGAGED: frozenset({Stage.QUALIFIED, Stage.BOOKED, Stage.DISQUALIFIED, Stage.LOST, Stage.UNRESPONSIVE}),
    Stage.QUALIFIED: frozenset({Stage.BOOKED, Stage.ESTIMATE_SENT, Stage.DISQUALIFIED, Stage.LOST, Stage.UNRESPONSIVE}),
    Stage.BOOKED: frozenset({Stage.APPOINTMENT_HELD, Stage.NO_SHOW, Stage.QUALIFIED, Stage.LOST}),
    Stage.NO_SHOW: frozenset({Stage.BOOKED, Stage.LOST, Stage.UNRESPONSIVE}),
    Stage.APPOINTMENT_HELD: frozenset({Stage.ESTIMATE_SENT, Stage.WON, Stage.LOST}),
    Stage.ESTIMATE_SENT: frozenset({Stage.WON, Stage.LOST, Stage.UNRESPONSIVE}),
    Stage.WON: frozenset(),
    Stage.LOST: frozenset({Stage.ENGAGED}),
    Stage.DISQUALIFIED: frozenset(),
    Stage.UNRESPONSIVE: frozenset({Stage.ENGAGED}),
}


class LeadSyncError(Exception):
    """A change CRM Sync refuses; the lead is left untouched and no receipt written."""


class ForbiddenTransition(LeadSyncError):
    def __init__(self, lead: Lead, to_stage: str) -> None:
        self.from_stage, self.to_stage = lead.stage, to_stage
        allowed = ", ".join(sorted(TRANSITIONS.get(lead.stage, ()))) or "none"
        super().__init__(f"{lead.public_id}: cannot move from {lead.stage} to {to_stage} (allowed: {allowed})")


def transition_allowed(from_stage: str, to_stage: str) -> bool:
    return to_stage in TRANSITIONS.get(from_stage, frozenset())


def _refuse_second_open_lead(lead: Lead) -> None:
    # The partial unique constraint is the real guard (and catches a race);
    # this check turns the common case into a message a person can act on.
    newer = (
        Lead.objects.filter(contact_id=lead.contact_id, service_line_id=lead.service_line_id)
        .exclude(pk=lead.pk)
        .exclude(stage__in=CLOSED_STAGES)
        .values_list("public_id", flat=True)
        .first()
    )
    if newer:
        raise LeadSyncError(f"{lead.public_id} cannot reopen: {newer} is already the open lead for this need")


_RELATED = ("business", "contact", "owner__user")


@contextmanager
def lead_current(lead: Lead) -> Iterator[Lead]:
    """Within the block, `lead` (this very object) stands for its row: CRM
    Sync writes through it without reading the row again, and keeps it
    current when it writes through another object of the same lead.

    Only for a row the transaction holds for the whole block, so that no one
    else can change it meanwhile: a lead inserted in this transaction (a new
    lead's first step, run with its capture), or one locked FOR NO KEY
    UPDATE before the block. Code in the block that changes the lead with a
    raw UPDATE must set the attribute on `lead` too.

    The changes CRM Sync makes in the block (each validated, each with its
    receipt) reach the row in one UPDATE when the block ends, still in the
    transaction: code in the block reads the lead from `lead`, never from
    a query of its row. A block that raises writes nothing (its savepoint,
    or transaction, rolls back what it did).
    """
    with unit_entered() as work:
        before = work.leads
        work.leads = {**before, lead.pk: lead}  # the unit's leads held current, by pk
        outer, lead._unwritten = lead._unwritten, set()
        try:
            yield lead
            dirty, lead._unwritten = lead._unwritten, outer
            if outer is not None:  # a nested block: the outer one writes them
                outer.update(dirty or ())
            elif dirty:
                lead.save(update_fields=sorted(dirty | {"updated_at"}))
        finally:
            work.leads = before
            lead._unwritten = outer


def _write(lead: Lead, fields: tuple[str, ...]) -> None:
    """Save these fields of `lead` now, or at the end of its `lead_current` block."""
    dirty = lead._unwritten if _held(lead.pk) is lead else None
    if dirty is None:
        lead.save(update_fields=[*fields, "updated_at"])
        return
    dirty.update(fields)
    lead.updated_at = timezone.now()


def lead_mark_acknowledged(lead: Lead, at: datetime) -> None:
    """Stamp when the lead's acknowledgement went out (or was recorded): the
    message's receipt is the record, so there is none of its own."""
    lead.acknowledged_at = at
    if _held(lead.pk) is lead:
        _write(lead, ("acknowledged_at",))
    else:
        Lead.objects.filter(pk=lead.pk).update(acknowledged_at=at)


def _held(pk: int) -> Lead | None:
    work = unit()
    return work.leads.get(pk) if work is not None else None


def lead_is_current(lead: Lead) -> bool:
    """Whether `lead` is the unit of work's own current object (`lead_current`):
    then it, its business and its contact (read or made in this transaction)
    may be judged as they are."""
    return _held(lead.pk) is lead


def lead_refresh(lead: Lead) -> Lead:
    """Make `lead` current, with its business, contact and owner: no query
    when it is the unit of work's own (`lead_current`), one otherwise."""
    if _held(lead.pk) is not lead:
        lead.refresh_from_db(from_queryset=Lead.objects.select_related(*_RELATED))
    return lead


def lead_for_update(lead: Lead | int) -> Lead:
    """The lead locked (FOR NO KEY UPDATE) and current, with its business,
    contact and owner: the unit of work's own object when it holds the lead
    (no query), else read again under the lock."""
    pk = lead.pk if isinstance(lead, Lead) else lead
    held = _held(pk)
    if held is not None:
        return held
    return Lead.objects.select_for_update(of=("self",), no_key=True).select_related(*_RELATED).get(pk=pk)


def _locked(lead: Lead) -> Lead:
    """Lock the lead's row and re-read it into `lead` itself, in one query
    (the caller's object is then current: no re-read after the change).
    What the receipt and the snapshots need comes in the same query. No
    query at all for the unit of work's own current lead."""
    if _held(lead.pk) is lead:
        return lead
    # NO KEY (row_lock): a plain FOR UPDATE made a receipt's foreign-key
    # check wait on the lead, and with the receipt chain held it deadlocked
    # at commit.
    return row_lock(lead, *_RELATED)


def _snapshot(lead: Lead, fields: tuple[str, ...]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for field in fields:
        value = getattr(lead, field)
        if field == "owner":
            value = str(value.user.get_username()) if value else None
        elif hasattr(value, "public_id"):  # a related record: its stable id
            value = value.public_id
        values[field] = value
    return values


def _save(lead: Lead, changes: dict[str, Any], *, actor: str, action: str, reason: str) -> Lead:
    fields = tuple(changes)
    before = _snapshot(lead, fields)
    for field, value in changes.items():
        setattr(lead, field, value)
    # Only what changes is validated, and only field by field: the row was
    # valid when it was read, a related record set here is a row in hand,
    # and the constraints are the database's (each checked here would cost
    # a query); the writers above refuse what a person could get wrong.
    unchanged = [f.name for f in Lead._meta.concrete_fields if f.name not in changes or f.is_relation]
    lead.clean_fields(exclude=unchanged)
    _write(lead, fields)
    held = _held(lead.pk)
    if held is not None and held is not lead:  # the unit's own object stays current
        for field in (*fields, "updated_at"):
            setattr(held, field, getattr(lead, field))
    after = _snapshot(lead, fields)
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=lead.public_id,
        actor=actor,
        action=action,
        reason=reason,
        before=before,
        after=after,
    )
    _announce(lead, before, after, actor=actor)
    return lead


def _announce(lead: Lead, before: dict[str, Any], after: dict[str, Any], *, actor: str) -> None:
    """The outbox events of a change: the owner first (a new lead's owner
    moves it to `assigned`), then the stage. Usernames, never names."""
    for field, event in (("owner", EventType.LEAD_OWNER_CHANGED), ("stage", EventType.LEAD_STAGE_CHANGED)):
        if field in after and before[field] != after[field]:
            event_emit(
                business=lead.business_id,
                lead=lead,
                type=event,
                subject=lead.public_id,
                data={"lead": lead.public_id, "from": before[field], "to": after[field], "actor": actor},
            )


@transaction.atomic
def lead_transition(lead: Lead, to_stage: str, *, actor: str, reason: str) -> Lead:
    """Move a lead to `to_stage` if the transition table allows it.

    Raises ForbiddenTransition (nothing written) otherwise. Closing a lead
    is `lead_close`'s work whoever asks (a job completed, an estimate
    accepted or declined): the next action cleared, its tasks canceled and
    automation stopped, never a closed lead still telling someone what to do
    next. Reopening clears `closed_at`.
    """
    current = _locked(lead)
    if to_stage not in Stage.values:
        raise LeadSyncError(f"unknown stage {to_stage!r}")
    if not transition_allowed(current.stage, to_stage):
        raise ForbiddenTransition(current, to_stage)
    if to_stage in CLOSED_STAGES:
        return lead_close(
            current, to_stage, actor=actor, reason=reason, lost_reason=reason if to_stage == Stage.LOST else ""
        )
    changes: dict[str, Any] = {"stage": to_stage}
    if current.stage in CLOSED_STAGES:
        _refuse_second_open_lead(current)
        changes["closed_at"] = None
    saved = _save(current, changes, actor=actor, action="lead.stage_changed", reason=reason)
    return saved


# What other apps do when a lead closes, in the closing transaction: the
# sequence engine ends the lead's paths. Registered from their
# AppConfig.ready(); CRM Sync cannot import them.
LeadClosedHook = Callable[[Lead, str, str], None]  # (lead, stage, actor)
LEAD_CLOSED: Registry[LeadClosedHook] = Registry("lead-closed hook")


@transaction.atomic
def lead_close(lead: Lead, stage: str, *, actor: str, reason: str, lost_reason: str = "") -> Lead:
    """Close a lead — won, lost (with the reason), disqualified or
    unresponsive — the one way every role and page does it: the stage (and
    the lost reason) in one change with its receipt, the next action cleared,
    the open next-action tasks canceled (a receipt each), then every
    LEAD_CLOSED hook (automation stops). Closing a lead already in `stage`
    still does the rest: a retry finishes what a failure left."""
    if stage not in CLOSED_STAGES:
        raise LeadSyncError(f"{stage} is not a closing stage")
    if stage == Stage.LOST and not lost_reason.strip():
        raise LeadSyncError("a lost lead needs the reason")
    current = _locked(lead)
    changes: dict[str, Any] = {}
    if current.stage != stage:
        if not transition_allowed(current.stage, stage):
            raise ForbiddenTransition(current, stage)
        changes.update(stage=stage, closed_at=timezone.now())
    if lost_reason and current.lost_reason != lost_reason[:300]:
        changes["lost_reason"] = lost_reason[:300]
    if changes:
        _save(current, changes, actor=actor, action="lead.stage_changed", reason=lost_reason or reason)
    if current.next_action:
        lead_set_next_action(current, "", None, actor=actor, reason=f"closed: {stage}")
    tasks_cancel(current, kinds=["next_action"], outcome=f"lead closed: {stage}", actor=actor)
    for hook in LEAD_CLOSED.values():
        hook(current, stage, actor)
    return current


@transaction.atomic
def lead_assign(lead: Lead, owner: TeamMember, *, actor: str, reason: str, advance: bool = True) -> Lead:
    """Give the lead one human owner from its own business.

    A new lead moves to `assigned` in the same step, unless `advance` is off:
    the manager holding a lead nobody could take (the manager queue) keeps it
    `new` until a setter has it.
    """
    current = _locked(lead)
    if owner.business_id != current.business_id:
        raise LeadSyncError(f"{owner} is not on the team of this lead's business")
    if not owner.is_active:
        raise LeadSyncError(f"{owner} is not active")
    if not role_allows(owner.role, "message.view"):
        # The owner answers the lead's conversation; a technician's role
        # cannot read it, so the lead would sit with nobody who can act.
        raise LeadSyncError(f"{owner} works visits and jobs and cannot own a lead's conversation")
    if current.owner_id == owner.pk:
        raise LeadSyncError(f"{current.public_id} is already owned by {owner}")
    changes: dict[str, Any] = {"owner": owner}
    if current.stage == Stage.NEW and advance:
        changes["stage"] = Stage.ASSIGNED
    saved = _save(current, changes, actor=actor, action="lead.owner_changed", reason=reason)
    return saved


@transaction.atomic
def lead_set_next_action(lead: Lead, action: str, due_at: datetime | None, *, actor: str, reason: str) -> Lead:
    """Set (or clear, with an empty action) the lead's one next action."""
    current = _locked(lead)
    if action and due_at is None:
        raise LeadSyncError("a next action needs a due time")
    saved = _save(
        current,
        {"next_action": action, "next_action_due_at": due_at if action else None},
        actor=actor,
        action="lead.next_action_set",
        reason=reason,
    )
    return saved


@transaction.atomic
def lead_set_hold(lead: Lead, hold: bool, *, actor: str, reason: str) -> Lead:
    """Put the lead on manual hold (all automation stops) or release it."""
    current = _locked(lead)
    if current.hold == hold:
        raise LeadSyncError(f"{current.public_id} is already {'on hold' if hold else 'released'}")
    saved = _save(
        current,
        {"hold": hold, "hold_reason": reason if hold else ""},
        actor=actor,
        action="lead.hold_set" if hold else "lead.hold_released",
        reason=reason,
    )
    return saved


@transaction.atomic
def lead_flag_exception(lead: Lead, flag: str, *, actor: str, reason: str, present: bool = True) -> Lead:
    """Add or remove one exception flag."""
    current = _locked(lead)
    flags = set(current.exceptions)
    flags = flags | {flag} if present else flags - {flag}
    if flags == set(current.exceptions):
        return current
    saved = _save(current, {"exceptions": sorted(flags)}, actor=actor, action="lead.exceptions_changed", reason=reason)
    return saved


@transaction.atomic
def lead_record_fit(
    lead: Lead,
    *,
    facts: dict[str, Any],
    fit_score: int,
    fit_reasons: list[dict[str, Any]],
    service_line: Any = None,
    actor: str,
    reason: str,
) -> Lead:
    """Store what the qualifier found; a service line is set only when the lead has none."""
    current = _locked(lead)
    changes: dict[str, Any] = {"facts": facts, "fit_score": fit_score, "fit_reasons": fit_reasons}
    if service_line is not None and current.service_line_id is None:
        clash = (
            Lead.objects.filter(contact_id=current.contact_id, service_line=service_line)
            .exclude(pk=current.pk)
            .exclude(stage__in=CLOSED_STAGES)
            .exists()
        )
        # Another open lead already holds that need: leave the line for a person.
        if not clash:
            changes["service_line"] = service_line
    saved = _save(current, changes, actor=actor, action="lead.fit_recorded", reason=reason)
    return saved


@transaction.atomic
def lead_record_fit_explanation(lead: Lead, explanation: dict[str, Any], *, actor: str, reason: str) -> Lead:
    """Store a model's explanation of the lead's fit score beside the facts
    it explains (`facts["fit_explanation"]`); nothing when the score changed
    since it was asked for (compare-and-set under the lead's lock). The
    points are never touched."""
    current = _locked(lead)
    if current.fit_score != explanation.get("score"):
        return current
    return _save(
        current,
        {"facts": {**current.facts, "fit_explanation": explanation}},
        actor=actor,
        action="lead.fit_explained",
        reason=reason,
    )


@transaction.atomic
def lead_set_sla(lead: Lead, due_at: datetime | None, *, actor: str, reason: str) -> Lead:
    current = _locked(lead)
    saved = _save(current, {"sla_due_at": due_at}, actor=actor, action="lead.sla_set", reason=reason)
    return saved


@transaction.atomic
def lead_set_routing_reason(lead: Lead, routing_reason: str, *, actor: str) -> Lead:
    current = _locked(lead)
    if current.routing_reason == routing_reason:
        return current
    saved = _save(
        current,
        {"routing_reason": routing_reason},
        actor=actor,
        action="lead.routing_reason_set",
        reason=routing_reason or "routed",
    )
    return saved


def lead_record_first_contact(lead: Lead, at: datetime, *, actor: str, how: str) -> bool:
    """Speed to lead: the first time a person reached the lead, once.

    The conditional update is the guard: a later contact, or two racing,
    never moves the first one.
    """
    seconds = max(0, int((at - lead.created_at).total_seconds()))
    with transaction.atomic():
        updated = Lead.objects.filter(pk=lead.pk, first_response_at__isnull=True).update(
            first_response_at=at, speed_to_lead_seconds=seconds
        )
        if updated:
            receipt_write(
                business=lead.business,
                lead=lead,
                subject=lead.public_id,
                actor=actor,
                action="lead.first_contact",
                reason=how,
                before={"first_response_at": None},
                after={"first_response_at": at, "speed_to_lead_seconds": seconds},
            )
    return bool(updated)
