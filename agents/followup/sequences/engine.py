"""The sequence engine: a lead's place in a follow-up path, from its start to
the moment it should stop.

- An `Enrollment` is one lead's place in one path. Its next step is one
  `Timer` row (kind `sequence.step`, dedupe key `seq:<enrollment>:<step>`),
  claimed by `run_timers`. A step runs under a row lock on the enrollment and
  advances `next_step_index` by compare-and-set in the same transaction as
  its send, so a step runs at most once whatever overlaps, redeliveries or
  stale re-claims happen; its message's idempotency key is the same key.
- One active automated enrollment per contact (a partial unique constraint).
  The path with the better priority (lower number) runs; any other waits
  (`waiting`) — a newcomer behind it, or the running one when a better path
  arrives — and resumes at its step when the running one ends.
- Two records of one person merged (crm.services.merge), each with a path
  running: the better priority keeps running, the other ends (`merged`).
- Exits shared by every path (`EXIT_REASONS`): reply, booking, won, opt-out,
  complaint, manual hold, disqualification, a stage that leaves the trigger's
  stages, plus each sequence's `goal_stages`. They are applied eagerly by the
  roles that see them (`enrollments_stop`) and checked again before every
  step. Every exit writes a receipt with its reason and blocks the path's
  messages that have not gone out yet (deferred, awaiting approval, queued).

What a step is and how it is performed is `steps`; this module decides
whether and when it runs.

Lock order, everywhere here: the lead row, then the contact row, then
enrollment rows — the order capture and CRM Sync already take the first two.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Subquery
from django.utils import timezone

from agents.followup.sequences.steps import ACTOR, sequence_steps, step_due, step_key, step_perform
from crm.models import CLOSED_STAGES, Contact, Enrollment, Lead, Message, Sequence, Stage, Timer
from crm.registry import Registry
from crm.services import lead_sync
from crm.services.merge import CONTACTS_MERGING
from crm.services.receipts import receipt_write
from crm.services.timers import timer_handler_register, timer_schedule

STEP_TIMER = "sequence.step"

# The shared exits, and what each means on the enrollment.
EXIT_REASONS = (
    "reply",
    "booking",
    "won",
    "opt_out",
    "complaint",
    "hold",
    "disqualified",
    "stage_left",
    "goal",
    "completed",
)
# Exits that are the path reaching its end rather than being cut short.
COMPLETING_REASONS = frozenset({"goal", "completed"})
# The stages in which a trigger's path makes sense; leaving them ends the path.
TRIGGER_STAGES: dict[str, frozenset[str]] = {
    "no_reply": frozenset({Stage.NEW, Stage.ASSIGNED, Stage.CONTACTED}),
    "no_show": frozenset({Stage.NO_SHOW}),
    "open_estimate": frozenset({Stage.ESTIMATE_SENT, Stage.APPOINTMENT_HELD, Stage.QUALIFIED}),
    "appointment": frozenset({Stage.BOOKED}),
}
# The last step gets this long to be answered before the path is complete.
COMPLETE_AFTER = timedelta(days=1)
# A paused sequence's automated messages wait (a task step for a person still
# runs); the held step is looked at again this often until it is resumed.
PAUSABLE_CHANNELS = frozenset({Sequence.StepChannel.SMS, Sequence.StepChannel.VOICE})
PAUSED_RECHECK = timedelta(hours=1)
# Messages of an ended path that have not gone out: blocked as `stopped`.
UNSENT = (Message.Status.DRAFT, Message.Status.DEFERRED, Message.Status.PENDING_APPROVAL, Message.Status.QUEUED)

# Role-specific hooks, registered at startup by the modules that own them.
# An extra exit check for a trigger: returns an exit reason or "".
ExitCheck = Callable[[Enrollment, Lead, datetime], str]
# What happens when a trigger's path completes without an exit (no_reply →
# unresponsive).
CompletionHook = Callable[[Enrollment, Lead, datetime], None]
TRIGGER_EXITS: Registry[ExitCheck] = Registry("sequence exit check")
ON_COMPLETE: Registry[CompletionHook] = Registry("sequence completion hook")


def sequence_for(business_id: int, trigger: str) -> Sequence | None:
    """The business's active path for a trigger: the best priority, then the oldest."""
    return (
        Sequence.objects.select_related("business")
        .filter(business_id=business_id, trigger=trigger, is_active=True)
        .order_by("priority", "pk")
        .first()
    )


