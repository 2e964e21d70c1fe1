"""The dry-run preview: what a path would do for a lead if it started now.

`sequence_preview` shows each step's due time, channel, rendered text and the
gate's verdict at that time, without sending or writing anything. Later steps
are judged as if the earlier ones had sent what the preview says they would:
against the gate's daily cap, and by a channel's own check (voice comes only
after a text and an email went out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from agents.followup.sequences.steps import Step, sequence_steps, step_due, step_owner, step_render
from agents.outbound.gate import CAP_WINDOW, daily_cap_reached, gate_check, recipient_point
from crm.models import Enrollment, Lead, Message, Sequence
from crm.registry import Registry

# A channel's own eligibility for the preview (voice: the SMS and email paths
# ran without a reply): given the lead, what earlier steps sent, and when.
PreviewCheck = Callable[[Lead, list[tuple[datetime, str]], datetime], str]
CHANNEL_PREVIEWS: Registry[PreviewCheck] = Registry("sequence preview check")


@dataclass
class PreviewStep:
    step: int
    due_at: datetime
    channel: str
    body: str
    subject: str = ""
    template: str = ""
    # The gate's verdict as a message status (dry_run, queued, deferred,
    # blocked), or `task` (a person's task), or `skipped` (voice not eligible).
    verdict: str = ""
    reason: str = ""
    deferred_until: datetime | None = None
    owner: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in self.__dict__.items()}


@dataclass
class _Projection:
    """What earlier previewed steps would have sent, for the later ones' checks."""

    sends: list[tuple[datetime, str]] = field(default_factory=list)


def sequence_preview(lead: Lead, sequence: Sequence, now: datetime | None = None) -> list[PreviewStep]:
    """What the path would do for this lead if it started at `now`: each step's
    due time, channel, rendered text, and the gate's verdict at that time
    (consent, quiet hours, daily cap, one path at a time), counting what the
    earlier steps would have sent. Reads only; sends and writes nothing."""
    now = now or timezone.now()
    lead = Lead.objects.select_related("business", "contact__business", "owner__user").get(pk=lead.pk)
    sequence = Sequence.objects.select_related("business").get(pk=sequence.pk)
    own = Enrollment.objects.filter(
        lead=lead, sequence=sequence, status__in=[Enrollment.Status.ACTIVE, Enrollment.Status.WAITING]
    ).first()
    projection = _Projection()
    preview: list[PreviewStep] = []
    due = now
    for step in sequence_steps(sequence):
        due = step_due(sequence, due, step)
        owner = step_owner(lead)
        item = PreviewStep(
            step=step.index + 1,
            due_at=due,
            channel=step.channel,
            body=step.title,
            template=step.template,
            owner=owner.user.get_username() if owner else None,
        )
        preview.append(item)
        if step.channel == Sequence.StepChannel.TASK:
            item.verdict = "task"
            continue
        rendered = step_render(lead, step)
        if rendered.problem:
            item.verdict, item.reason = "task", rendered.problem
            continue
        item.body, item.subject = rendered.body, rendered.subject
        if step.channel == Sequence.StepChannel.VOICE and (preview_check := CHANNEL_PREVIEWS.get(step.channel)):
            skip = preview_check(lead, projection.sends, due)
            if skip:
                item.verdict, item.reason = "skipped", skip
                continue
        _preview_gate(lead, own, step, item, projection, due)
    return preview


def _preview_gate(
    lead: Lead, own: Enrollment | None, step: Step, item: PreviewStep, projection: _Projection, due: datetime
) -> None:
    message = Message(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        contact_point=recipient_point(lead.contact, step.channel),
        direction="out",
        channel=step.channel,
        body=item.body,
        automated=True,
        enrollment=own,
    )
    verdict = gate_check(message, automated=True, compliance_reply=False, now=due)
    status, reason = verdict.status, verdict.reason
    if status == Message.Status.QUEUED:
        # The gate counted what is on record; what the earlier previewed steps
        # would have sent by then counts too, under the gate's own cap rule.
        assert verdict.sent_today is not None  # an automated send queues only past the cap check
        projected = sum(1 for at, _channel in projection.sends if at >= due - CAP_WINDOW)
        if daily_cap_reached(lead.business, sent=verdict.sent_today, projected=projected):
            status, reason = Message.Status.BLOCKED, "daily_cap"
    if status == Message.Status.QUEUED and settings.SEND_MODE != "live":
        status = Message.Status.DRY_RUN
    item.verdict, item.reason, item.deferred_until = status, reason, verdict.deferred_until
    if status in (Message.Status.DRY_RUN, Message.Status.QUEUED, Message.Status.DEFERRED):
        projection.sends.append((due, step.channel))
