"""Round robin: give the lead one owner, fairly, under concurrency.

Smooth weighted round robin over the eligible setters: each pick adds every
eligible member's weight to their `rotation_score` and subtracts the total
from the one chosen, so weights 2:1:1 hand out A, B, A, C, … and never drift.
The scores live on the member rows and are read and written only while those
rows are locked (SELECT … FOR UPDATE, in primary-key order so two routings
never deadlock); concurrent arrivals queue on the lock instead of both reading
the same pointer. The open-lead count for caps is read under the same lock.

No eligible owner: the lead goes to the manager queue — owned by the manager,
flagged `no_eligible_owner` with the reason, an exception task, an alert —
never left unowned. Every decision writes a receipt naming the rule, the
candidates and why each was skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agents.notify import member_notify
from agents.routing.eligibility import Candidate, owner_candidates, setters_of
from crm.models import Lead, LeadException, TeamMember
from crm.selectors import business_manager
from crm.services import lead_sync
from crm.services.next_action import next_action_set
from crm.services.receipts import receipt_write
from crm.services.records import task_create

ACTOR = "agent:round_robin"
RULE = "weighted_round_robin"
MANAGER_QUEUE = "manager_queue"


@dataclass(frozen=True)
class Routed:
    owner: TeamMember | None
    rule: str
    reason: str
    candidates: tuple[Candidate, ...]


def _pick(eligible: list[Candidate]) -> Candidate:
    total = sum(c.member.weight for c in eligible)
    for c in eligible:
        c.member.rotation_score += c.member.weight
    chosen = max(eligible, key=lambda c: (c.member.rotation_score, -c.member.pk))
    chosen.member.rotation_score -= total
    TeamMember.objects.bulk_update([c.member for c in eligible], ["rotation_score"])
    return chosen


@transaction.atomic
def lead_route(
    lead: Lead,
    *,
    urgent: bool = False,
    areas: tuple[str, ...] = (),
    now: datetime | None = None,
    exclude: tuple[int, ...] = (),
    reason: str = "new lead",
) -> Routed:
    """Assign `lead` to the next eligible setter, or to the manager queue."""
    now = now or timezone.now()
    members = list(setters_of(lead.business_id).select_for_update(of=("self",)))
    for member in members:
        member.business = lead.business  # the same row: its notices need it
    candidates = owner_candidates(lead, now=now, urgent=urgent, areas=areas, exclude=exclude, members=members)
    eligible = [c for c in candidates if c.eligible and c.member.weight > 0]
    described = [c.describe() for c in candidates]
    if eligible:
        chosen = _pick(eligible)
        owner: TeamMember | None = chosen.member
        rule, why = RULE, reason
        if lead.owner_id != chosen.member.pk:
            lead_sync.lead_assign(lead, chosen.member, actor=ACTOR, reason=f"{RULE}: {reason}")
        if LeadException.NO_ELIGIBLE_OWNER in lead.exceptions:
            lead_sync.lead_flag_exception(
                lead, LeadException.NO_ELIGIBLE_OWNER, actor=ACTOR, reason="an owner was found", present=False
            )
            lead_sync.lead_set_routing_reason(lead, "", actor=ACTOR)
    else:
        owner, rule = _manager_queue(lead, candidates, reason=reason)
        why = lead.routing_reason
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=lead.public_id,
        actor=ACTOR,
        action="routing.decided",
        reason=why,
        after={"rule": rule, "owner": owner.user.get_username() if owner else None, "candidates": described},
    )
    return Routed(owner, rule, why, tuple(candidates))


def _queue_reason(candidates: list[Candidate]) -> str:
    if not candidates:
        return "no setters on the team"
    parts = [f"{c.member.user.get_username()}: {'; '.join(c.skipped) or 'weight 0'}" for c in candidates]
    return "no eligible owner — " + ", ".join(parts)


def _manager_queue(lead: Lead, candidates: list[Candidate], *, reason: str) -> tuple[TeamMember | None, str]:
    manager = business_manager(lead.business_id)
    queue_reason = _queue_reason(candidates)[:300]
    lead_sync.lead_set_routing_reason(lead, queue_reason, actor=ACTOR)
    lead_sync.lead_flag_exception(lead, LeadException.NO_ELIGIBLE_OWNER, actor=ACTOR, reason=queue_reason)
    if lead.owner_id is None and manager is not None:
        # Invariant 3: the exception has an owner too.
        lead_sync.lead_assign(lead, manager, actor=ACTOR, reason=f"{MANAGER_QUEUE}: {queue_reason}", advance=False)
    if not lead.tasks.filter(kind="exception", status="open", title__startswith="Find an owner").exists():
        task_create(
            lead=lead,
            title="Find an owner for this lead",
            due_at=timezone.now(),
            actor=ACTOR,
            kind="exception",
            owner=manager,
            reason=queue_reason,
        )
    member_notify(manager, f"Lead {lead.public_id} needs an owner", f"{reason}: {queue_reason}")
    return lead.owner if lead.owner_id else manager, MANAGER_QUEUE


@transaction.atomic
def lead_reassign(lead: Lead, owner: TeamMember, *, actor: str, reason: str) -> Lead:
    """A leader gives the lead to another team member (CRM Sync's assign):
    its open next action moves with it, and a lead the manager queue held
    leaves the queue. Raises lead_sync.LeadSyncError for an owner from
    another business, an inactive one, or the one it has."""
    saved = lead_sync.lead_assign(lead, owner, actor=actor, reason=reason)
    if LeadException.NO_ELIGIBLE_OWNER in saved.exceptions:
        lead_sync.lead_flag_exception(
            saved, LeadException.NO_ELIGIBLE_OWNER, actor=actor, reason="a person chose the owner", present=False
        )
        lead_sync.lead_set_routing_reason(saved, "", actor=actor)
    task = saved.tasks.filter(kind="next_action", status="open").first()
    if task is not None and task.owner_id != owner.pk:
        next_action_set(saved, task.title, task.due_at, actor=actor, reason=reason, owner=owner)
    return saved