# --- locks, timers and receipts -------------------------------------------------------


def _lock_contact(contact_id: int) -> Contact:
    return Contact.objects.select_for_update().get(pk=contact_id)


def _schedule(enrollment: Enrollment, index: int, due_at: datetime) -> None:
    """The timer for step `index` (the index past the last step completes the path)."""
    key = step_key(enrollment, index)
    timer = timer_schedule(
        business=enrollment.business,
        lead=enrollment.lead,
        kind=STEP_TIMER,
        due_at=due_at,
        payload={"enrollment": enrollment.pk, "step": index},
        dedupe_key=key,
    )
    if timer.status == Timer.Status.CANCELED:
        # The path waited and now resumes at this step: its timer comes back.
        Timer.objects.filter(pk=timer.pk, status=Timer.Status.CANCELED).update(
            status=Timer.Status.PENDING, due_at=due_at, claimed_at=None, error=""
        )
    enrollment.next_step_index, enrollment.next_step_due_at = index, due_at
    enrollment.save(update_fields=["next_step_index", "next_step_due_at"])


def _hold(enrollment: Enrollment, index: int, due_at: datetime) -> None:
    """Step `index` looked at again at `due_at`: a timer of its own (the
    step's timer is the one running now, and is done after this run)."""
    timer_schedule(
        business=enrollment.business,
        lead=enrollment.lead,
        kind=STEP_TIMER,
        due_at=due_at,
        payload={"enrollment": enrollment.pk, "step": index},
        dedupe_key=f"{step_key(enrollment, index)}:held:{due_at:%Y%m%d%H%M%S}",
    )
    enrollment.next_step_due_at = due_at
    enrollment.save(update_fields=["next_step_due_at"])


def _cancel_timers(enrollment: Enrollment) -> None:
    Timer.objects.filter(
        lead_id=enrollment.lead_id,
        kind=STEP_TIMER,
        status=Timer.Status.PENDING,
        dedupe_key__startswith=f"seq:{enrollment.public_id}:",  # every step_key of the enrollment
    ).update(status=Timer.Status.CANCELED)


def _receipt(enrollment: Enrollment, action: str, *, actor: str, reason: str, before: str, **after: Any) -> None:
    receipt_write(
        business=enrollment.business,
        lead=enrollment.lead,
        subject=enrollment.public_id,
        actor=actor,
        action=action,
        reason=reason,
        before={"status": before},
        after={"status": enrollment.status, "sequence": enrollment.sequence.key, **after},
    )


def _block_unsent(enrollment: Enrollment, *, reason: str) -> int:
    """The path ended: what it meant to send and has not sent never goes out."""
    blocked = 0
    for message in Message.objects.filter(enrollment=enrollment, status__in=UNSENT).select_related("lead"):
        # Compare-and-set: a worker that claimed the row (queued → sending) first wins.
        if Message.objects.filter(pk=message.pk, status=message.status).update(
            status=Message.Status.BLOCKED, block_reason=Message.BlockReason.STOPPED, deferred_until=None
        ):
            blocked += 1
            receipt_write(
                business=message.business,
                lead=message.lead,
                subject=message.public_id,
                actor=ACTOR,
                action="message.blocked",
                reason=f"stopped: the path ended ({reason})",
                before={"status": message.status},
                after={"status": Message.Status.BLOCKED, "block_reason": "stopped"},
            )
    return blocked


