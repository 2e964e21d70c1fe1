"""No-Reply Follow-Up: when the first response got no reply
within the standard, the business's `no_reply` path runs — early texts, an
email with the details, call tasks for the owner, a voice call last — and,
when it ends without a reply, the lead ends `unresponsive`: never an endless
New Lead.

Trigger: the SLA timer calls `no_reply_start` once the first-response
standard has passed. Stop rule: the shared exits of the sequence engine (a
reply, booking, opt-out… ends the path before it completes).
"""

from __future__ import annotations

from datetime import datetime

from agents.events import exception_task
from agents.followup.sequences.engine import ON_COMPLETE, enrollment_start
from crm.models import Enrollment, Lead, Message, Stage
from crm.services import lead_sync

ACTOR = "agent:no_reply_follow_up"
TRIGGER = "no_reply"


def replied_after_first_response(lead: Lead) -> bool:
    """Did the person write back after our first message to them?"""
    first_out = (
        Message.objects.filter(lead=lead, direction="out").order_by("created_at").values_list("created_at", flat=True)
    ).first()
    if first_out is None:
        return False
    return Message.objects.filter(contact_id=lead.contact_id, direction="in", created_at__gt=first_out).exists()


def no_reply_start(lead: Lead, *, now: datetime | None = None) -> Enrollment | None:
    """Start the no-reply path for a lead whose first response went unanswered.

    None when the person already replied, or when the engine declines (no
    `no_reply` path, a closed/held/paused lead, a stage past first contact).
    Idempotent: a lead already on the path gets its enrollment back.
    """
    if replied_after_first_response(lead):
        return None
    return enrollment_start(lead, TRIGGER, actor=ACTOR, now=now)


def no_reply_completed(enrollment: Enrollment, lead: Lead, now: datetime) -> None:
    """The whole path ran without a reply: the lead is unresponsive, through
    CRM Sync. A stage that cannot move there (a lead never routed) goes to a
    person rather than staying new forever."""
    if lead.stage == Stage.UNRESPONSIVE:
        return
    if lead_sync.transition_allowed(lead.stage, Stage.UNRESPONSIVE):
        lead_sync.lead_transition(
            lead,
            Stage.UNRESPONSIVE,
            actor=ACTOR,
            reason=f"no reply after the whole {enrollment.sequence.key} path ({enrollment.public_id})",
        )
        return
    exception_task(
        lead,
        "Decide this lead: no reply after the whole follow-up path",
        f"stage {lead.stage} cannot move to unresponsive; a person must close or reroute it",
        actor=ACTOR,
    )


def register() -> None:
    ON_COMPLETE.register(TRIGGER, no_reply_completed)
