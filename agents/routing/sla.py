"""SLA timer: the first-response standard for each lead, and its breach.

The standard is the source's `first_response_minutes` (else the business's),
counted in business hours. The clock is an orchestrator event due at the
deadline (`sla.due`, one per lead by its dedupe key) that `run_timers`
claims; the breach itself is a compare-and-set on `sla_breached_at`, so it
fires exactly once per lead however many timer runs overlap.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from django.db import transaction
from django.utils import timezone

from agents.events import lead_event
from agents.notify import member_notify
from agents.outbound.local_hours import business_minutes_after
from crm.models import BEFORE_BOOKING_STAGES, Lead, LeadException
from crm.selectors import business_manager, rows_held
from crm.services import lead_sync
from crm.services.receipts import receipt_write

ACTOR = "agent:sla_timer"


def sla_minutes(lead: Lead) -> int:
    # The touches the unit of work holds, when it does (a new lead's one),
    # else the first one read with its source.
    touches = rows_held(lead, "touches")
    if touches is not None:
        first = min(touches, key=lambda t: (t.received_at, t.pk), default=None)
    else:
        first = lead.touches.select_related("source").order_by("received_at", "id").first()
    if first is not None and first.source is not None and first.source.first_response_minutes:
        return first.source.first_response_minutes
    return lead.business.first_response_minutes


def sla_deadline(lead: Lead, start: datetime, *, minutes: int | None = None) -> datetime:
    business = lead.business
    minutes = sla_minutes(lead) if minutes is None else minutes
    return business_minutes_after(start, minutes, business.business_hours or {}, ZoneInfo(business.timezone))


def sla_start(lead: Lead, *, now: datetime | None = None, minutes: int | None = None) -> datetime:
    """Set the lead's SLA due time and schedule its check (once per lead);
    `minutes`: the standard, when the caller has read it already."""
    if minutes is None:
        minutes = sla_minutes(lead)  # one read of the first touch's source for both uses
    due = sla_deadline(lead, lead.created_at or now or timezone.now(), minutes=minutes)
    if lead.sla_due_at != due:
        lead_sync.lead_set_sla(lead, due, actor=ACTOR, reason=f"first response within {minutes} business minutes")
    lead_event(lead, "sla.due", key=lead.public_id, due_at=due, actor=ACTOR)
    return due


@transaction.atomic
def sla_check(lead: Lead, *, now: datetime | None = None) -> str:
    """At the deadline: met, or breached (once) — receipt, alert, maybe reassign."""
    now = now or timezone.now()
    lead_sync.lead_refresh(lead)
    if not lead.is_open or lead.is_test:
        return "closed"
    if lead.stage not in BEFORE_BOOKING_STAGES:
        # A visit booked before anyone wrote (the person booked on Calendly):
        # they were reached by the booking itself.
        return "booked"
    if lead.first_response_at is not None and (lead.sla_due_at is None or lead.first_response_at <= lead.sla_due_at):
        return "met"
    claimed = Lead.objects.filter(pk=lead.pk, sla_breached_at__isnull=True).update(sla_breached_at=now)
    if not claimed:
        return "already breached"
    # The claim's UPDATE holds the row: read it again under that lock (an
    # owner may have changed since the first read), or, for the unit of
    # work's own lead, which no one else can change, set what the claim wrote.
    lead.sla_breached_at = now
    lead_sync.lead_refresh(lead)
    owner = lead.owner.user.get_username() if lead.owner else None
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=lead.public_id,
        actor=ACTOR,
        action="sla.breached",
        reason=f"no first contact by {lead.sla_due_at:%Y-%m-%d %H:%M} UTC" if lead.sla_due_at else "no first contact",
        after={"sla_due_at": lead.sla_due_at, "owner": owner},
    )
    lead_sync.lead_flag_exception(lead, LeadException.SLA_BREACHED, actor=ACTOR, reason="first response missed")
    manager = business_manager(lead.business_id)
    member_notify(
        manager,
        f"SLA breached: {lead.public_id}",
        f"{lead.contact.name or lead.public_id} has not been reached (owner: {owner or 'nobody'}).",
        slack=False,  # the Slack alert is agents.reporting.alerts' (deduplicated, retried)
    )
    if lead.business.sla_reassign_on_breach and lead.owner_id:
        from agents.routing.assign import RULE, lead_route

        routed = lead_route(
            lead,
            urgent=bool(lead.facts.get("urgent")),
            areas=tuple(lead.facts.get("areas") or ()),
            now=now,
            exclude=(lead.owner_id,),
            reason="SLA breached: reassigned",
        )
        if routed.rule == RULE:
            from crm.services.next_action import next_action_set

            lead_sync.lead_refresh(lead)
            next_action_set(
                lead,
                lead.next_action or "First contact (reassigned after an SLA breach)",
                now,
                actor=ACTOR,
                reason="SLA breached: the new owner takes the next action",
            )
        return "breached, reassigned" if routed.rule == RULE else "breached, manager queue"
    return "breached"