def _end(enrollment: Enrollment, *, reason: str, actor: str, now: datetime) -> None:
    """End one enrollment (the caller holds the contact lock)."""
    before = enrollment.status
    enrollment.status = Enrollment.Status.COMPLETED if reason in COMPLETING_REASONS else Enrollment.Status.STOPPED
    enrollment.stop_reason, enrollment.ended_at, enrollment.next_step_due_at = reason, now, None
    enrollment.save(update_fields=["status", "stop_reason", "ended_at", "next_step_due_at"])
    _cancel_timers(enrollment)
    blocked = _block_unsent(enrollment, reason=reason)
    _receipt(
        enrollment,
        f"enrollment.{enrollment.status}",
        actor=actor,
        reason=reason,
        before=before,
        step=enrollment.next_step_index,
        messages_blocked=blocked,
    )


def _activate(
    enrollment: Enrollment, *, actor: str, now: datetime, action: str, reason: str, before: str | None = None
) -> None:
    before = enrollment.status if before is None else before
    enrollment.status = Enrollment.Status.ACTIVE
    enrollment.save(update_fields=["status"])
    steps = sequence_steps(enrollment.sequence)
    index = enrollment.next_step_index
    due = step_due(enrollment.sequence, now, steps[index]) if index < len(steps) else now
    _schedule(enrollment, index, due)
    _receipt(enrollment, action, actor=actor, reason=reason, before=before, step=index, next_step_due_at=due)


def _wait(enrollment: Enrollment, *, actor: str, behind: Enrollment, before: str | None = None) -> None:
    before = enrollment.status if before is None else before
    enrollment.status, enrollment.next_step_due_at = Enrollment.Status.WAITING, None
    enrollment.save(update_fields=["status", "next_step_due_at"])
    _cancel_timers(enrollment)
    _receipt(
        enrollment,
        "enrollment.waiting",
        actor=actor,
        before=before,
        step=enrollment.next_step_index,
        reason=f"one path at a time: {behind.sequence.key} ({behind.public_id}, priority "
        f"{behind.sequence.priority}) runs for this person",
    )


def _resume_next(contact_id: int, *, actor: str, now: datetime) -> Enrollment | None:
    """The contact's best waiting path becomes active, unless one already is.
    A waiting path whose own exit applies by now ends instead."""
    if Enrollment.objects.filter(contact_id=contact_id, status=Enrollment.Status.ACTIVE).exists():
        return None
    waiting = (
        Enrollment.objects.select_for_update(of=("self",))
        .select_related("sequence__business", "lead__business", "lead__contact", "business")
        .filter(contact_id=contact_id, status=Enrollment.Status.WAITING)
        .order_by("sequence__priority", "created_at", "pk")
    )
    for enrollment in waiting:
        reason = exit_reason(enrollment, enrollment.lead, now)
        if reason:
            _end(enrollment, reason=reason, actor=actor, now=now)
            continue
        _activate(enrollment, actor=actor, now=now, action="enrollment.resumed", reason="the path ahead of it ended")
        return enrollment
    return None


# --- exits ---------------------------------------------------------------------------


def _replied_since(enrollment: Enrollment) -> bool:
    return Message.objects.filter(
        contact_id=enrollment.contact_id, direction="in", created_at__gt=enrollment.created_at
    ).exists()


def exit_reason(enrollment: Enrollment, lead: Lead, now: datetime) -> str:
    """The first shared exit (or the sequence's goal) that applies now, or ""."""
    sequence, trigger = enrollment.sequence, enrollment.sequence.trigger
    contact = lead.contact
    if lead.hold:
        return "hold"
    if contact.automation_paused:
        return "complaint" if "complaint" in (lead.exceptions or []) else "opt_out"
    if lead.stage in (sequence.goal_stages or []):
        return "goal"
    if lead.stage == Stage.WON:
        return "won"
    if lead.stage == Stage.DISQUALIFIED:
        return "disqualified"
    if lead.stage == Stage.BOOKED and trigger != "appointment":
        return "booking"
    if lead.stage not in TRIGGER_STAGES.get(trigger, frozenset(Stage.values) - set(CLOSED_STAGES)):
        return "stage_left"
    if trigger != "appointment" and _replied_since(enrollment):
        return "reply"
    extra = TRIGGER_EXITS.get(trigger)
    return extra(enrollment, lead, now) if extra else ""


