"""The orchestrator's steps for arrival and ownership: new lead, another
touch, answered qualification questions, a missed call, the SLA deadline."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from agents.ai.explain import FACT_KEY as FIT_EXPLANATION
from agents.ai.explain import explanation_schedule
from agents.events import UNREACHABLE_TITLE, MissingInformation
from agents.fit.qualify import EXCEPTION_PATH, Fit, lead_fit
from agents.routing.assign import lead_route
from agents.routing.sla import sla_check, sla_deadline, sla_minutes, sla_start
from approvals.models import ApprovalRequest
from approvals.services import approval_request_open
from crm.models import Lead, Task
from crm.services import lead_sync
from crm.services.next_action import next_action_ensure, next_action_update

ACTOR = "agent:orchestrator"
FIT_ACTOR = "agent:fit"


def _apply_fit(lead: Lead, reason: str) -> Fit:
    fit = lead_fit(lead)
    facts = {**lead.facts, **fit.facts()}
    if (lead.fit_score, lead.fit_reasons, lead.facts.get("offer")) != (fit.score, fit.reasons, fit.offer):
        facts.pop(FIT_EXPLANATION, None)  # it explained other points
    lead_sync.lead_record_fit(
        lead,
        facts=facts,
        fit_score=fit.score,
        fit_reasons=fit.reasons,
        service_line=fit.service_line,
        actor=FIT_ACTOR,
        reason=reason,
    )
    for flag in fit.flags:
        if flag not in lead.exceptions:
            lead_sync.lead_flag_exception(
                lead, flag, actor=FIT_ACTOR, reason=", ".join(fit.matched.get(flag, [])) or flag
            )
    if "out_of_area" in lead.exceptions and fit.territory.status == "in_area":
        lead_sync.lead_flag_exception(
            lead, "out_of_area", actor=FIT_ACTOR, reason="postal code now in area", present=False
        )
    _exception_path(lead, fit)
    # With a model: a short explanation in the lead's words, after commit; the points stay these.
    explanation_schedule(lead)
    return fit


def _exception_path(lead: Lead, fit: Fit) -> None:
    """Out-of-area, emergency, commercial and warranty leads: a person decides before any booking."""
    flags = [f for f in fit.flags if f in EXCEPTION_PATH]
    if not flags:
        return
    if ApprovalRequest.objects.filter(lead=lead, kind="exception", status="pending").exists():
        return
    approval_request_open(
        business=lead.business,
        lead=lead,
        kind="exception",
        summary=f"Decide before booking: {', '.join(flags)} ({lead.contact.name or lead.public_id})",
        proposed_by=FIT_ACTOR,
        payload={"flags": flags, "matched": {f: fit.matched.get(f, []) for f in flags}},
    )


def _route(lead: Lead, fit: Fit, reason: str) -> str:
    if lead.owner_id is not None and "no_eligible_owner" not in lead.exceptions:
        return "owned"
    routed = lead_route(lead, urgent=fit.urgent, areas=fit.territory.areas, reason=reason)
    return routed.rule


def _first_contact_title(lead: Lead, fit: Fit) -> str:
    name = lead.contact.name or "the lead"
    if fit.territory.status == "unknown":
        return f"First contact: reach {name} and ask for their postal code"
    return f"First contact: reach {name}"


def _reread(lead: Lead) -> None:
    # One query, and the business, contact and owner come with it (a plain
    # refresh drops them, and each is then read again on first use); none
    # when the lead is the unit of work's own, kept current.
    lead_sync.lead_refresh(lead)


def new_lead_step(lead: Lead, data: dict[str, Any]) -> str:
    """Fit, owner, first response, next action and SLA clock for a new lead."""
    if lead.is_test or not lead.is_open:
        return "skipped"
    fit = _apply_fit(lead, "new lead")
    rule = _route(lead, fit, "new lead")
    _reread(lead)
    if not any(point.is_valid for point in lead.contact.points.all()):
        # Nobody can be contacted: no acknowledgement, no clock; a person finds a way.
        raise MissingInformation(UNREACHABLE_TITLE, "missing contact details")
    from agents.first_response.acknowledge import lead_first_response

    minutes = sla_minutes(lead)  # one read of the first touch's source for both uses
    ack = lead_first_response(
        lead.pk, title=_first_contact_title(lead, fit), due_at=sla_deadline(lead, lead.created_at, minutes=minutes)
    )
    _reread(lead)
    sla_start(lead, minutes=minutes)
    return f"fit {fit.score}, {rule}, acknowledgement {ack}"


def touch_added_step(lead: Lead, data: dict[str, Any]) -> str:
    """The same person came back about the same need: keep the one lead owned and moving."""
    if not lead.is_open or lead.is_test:
        return "closed"
    fit = _apply_fit(lead, "another touch")
    rule = _route(lead, fit, "returning lead without an owner")
    _reread(lead)
    task = next_action_ensure(
        lead,
        f"Follow up: {lead.contact.name or 'the lead'} came back ({data.get('channel', 'another source')})",
        timezone.now() + timedelta(minutes=lead.business.first_response_minutes),
        actor=ACTOR,
        reason="touch added",
    )
    return f"{rule}, next action {'created' if task else 'kept'}"


def qualification_answered_step(lead: Lead, data: dict[str, Any]) -> str:
    """New facts from the person (postal code, service): qualify again."""
    if not lead.is_open:
        return "closed"
    fit = _apply_fit(lead, "qualification answered")
    rule = _route(lead, fit, "qualified")
    return f"territory {fit.territory.status}, fit {fit.score}, {rule}"


def missed_call_step(lead: Lead, data: dict[str, Any]) -> str:
    """A missed call: the call back is already the lead's next action (the
    missed-call detector made it); make sure the lead has an owner and that
    the owner is the one calling back, and give the lead a next action
    should the detector have had none to give."""
    if not lead.is_open or lead.is_test:
        return "closed"
    fit = lead_fit(lead)
    rule = _route(lead, fit, "missed call")
    _reread(lead)
    current = lead.tasks.filter(kind=Task.Kind.NEXT_ACTION, status=Task.Status.OPEN).first()
    if current is None:
        next_action_ensure(
            lead,
            f"Call back {lead.contact.name or 'the caller'}",
            timezone.now() + timedelta(minutes=lead.business.first_response_minutes),
            actor=ACTOR,
            reason="missed call",
        )
        return rule
    owner = lead.owner if lead.owner is not None and lead.owner.is_active else None
    if owner is not None and current.owner_id != owner.pk and current.missed_calls.exists():
        # A call nobody could answer is missed as it opens the lead, before
        # routing gave the lead its owner: the call back went to the manager.
        next_action_update(current, current.title, current.due_at, owner=owner, actor=ACTOR, reason="missed call")
        return f"{rule}, call back handed to {owner.user.get_username()}"
    return rule


def sla_due_step(lead: Lead, data: dict[str, Any]) -> str:
    """The first-response standard has passed: check the SLA, and if the person
    has not written back, start the business's no-reply path."""
    outcome = sla_check(lead)
    if outcome in ("closed", "booked"):
        return outcome
    from agents.followup.no_reply import no_reply_start

    _reread(lead)
    enrollment = no_reply_start(lead)
    return f"{outcome}; no-reply path {enrollment.public_id if enrollment else 'not started'}"
