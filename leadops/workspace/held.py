"""Reads for the approvals in the workspace: a held reply as the thread words
it (why it was held, who decides, what became of it), the decision panel a
manager or owner decides it in, and the approvals list.

Why in words: the claims the guard finds in the words now proposed (a
price, a time, a guarantee…), the model's own reason for a drafted text,
else the request's summary. Who decides: the business's members whose role
holds `approval.decide`, never the person who proposed the words. What went
out to the person after the reply was held comes from the conversation the
thread already read, so the thread costs one query more for its approvals
and one for the people who decide, however long it is.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from agents.playbook.claims_guard import claims_scan
from approvals.kinds import approval_editable_fields
from approvals.models import ApprovalRequest
from approvals.selectors import approval_deciders, approval_sent_since, approvals_decidable, approvals_pending
from approvals.services import approval_is_proposer
from crm.models import Lead, Message, TeamMember
from crm.permissions import can

CLAIMS = {
    "price": "a price",
    "discount": "a discount or free offer",
    "warranty": "a guarantee",
    "arrival_time": "a time",
    "licensed_diagnosis": "a diagnosis of licensed work",
}
KINDS = {
    "message_draft": "Held reply",
    "out_of_playbook": "Reply outside the playbook",
    "opt_out_question": "Did they ask to stop?",
    "complaint": "Complaint",
    "merge_contacts": "Same person?",
    "high_value_estimate": "High-value estimate",
    "exception": "Exception",
    "review_reply": "Google review reply",
}


@dataclass(frozen=True)
class Change:
    """A run of words of an edit: kept, added or removed."""

    op: str  # same, added, removed
    text: str


@dataclass(frozen=True)
class Held:
    """One approval request as the workspace shows it."""

    approval: ApprovalRequest
    kind: str  # in words
    proposed: str  # the words now proposed (a draft's body), else ""
    original: str  # the first proposer's words, when someone reworded them
    changes: list[Change]
    claims: list[str]  # what the guard finds in `proposed`, in words
    reason: str  # why it waits, when the guard is not the reason
    proposer: str  # who proposed the words now proposed, in words
    deciders: list[str] = field(default_factory=list)
    sent_since: list[Message] = field(default_factory=list)
    later: int = 0  # how many went out since (the list's count)
    yours: bool = False  # the viewer proposed these words: another decides
    may_decide: bool = False
    editable: bool = False

    @property
    def pending(self) -> bool:
        return self.approval.status == ApprovalRequest.Status.PENDING

    @property
    def edited(self) -> bool:
        return bool(self.original)

    @property
    def anchor(self) -> str:
        return f"decide-{self.approval.public_id}"

    @property
    def seen(self) -> str:
        """What went out since, as the approver was shown it (the decision forms send it back)."""
        return ",".join(m.public_id for m in self.sent_since)

    @property
    def why(self) -> str:
        """Why it waits for a person, in a sentence."""
        if self.claims:
            return f"It promises {joined(self.claims, 'and')}: only a manager or owner may promise that."
        if self.reason:
            return self.reason
        return "A manager or owner approves it before it goes."

    @property
    def who(self) -> str:
        """Who decides it, in a sentence."""
        if not self.deciders:
            return "No manager or owner other than its proposer can decide it: add one to the team."
        return f"{joined(self.deciders, 'or')} decides — a manager or owner, never whoever proposed it."


def joined(parts: list[str], word: str) -> str:
    """ "a, b and c"; "a or b"."""
    if len(parts) < 2:
        return "".join(parts)
    return f"{', '.join(parts[:-1])} {word} {parts[-1]}"


def words_changed(before: str, after: str) -> list[Change]:
    """The edit from `before` to `after`, word by word (a text message is
    one line: a line diff would say only that everything changed). A lone
    short word both sides happen to share between two changes ("the") is
    shown as changed, so a rewording reads as one change, not confetti."""
    old, new = before.split(), after.split()
    runs: list[tuple[str, list[str], list[str]]] = [
        (str(op), old[i1:i2], new[j1:j2])
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes()
    ]
    merged: list[tuple[str, list[str], list[str]]] = []
    for n, (kind, gone, came) in enumerate(runs):
        lone = kind == "equal" and len(gone) == 1 and len(gone[0]) <= 3 and 0 < n < len(runs) - 1
        if lone or (kind != "equal" and merged and merged[-1][0] != "equal"):
            if merged and merged[-1][0] != "equal":
                _, was_gone, was_came = merged.pop()
                gone, came = was_gone + gone, was_came + came
            merged.append(("replace", gone, came))
        else:
            merged.append((kind, gone, came))
    changes: list[Change] = []
    for kind, gone, came in merged:
        if kind == "equal":
            changes.append(Change("same", " ".join(gone)))
            continue
        if gone:
            changes.append(Change("removed", " ".join(gone)))
        if came:
            changes.append(Change("added", " ".join(came)))
    return changes


def claims_words(text: str) -> list[str]:
    """What the claims guard finds in `text`: "a price “$199”"…"""
    return [f"{CLAIMS.get(f.kind, f.kind.replace('_', ' '))} “{f.excerpt}”" for f in claims_scan(text)]


def who_words(proposed_by: str) -> str:
    """A proposer as a person says it: a username, or "the sms assistant"."""
    if proposed_by.startswith("agent:"):
        return "the " + proposed_by.removeprefix("agent:").replace("_", " ")
    return proposed_by.rsplit(":", 1)[-1] or "someone"


def held_build(
    approval: ApprovalRequest,
    *,
    user: Any,
    deciders: list[TeamMember] | None = None,
    messages: list[Message] | None = None,
    may_decide: bool = False,
) -> Held:
    """`approval` as the workspace shows it to `user`; `messages`: the lead's
    conversation, already read (what went out since comes from it)."""
    body = approval.payload.get("body")
    editable = "body" in approval_editable_fields(approval.kind) and isinstance(body, str)
    proposed = str(body) if editable else ""
    first = approval.original_payload or {}
    original = str(first.get("body") or "") if editable else ""
    if original.strip() == proposed.strip():
        original = ""
    message = approval.message
    draft_reason = message.draft_reason if message is not None and message.direction == "out" else ""
    claims = claims_words(proposed) if proposed else []
    reason = draft_reason if editable else approval.summary
    deciding = [d for d in deciders or [] if not approval_is_proposer(approval, d.user)]
    pending = approval.status == ApprovalRequest.Status.PENDING
    sent_since = approval_sent_since(approval, messages) if pending and messages is not None else []
    return Held(
        approval=approval,
        kind=KINDS.get(approval.kind, approval.kind.replace("_", " ")),
        proposed=proposed,
        original=original,
        changes=words_changed(original, proposed) if original else [],
        claims=claims,
        reason=reason,
        proposer=who_words(approval.proposed_by),
        deciders=[d.display_name or d.user.get_username() for d in deciding],
        sent_since=sent_since,
        later=len(sent_since) if messages is not None else int(getattr(approval, "sent_since", 0) or 0),
        yours=approval_is_proposer(approval, user),
        may_decide=may_decide,
        editable=editable,
    )


@dataclass(frozen=True)
class ThreadApprovals:
    """The thread's approvals: each held message's, by message id, and the
    pending ones the viewer may decide (the decision panels)."""

    by_message: dict[int, Held]
    to_decide: list[Held]


def thread_approvals(user: Any, lead: Lead, messages: list[Message]) -> ThreadApprovals:
    """Every approval request on `lead` (two queries: the requests, and the
    people who decide them), the newest per held message."""
    requests = list(
        ApprovalRequest.objects.filter(lead=lead)
        .select_related("decided_by", "proposed_by_user", "first_proposed_by_user")
        .order_by("created_at", "pk")
    )
    if not requests:
        return ThreadApprovals({}, [])
    deciders = approval_deciders(lead.business_id)
    may_decide = can(user, "approval.decide", lead.business_id)
    in_thread = {m.pk: m for m in messages}
    by_message: dict[int, Held] = {}
    to_decide: list[Held] = []
    for approval in requests:
        if approval.message_id is not None and approval.message_id in in_thread:
            approval.message = in_thread[approval.message_id]
        elif approval.message_id is not None:
            continue  # a record the thread does not show (another lead's, after a merge)
        held = held_build(approval, user=user, deciders=deciders, messages=messages, may_decide=may_decide)
        if approval.message_id is not None:
            by_message[approval.message_id] = held
        if held.pending and may_decide:
            to_decide.append(held)
    return ThreadApprovals(by_message, to_decide)


def held_one(user: Any, approval: ApprovalRequest) -> Held:
    """One request's decision panel again, read afresh (after a decision)."""
    approval = ApprovalRequest.objects.select_related(
        "lead", "message", "decided_by", "proposed_by_user", "first_proposed_by_user"
    ).get(pk=approval.pk)
    messages = list(Message.objects.filter(lead_id=approval.lead_id)) if approval.lead_id else []
    return held_build(
        approval,
        user=user,
        deciders=approval_deciders(approval.business_id),
        messages=messages,
        may_decide=can(user, "approval.decide", approval.business_id),
    )


def approval_for_decider(user: Any, public_id: str) -> ApprovalRequest | None:
    """The request, if it is of a business where `user` decides requests."""
    return (
        approvals_decidable(user)
        .select_related("business", "lead__contact", "message", "decided_by")
        .filter(public_id=public_id)
        .first()
    )


def approvals_list(user: Any) -> list[Held]:
    """The pending requests `user` decides, the longest waiting first, as the
    approvals page lists them (a fixed number of queries)."""
    return [held_build(approval, user=user, may_decide=True) for approval in approvals_pending(user)[:200]]