def _startable(lead: Lead) -> bool:
    return lead.is_open and not lead.hold and not lead.is_test and not lead.contact.automation_paused


# --- the public write path ---------------------------------------------------------------


def _load(lead: Lead) -> Lead:
    # Locks the lead first (see the module's lock order).
    return (
        Lead.objects.select_for_update(of=("self",), no_key=True).select_related("business", "contact").get(pk=lead.pk)
    )


@transaction.atomic
def enrollment_start(lead: Lead, trigger: str, *, actor: str, now: datetime | None = None) -> Enrollment | None:
    """Enroll the lead in the business's active path for `trigger`.

    None when the business has no such path, or the lead is closed, held,
    paused, a test lead or outside the trigger's stages. Idempotent: a lead
    already in that path (active or waiting) gets that enrollment back. With
    another path running for the person, the better priority runs and the
    other waits. One transaction, under the lead and contact row locks;
    writes `enrollment.started` (or `.waiting`) receipts.
    """
    now = now or timezone.now()
    lead = _load(lead)
    sequence = sequence_for(lead.business_id, trigger)
    if sequence is None or not _startable(lead) or lead.stage not in TRIGGER_STAGES.get(trigger, {lead.stage}):
        return None
    if not sequence_steps(sequence):
        return None
    _lock_contact(lead.contact_id)
    existing = Enrollment.objects.filter(
        lead=lead, sequence=sequence, status__in=[Enrollment.Status.ACTIVE, Enrollment.Status.WAITING]
    ).first()
    if existing is not None:
        return existing
    return _enroll(lead, sequence, actor=actor, now=now, start_index=0, reason=f"trigger {trigger}")


def _enroll(lead: Lead, sequence: Sequence, *, actor: str, now: datetime, start_index: int, reason: str) -> Enrollment:
    running = (
        Enrollment.objects.select_for_update(of=("self",))
        .select_related("sequence", "business", "lead")
        .filter(contact_id=lead.contact_id, status=Enrollment.Status.ACTIVE)
        .first()
    )
    enrollment = Enrollment.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        sequence=sequence,
        status=Enrollment.Status.WAITING,
        next_step_index=start_index,
    )
    if running is not None and running.sequence.priority <= sequence.priority:
        _wait(enrollment, actor=actor, behind=running, before="")
        return enrollment
    if running is not None:
        # A better path arrives: the running one steps aside and waits at its step.
        _wait(running, actor=actor, behind=enrollment)
    _activate(enrollment, actor=actor, now=now, action="enrollment.started", reason=reason, before="")
    return enrollment


@transaction.atomic
def enrollments_stop(
    *, lead: Lead | None = None, contact: Contact | None = None, reason: str, actor: str, now: datetime | None = None
) -> int:
    """End every active or waiting enrollment of the lead (or of every lead of
    the contact), cancel their pending step timers, block their unsent
    messages and write a receipt each; returns how many ended.

    A path of another lead of the same person that was waiting behind one of
    these resumes. One transaction, under the lead (when given) and contact
    row locks; safe to call again (nothing left to end is a no-op).
    """
    if (lead is None) == (contact is None):
        raise ValueError("pass a lead or a contact")
    now = now or timezone.now()
    if lead is not None:
        lead = _load(lead)
        contact_id = lead.contact_id
    else:
        assert contact is not None
        contact_id = contact.pk
    _lock_contact(contact_id)
    current = Enrollment.objects.select_for_update(of=("self",)).select_related("sequence", "business", "lead")
    current = current.filter(status__in=[Enrollment.Status.ACTIVE, Enrollment.Status.WAITING])
    current = current.filter(lead=lead) if lead is not None else current.filter(contact_id=contact_id)
    ended = 0
    for enrollment in current.order_by("pk"):
        _end(enrollment, reason=reason, actor=actor, now=now)
        ended += 1
    if ended:
        _resume_next(contact_id, actor=actor, now=now)
    return ended


