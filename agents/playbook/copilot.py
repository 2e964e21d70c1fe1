"""The Human Setter Copilot: what a setter is offered to answer a lead with,
and sending what they chose through the gate.

Offered: the suggested reply (the assistant's draft for the person's last
message, or the first acknowledgement when they have not written) and each
approved template of the playbook rendered for the lead, all checked by the
assistant. When a language model drafted a reply to that message
(agents/ai/inbound.py) and the claims guard finds no claim in it at all, its
text is the suggestion instead; a draft that makes claims waits in the thread
for a manager, and the setter is offered the playbook's reply.

Sent: text that is one of those offers, unmodified and approved, goes as
approved text; anything else is checked as a person's edit
(`draft_check`), and an edit the claims guard flags waits for a manager's
approval. Every send is the gate's (`message_send`), once per composer form:
the form's key is the message's idempotency key, so a double click sends once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agents.outbound.gate import POINT_KIND, message_send
from agents.playbook.assistant import (
    CHANNEL,
    EDITED,
    Draft,
    draft_acknowledgement,
    draft_check,
    draft_reply,
    draft_template,
)
from agents.playbook.claims_guard import claims_scan
from crm.models import Lead, Message
from crm.selectors import message_templates

# The channels a setter may answer on, in the order offered; each needs a
# valid contact point of the gate's kind for it (an Instagram DM: the
# person's handle, and the gate then holds it to Meta's 24-hour window; a
# marketplace thread: the person's handle there).
REPLY_CHANNELS = ("sms", "instagram", "email", "thumbtack", "yelp")


@dataclass(frozen=True)
class Offer:
    suggested: Draft
    templates: list[Draft]
    channels: list[str]


def reply_offer(lead: Lead, last_in: str | None, *, model_draft: Message | None = None) -> Offer:
    """What the composer offers for `lead`, whose person last wrote `last_in`
    (None: they have not written). `lead` comes with its business, contact
    (and its points), owner and service line. `model_draft`: a language
    model's draft answering that message, if one waits (see the module)."""
    suggested = _model_suggestion(model_draft)
    if suggested is None:
        suggested = draft_reply(lead, last_in) if last_in else draft_acknowledgement(lead)
    keys = sorted(k for k, t in message_templates(lead.business_id).items() if t.approved and t.channel == CHANNEL)
    templates = [d for d in (draft_template(lead, key) for key in keys) if d.body]
    kinds = {p.kind for p in lead.contact.points.all() if p.is_valid}
    return Offer(suggested, templates, [c for c in REPLY_CHANNELS if POINT_KIND[c] in kinds])


def reply_send(
    lead: Lead,
    *,
    user: Any,
    body: str,
    form_key: str,
    channel: str = "sms",
    template_key: str = "",
    subject: str = "",
    now: datetime | None = None,
) -> Message:
    """Send a setter's reply through the gate and return the message in its
    resulting status (dry_run, queued, deferred, blocked or pending_approval).
    `form_key` names the composer form the text came from."""
    if channel not in REPLY_CHANNELS:
        raise ValueError(f"a reply goes by {' or '.join(REPLY_CHANNELS)}, not {channel!r}")
    body = body.strip()
    last_in = (
        Message.objects.filter(lead=lead, direction="in").order_by("-created_at", "-pk").values_list("body", flat=True)
    ).first()
    checked = _as_offered(lead, body, template_key, last_in) or draft_check(body, template_key=template_key or None)
    if channel == "email" and not subject.strip():
        subject = f"Your request to {lead.business.name}"
    return message_send(
        lead=lead,
        channel=channel,
        body=body,
        subject=subject.strip(),
        actor=user.get_username(),
        idempotency_key=f"reply:{lead.public_id}:{user.pk}:{form_key}",
        automated=False,
        template_key=checked.template_key or template_key,
        needs_approval=checked.needs_person,
        requested_by=user,
        now=now,
    )


def model_draft_key(message: Message) -> str:
    """The idempotency key of the model's draft answering `message`."""
    return f"ai-draft:{message.public_id}"


def _model_suggestion(draft: Message | None) -> Draft | None:
    """A model's waiting draft as the composer's suggestion, when it makes
    no claim at all: the setter who sends it is the person it waits for."""
    if draft is None or draft.status not in (Message.Status.PENDING_APPROVAL, Message.Status.DRAFT):
        return None
    if not draft.body.strip() or claims_scan(draft.body):
        return None
    author = draft.actor.removeprefix("agent:").replace("_", " ")
    why = draft.draft_reason or "drafted by a language model"
    return Draft(draft.body, None, None, False, [], False, why, EDITED, author=author)


def _as_offered(lead: Lead, body: str, template_key: str, last_in: str | None) -> Draft | None:
    """The offer `body` is, unmodified and approved, if it is one."""
    offers = [draft_template(lead, template_key)] if template_key else []
    offers.append(draft_reply(lead, last_in) if last_in else draft_acknowledgement(lead))
    return next((d for d in offers if d.unmodified_approved and d.body.strip() == body), None)