@transaction.atomic
def enrollment_resume_after_hold(lead: Lead, *, actor: str, now: datetime | None = None) -> Enrollment | None:
    """The hold is released: the path the hold stopped starts again at the step
    it had reached (a new enrollment, so the old one's record stays as it
    was). None when nothing was stopped by the hold, the lead is still held or
    closed, or a path already runs for the lead."""
    now = now or timezone.now()
    lead = _load(lead)
    if not _startable(lead):
        return None
    _lock_contact(lead.contact_id)
    if Enrollment.objects.filter(lead=lead, status__in=[Enrollment.Status.ACTIVE, Enrollment.Status.WAITING]).exists():
        return None
    held = (
        Enrollment.objects.select_related("sequence__business")
        .filter(lead=lead, status=Enrollment.Status.STOPPED, stop_reason="hold")
        .order_by("-ended_at", "-pk")
        .first()
    )
    if held is None or not held.sequence.is_active:
        return None
    if held.next_step_index >= len(sequence_steps(held.sequence)):
        return None
    if lead.stage not in TRIGGER_STAGES.get(held.sequence.trigger, {lead.stage}):
        return None
    return _enroll(
        lead,
        held.sequence,
        actor=actor,
        now=now,
        start_index=held.next_step_index,
        reason=f"hold released: {held.public_id} resumes at step {held.next_step_index + 1}",
    )


# --- running a step -------------------------------------------------------------------------


def step_run(enrollment_id: int, index: int, *, now: datetime, lead_id: int | None = None) -> str:
    """Run step `index` of an enrollment if it is still the one due.

    One transaction (the caller's, when it has one: `run_timers` runs each
    step with its timer's done mark), under the lead, contact and enrollment
    row locks. `lead_id`, when the caller knows it (the step's timer row
    does), saves reading it from the enrollment first. The
    shared exits are checked first; then the step acts (a message through the
    gate, a task for a person, or a call) and the next step is scheduled — or,
    past the last step, the path completes and a waiting path resumes.
    Returns what happened; "skipped" when the step already ran or the path
    ended (a redelivery, an overlapping run).
    """
    if lead_id is None:
        lead_id = Enrollment.objects.filter(pk=enrollment_id).values_list("lead_id", flat=True).first()
        if lead_id is None:
            return "skipped"
    # No savepoint inside a caller's transaction: a failing step fails it whole.
    with transaction.atomic(savepoint=False):
        lead = (
            Lead.objects.select_for_update(of=("self",), no_key=True)
            .select_related("business", "owner__user")
            .filter(pk=lead_id)
            .first()
        )
        # The enrollment's contact, read and locked in one statement (FOR
        # UPDATE locks only the contact row, not the enrollment it looks up).
        contact = (
            Contact.objects.select_for_update()
            .filter(pk=Subquery(Enrollment.objects.filter(pk=enrollment_id).values("contact_id")))
            .first()
        )
        if lead is None or contact is None:
            return "skipped"
        enrollment = Enrollment.objects.select_for_update(of=("self",)).select_related("sequence").get(pk=enrollment_id)
        if enrollment.lead_id != lead.pk:
            raise LookupError(f"timer for {enrollment.public_id} names lead {lead.public_id}, not the enrollment's")
        if enrollment.status != Enrollment.Status.ACTIVE or enrollment.next_step_index != index:
            return "skipped"
        # One business row for all of them; the contact is the locked, current one.
        if contact.pk == lead.contact_id:
            lead.contact = contact
        else:
            lead.contact = Contact.objects.get(pk=lead.contact_id)
        for holder in (lead.contact, enrollment, enrollment.sequence):
            if holder.business_id == lead.business_id:
                holder.business = lead.business
        enrollment.lead, enrollment.contact = lead, contact
        reason = exit_reason(enrollment, lead, now)
        steps = sequence_steps(enrollment.sequence)
        if not reason and index >= len(steps):
            reason = "completed"
        if reason:
            _end(enrollment, reason=reason, actor=ACTOR, now=now)
            if reason == "completed" and (hook := ON_COMPLETE.get(enrollment.sequence.trigger)):
                hook(enrollment, lead, now)
            _resume_next(enrollment.contact_id, actor=ACTOR, now=now)
            return reason
        step = steps[index]
        if enrollment.sequence.paused_at is not None and step.channel in PAUSABLE_CHANNELS:
            # The SMS health check paused the sequence: this text waits, the
            # path keeps its place, and the step is looked at again later.
            _hold(enrollment, index, now + PAUSED_RECHECK)
            _receipt(
                enrollment,
                "enrollment.step_held",
                actor=ACTOR,
                reason=f"sequence paused: {enrollment.sequence.paused_reason}"[:300],
                before=Enrollment.Status.ACTIVE,
                step=index + 1,
                next_step_due_at=enrollment.next_step_due_at,
            )
            return "held: sequence paused"
        outcome = step_perform(enrollment, lead, step, now)
        previous = enrollment.next_step_due_at or now
        following = index + 1
        due = step_due(enrollment.sequence, previous, steps[following]) if following < len(steps) else None
        _schedule(enrollment, following, due or previous + COMPLETE_AFTER)
        _receipt(
            enrollment,
            "enrollment.step_ran",
            actor=ACTOR,
            reason=outcome,
            before=Enrollment.Status.ACTIVE,
            step=index + 1,
            channel=step.channel,
            next_step_due_at=enrollment.next_step_due_at,
        )
        return outcome


def _step_timer(timer: Timer) -> None:
    # `claimed_at` is the `now` the run was asked to act at: running timers
    # "at" a later time (tests, catch-up) acts as of that time.
    step_run(
        int(timer.payload["enrollment"]),
        int(timer.payload["step"]),
        now=timer.claimed_at or timezone.now(),
        lead_id=timer.lead_id,
    )


# --- the orchestrator's steps for holds -----------------------------------------------------


def hold_set_step(lead: Lead, data: dict[str, Any]) -> str:
    """`hold.set`: a person holds the lead, so its paths end (reason `hold`)."""
    return f"ended {enrollments_stop(lead=lead, reason='hold', actor=ACTOR)}"


def hold_released_step(lead: Lead, data: dict[str, Any]) -> str:
    """`hold.released`: the path the hold stopped starts again where it was."""
    resumed = enrollment_resume_after_hold(lead, actor=ACTOR)
    return f"resumed as {resumed.public_id}" if resumed else "nothing to resume"


# A closing stage's own reason, as the step's exit check names it.
_CLOSED_REASONS: dict[str, str] = {Stage.WON: "won", Stage.DISQUALIFIED: "disqualified"}


def _lead_closed(lead: Lead, stage: str, actor: str) -> None:
    enrollments_stop(lead=lead, reason=_CLOSED_REASONS.get(stage, "stage_left"), actor=actor)


# Why a path ended when its person was merged into another who had a better one.
MERGED_REASON = "merged"


def _contacts_merging(keep: Contact, merge: Contact, actor: str) -> list[str]:
    """Two records of one person become one, each maybe with a path running:
    one path per person, so the better priority (then the older) keeps
    running and the other ends, with its receipt. The merge holds both
    people's leads and contact rows; their waiting paths wait on."""
    active = list(
        Enrollment.objects.select_for_update(of=("self",))
        .select_related("sequence", "business", "lead")
        .filter(contact_id__in=[keep.pk, merge.pk], status=Enrollment.Status.ACTIVE)
        .order_by("sequence__priority", "created_at", "pk")
    )
    now = timezone.now()
    for enrollment in active[1:]:
        _end(enrollment, reason=MERGED_REASON, actor=actor, now=now)
    return [enrollment.public_id for enrollment in active[1:]]


def register() -> None:
    # A step is one transaction: it commits with its timer's done mark.
    timer_handler_register(STEP_TIMER, _step_timer, atomic=True)
    # However a lead closes (a task's outcome, a visit's, a no-show's), its paths end with it.
    lead_sync.LEAD_CLOSED.register("sequences", _lead_closed)
    # However two records of one person merge, one path runs for them.
    CONTACTS_MERGING.register("sequences", _contacts_merging)
