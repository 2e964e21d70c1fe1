"""The Human Gatekeeper's write path: open a request, edit, decide, expire it.

A decision is one transaction: take the locks the kind's handler needs
before the request row (its `lock` hook: a contact merge's), lock the
request row, refuse unless the user may decide it (`approval.decide` in its
business, `crm.permissions`) and did not propose it, compare-and-set from
pending, write the receipt, then call the handler the proposing app
registered for the kind (`approvals.handlers`), so the waiting step resumes
or is cancelled together with the decision or not at all. The database
refuses a self-approval too (approvals migration 0001).

A request pins the records it concerns when it is opened (read from the
proposer's payload, within its business); a decision may change only the
payload fields its kind allows (`approvals.kinds`), never a pin. An edit is
a new proposal: the request stays pending with the editor as its proposer,
so the editor can no longer approve it and another person decides.

A proposal of words to send (a kind whose `body` a decision may edit) that
is rejected, approved with edits, or left to expire is told to the person
who first proposed it (else its lead's owner) in the same transaction: a
decision note in the lead's conversation, unread for them until they read
it (`crm.services.conversations.decision_note_add`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from approvals.handlers import approval_handlers_for
from approvals.kinds import PINNED_KEYS, approval_edit_serializer, approval_editable_fields
from approvals.models import ApprovalRequest
from approvals.selectors import approval_sent_since
from crm.localtime import when
from crm.models import Business, ContactPoint, ContactPointKind, Estimate, Lead, Message
from crm.permissions import can
from crm.services.conversations import decision_note_add
from crm.services.receipts import receipt_write

log = logging.getLogger(__name__)

PENDING = ApprovalRequest.Status.PENDING
# Who expires a request: the clock, acting as the gatekeeper role.
EXPIRY_ACTOR = "agent:human_gatekeeper"
_FK_FIELDS = [
    "business",
    "lead",
    "message",
    "estimate",
    "contact_point",
    "proposed_by_user",
    "first_proposed_by_user",
    "decided_by",
]
# How much of a proposed text a decision note quotes to say which one it was.
QUOTE_LENGTH = 80
_ABSENT = object()


class ApprovalError(Exception):
    """A decision refused: the request is left as it was and no receipt written."""


class ApprovalForbidden(ApprovalError):
    """This user may not decide this request."""


class SelfApproval(ApprovalForbidden):
    """The user proposed the request, or edited it (nobody approves their own proposal)."""


class ApprovalInvalid(ApprovalError):
    """The payload is not one this request may be decided with (a 400).

    `detail` holds per-field messages when there are some."""

    def __init__(self, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.detail = detail if detail is not None else message


class ApprovalConflict(ApprovalError):
    """The request, or a record it concerns, is no longer in the state the decision needs (a 409)."""


class ApprovalNotPending(ApprovalConflict):
    """The request was already decided or has expired (a double click, or someone else was first)."""


class SentSinceUnseen(ApprovalConflict):
    """Messages went out to the person after the held one that the approver was not shown."""


def _pins(business: Business, lead: Lead | None, payload: dict[str, Any]) -> dict[str, Any]:
    """The records the payload names, each looked up within `business` (and
    `lead`, when there is one); a record found nowhere there is refused."""
    if lead is not None and lead.business_id != business.pk:
        raise ApprovalInvalid(f"{lead.public_id} is not a lead of {business.slug}")
    named: list[tuple[str, str, QuerySet[Any], Q | None]] = []
    if payload.get("message"):
        messages = Message.objects.filter(public_id=str(payload["message"]))
        named.append(("message", "message", messages, None if lead is None else Q(lead__isnull=True) | Q(lead=lead)))
    if payload.get("estimate"):
        estimates = Estimate.objects.filter(public_id=str(payload["estimate"]))
        named.append(("estimate", "estimate", estimates, None if lead is None else Q(lead=lead)))
    if payload.get("point"):
        # Not only valid numbers: a sender kept as typed can still ask to stop
        # (and so can an Instagram handle, by DM).
        points = ContactPoint.objects.filter(
            kind__in=(ContactPointKind.PHONE, ContactPointKind.INSTAGRAM), value=str(payload["point"])
        )
        of_contact = None if lead is None else Q(contact_id=lead.contact_id)
        named.append(("contact_point", "phone number or Instagram handle", points, of_contact))
    pins: dict[str, Any] = {}
    for field, noun, candidates, of_lead in named:
        value = payload["point" if field == "contact_point" else field]
        in_business = candidates.filter(business=business)
        if of_lead is None and in_business.count() > 1:
            raise ApprovalInvalid(f"{value} names more than one {noun} of {business.slug}: say which lead")
        record = (in_business.filter(of_lead) if of_lead is not None else in_business).order_by("pk").first()
        if record is None and in_business.exists():
            raise ApprovalInvalid(f"{value} is not a {noun} of {lead.public_id if lead else 'the lead'}")
        if record is None:
            raise ApprovalInvalid(f"{value} is not a {noun} of {business.slug}")
        pins[field] = record
    return pins


@transaction.atomic
def approval_request_open(
    *,
    business: Business,
    kind: str,
    summary: str,
    proposed_by: str,
    lead: Lead | None = None,
    payload: dict[str, Any] | None = None,
    proposed_by_user: Any = None,
    expires_at: datetime | None = None,
) -> ApprovalRequest:
    """A pending request in the queue, with a receipt naming who proposed it.

    `proposed_by` names the proposer: an automated role (`agent:<role>`) or,
    for a person's proposal, their username, with the user as
    `proposed_by_user` so that the database, too, refuses their decision.
    The records the payload names (`message`, `estimate`, `point`) are pinned
    on the request; one that is not of `business` (or of `lead`) is refused
    with ApprovalInvalid, and nothing is written.
    """
    payload = payload or {}
    request = ApprovalRequest(
        business=business,
        lead=lead,
        kind=kind,
        summary=summary[:300],
        payload=payload,
        proposed_by=proposed_by,
        proposed_by_user=proposed_by_user,
        first_proposed_by_user=proposed_by_user,
        expires_at=expires_at,
        **_pins(business, lead, payload),
    )
    request.full_clean(exclude=_FK_FIELDS, validate_unique=False, validate_constraints=False)
    request.save(force_insert=True)
    receipt_write(
        business=business,
        lead=lead,
        subject=request.public_id,
        actor=proposed_by,
        action="approval.requested",
        reason=summary,
        after={"kind": kind, "payload": payload},
    )
    return request


@transaction.atomic
def approval_request_extend(
    request: ApprovalRequest, *, payload: dict[str, Any], summary: str, actor: str, reason: str
) -> ApprovalRequest:
    """The proposing role adds to its own pending proposal what it found
    since (a merge request gains a contact a later capture tied in, and that
    capture as evidence), instead of proposing the same thing twice.

    Locks the request row (crm.locks level 4: after any lead the caller
    holds), refuses unless `actor` is its proposer (ApprovalForbidden: never
    a person's proposal, never someone else's) and it is still pending
    (ApprovalNotPending), then sets the payload and summary with an
    `approval.extended` receipt holding both payloads. The proposer stays
    the proposer, so the rule that nobody decides their own proposal is
    unchanged. Pins are untouched (the trigger refuses a change of them).
    """
    current = _locked(request)
    if current.proposed_by != actor or current.proposed_by_user_id is not None:
        raise ApprovalForbidden(f"{actor} did not propose {current.public_id} and may not extend it")
    _refuse_unless_pending(current, timezone.now())
    before = current.payload
    _set_from_pending(current, {"payload": payload, "summary": summary[:300]})
    receipt_write(
        business=current.business,
        lead=current.lead,
        subject=current.public_id,
        actor=actor,
        action="approval.extended",
        reason=reason,
        before={"payload": before},
        after={"payload": payload},
    )
    request.refresh_from_db()
    return current


def approval_may_decide(request: ApprovalRequest, user: Any) -> bool:
    """Who holds `approval.decide` in the request's business (its managers and owners, operators)."""
    return can(user, "approval.decide", request.business_id)


def approval_is_proposer(request: ApprovalRequest, user: Any) -> bool:
    """Did `user` propose `request` (or edit it last), as the recorded user or by name?

    A proposal recorded only by name (`sam`, or a role acting for a person,
    `copilot:sam`) counts as the named user's own.
    """
    if request.proposed_by_user_id is not None and request.proposed_by_user_id == user.pk:
        return True
    username = user.get_username().casefold()
    named = request.proposed_by.strip().casefold()
    return named == username or named.rsplit(":", 1)[-1] == username


def _refuse_unless_may_decide(request: ApprovalRequest, user: Any) -> None:
    if not approval_may_decide(request, user):
        raise ApprovalForbidden(
            f"{user.get_username()} may not decide {request.public_id}: only the business's managers and owners may"
        )


def _refuse_the_proposer(request: ApprovalRequest, user: Any) -> None:
    if approval_is_proposer(request, user):
        raise SelfApproval(f"{user.get_username()} proposed {request.public_id} and may not decide it")


def _refuse_unless_pending(request: ApprovalRequest, now: datetime) -> None:
    if request.status != PENDING:
        decided_by = request.decided_by.get_username() if request.decided_by else None
        who = f" by {decided_by}" if decided_by else ""
        raise ApprovalNotPending(f"{request.public_id} is already {request.status}{who}")
    if request.expires_at is not None and request.expires_at <= now:
        raise ApprovalNotPending(f"{request.public_id} expired at {when(request.expires_at)}")


def _refuse_unseen(request: ApprovalRequest, seen: set[str]) -> None:
    unseen = [m for m in approval_sent_since(request) if m.public_id not in seen]
    if unseen:
        said = "; ".join(f"“{_shortened(m.body)}”" for m in unseen)
        many = f"{len(unseen)} messages" if len(unseen) > 1 else "a message"
        raise SentSinceUnseen(
            f"since you opened it, {many} went out to the person after this reply was held: {said}. "
            "Read the conversation again, then decide."
        )


def _lock_first(request: ApprovalRequest) -> None:
    """The kind's `lock` hook: locks that come before the request row in crm.locks' order."""
    handlers = approval_handlers_for(request.kind)
    if handlers is not None and handlers.lock is not None:
        handlers.lock(request, request.payload)


def _locked(request: ApprovalRequest) -> ApprovalRequest:
    # `of=("self",)`: PostgreSQL cannot lock the nullable side of the lead join.
    return (
        ApprovalRequest.objects.select_for_update(of=("self",))
        .select_related("business", "lead", "decided_by")
        .get(pk=request.pk)
    )


def _set_from_pending(request: ApprovalRequest, changes: dict[str, Any]) -> None:
    """Write `changes` only if the row is still pending (compare-and-set)."""
    for field, value in changes.items():
        setattr(request, field, value)
    request.full_clean(exclude=_FK_FIELDS, validate_unique=False, validate_constraints=False)
    updated = ApprovalRequest.objects.filter(pk=request.pk, status=PENDING).update(**changes)
    if updated != 1:
        # Unreachable while the row lock is held; kept so that a caller that
        # forgets the lock still cannot decide a request twice.
        raise ApprovalNotPending(f"{request.public_id} is no longer pending")


def approval_payload_edited(request: ApprovalRequest, edits: Any) -> dict[str, Any] | None:
    """The payload with `edits` applied, validated by the kind's serializer;
    None when nothing changes. Raises ApprovalInvalid for a key the kind does
    not let a decision change (a pinned record above all)."""
    if not isinstance(edits, dict):
        raise ApprovalInvalid("an edited payload must be a JSON object", {"payload": ["must be a JSON object"]})
    serializer_class = approval_edit_serializer(request.kind)
    editable = frozenset(serializer_class().fields)
    refused: dict[str, list[str]] = {}
    for key, value in edits.items():
        if key in editable or request.payload.get(key, _ABSENT) == value:
            continue  # an editable field, or a fixed one sent back unchanged
        if key in PINNED_KEYS:
            pinned = request.payload.get(key)
            refused[key] = [
                f"pinned to {pinned!r} when {request.public_id} was proposed: a decision cannot point it elsewhere"
                if pinned
                else f"{request.public_id} concerns no {key}: a decision cannot add one"
            ]
        elif editable:
            refused[key] = [f"not editable on a {request.kind} request (editable: {', '.join(sorted(editable))})"]
        else:
            refused[key] = [f"{request.kind} requests have no editable payload field: say why in `note`"]
    if refused:
        raise ApprovalInvalid(_flat(refused), {"payload": refused})
    fields = serializer_class(data={key: value for key, value in edits.items() if key in editable}, partial=True)
    if not fields.is_valid():
        errors = {key: [str(e) for e in value] for key, value in fields.errors.items()}
        raise ApprovalInvalid(_flat(errors), {"payload": errors})
    edited = {**request.payload, **fields.validated_data}
    return None if edited == request.payload else edited


def _flat(errors: dict[str, list[str]]) -> str:
    return "; ".join(f"payload.{key}: {' '.join(messages)}" for key, messages in errors.items())


def _edit(current: ApprovalRequest, edited: dict[str, Any], *, user: Any, note: str) -> ApprovalRequest:
    """Save `edited` as `user`'s proposal; the request stays pending for another person."""
    handlers = approval_handlers_for(current.kind)
    if handlers is not None and handlers.check is not None:
        handlers.check(current, edited)
    findings = handlers.recheck(current, edited) if handlers is not None and handlers.recheck is not None else []
    editor = user.get_username()
    before = {"proposed_by": current.proposed_by, "payload": current.payload}
    checked = f"; {'; '.join(findings)}" if findings else ""
    changes: dict[str, Any] = {
        "payload": edited,
        "proposed_by": editor,
        "proposed_by_user": user,
        # The queue shows the words now proposed, not the ones replaced.
        "summary": f"Edited by {editor}{checked} — {str(edited.get('body') or '') or current.summary}"[:300],
    }
    if current.original_payload is None:
        changes["original_payload"] = current.payload
    _set_from_pending(current, changes)
    receipt_write(
        business=current.business,
        lead=current.lead,
        subject=current.public_id,
        actor=editor,
        action="approval.edited",
        reason=note or "edited: a new proposal for another person to decide",
        before=before,
        after={"proposed_by": editor, "payload": edited, "findings": findings},
    )
    return current


def _decide(request: ApprovalRequest, *, user: Any, status: str, note: str) -> ApprovalRequest:
    current = request
    now = timezone.now()
    changes: dict[str, Any] = {"status": status, "decided_by": user, "decided_at": now, "decision_note": note}
    handlers = approval_handlers_for(current.kind)
    approving = status == ApprovalRequest.Status.APPROVED
    if approving and handlers is not None and handlers.check is not None:
        handlers.check(current, current.payload)
    _set_from_pending(current, changes)
    receipt_write(
        business=current.business,
        lead=current.lead,
        subject=current.public_id,
        actor=user.get_username(),
        action=f"approval.{status}",
        reason=note,
        before={"status": PENDING},
        after={"status": status},
    )
    if handlers is not None:
        handler = handlers.on_approved if approving else handlers.on_rejected
        if handler is not None:
            handler(current, current.payload)
    _decision_tell(current)
    return current


def _decision_tell(current: ApprovalRequest) -> None:
    """Tell the person whose words were decided what became of them: a
    rejection (with its note), an approval with edits, an expiry. A plain
    approval says nothing more than the message going out does. Only for a
    proposal of words to send on a lead; the note is written even when
    nobody is left to tell (the decider is its only proposer), so the
    conversation keeps it."""
    lead = current.lead
    body = str(current.payload.get("body") or "")
    if lead is None or "body" not in approval_editable_fields(current.kind):
        return
    first = current.original_payload or current.payload
    first_body = str(first.get("body") or body)
    edited = current.original_payload is not None and first_body.strip() != body.strip()
    status = current.status
    if status == ApprovalRequest.Status.APPROVED and not edited:
        return
    whose = _whose(current)
    quoted = f"“{_shortened(first_body)}”"
    decider = current.decided_by.get_username() if current.decided_by else ""
    note = f" Their note: {_said(current.decision_note)}" if current.decision_note.strip() else ""
    if status == ApprovalRequest.Status.REJECTED:
        reworded = f" (as reworded by {current.proposed_by})" if edited else ""
        words = f"{whose} {quoted}{reworded} was rejected by {decider} and not sent.{note or ' No note.'}"
    elif status == ApprovalRequest.Status.APPROVED:
        words = (
            f"{whose} {quoted} was approved with edits by {decider} (reworded by {current.proposed_by}). "
            f"What goes out instead: {_said(body)}{note}"
        )
    else:
        words = f"{whose} {quoted} was not sent: nobody decided on it in time, and the approval expired."
    addressee = current.first_proposed_by_user
    if addressee is None and lead.owner is not None:
        addressee = lead.owner.user
    if addressee is not None and addressee.pk == current.decided_by_id:
        addressee = None  # the decider knows
    decision_note_add(lead, author=decider or EXPIRY_ACTOR, body=words, addressee=addressee)


def _whose(current: ApprovalRequest) -> str:
    """Whose words were first proposed, as the conversation says it."""
    first = current.first_proposed_by_user
    if first is not None:
        return f"{first.get_username()}'s reply"
    if current.original_payload is None and current.proposed_by.startswith("agent:"):
        return f"The reply drafted by the {current.proposed_by.removeprefix('agent:').replace('_', ' ')}"
    return "The held reply"


def _said(text: str) -> str:
    """Someone's words quoted as a sentence: “Call her.”, “Call her first.” (never “….”.)."""
    text = text.strip()
    return f"“{text}”" if text.endswith((".", "!", "?", "…")) else f"“{text}.”"


def _shortened(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE_LENGTH else text[: QUOTE_LENGTH - 1].rstrip() + "…"


@transaction.atomic
def approval_approve(
    request: ApprovalRequest,
    *,
    user: Any,
    note: str = "",
    edited_payload: dict[str, Any] | None = None,
    seen: Collection[str] | None = None,
) -> ApprovalRequest:
    """Approve a pending request as `user`; with an edited payload, propose the edit instead.

    Owns one transaction: the row lock (a second decider waits here, then
    reads the decided status and is refused), the checks, the compare-and-set
    from pending, the receipt (`approval.approved`) and the kind's
    `on_approved` handler, called with the approved payload.

    An `edited_payload` that changes what the kind allows is not approved:
    `user` wrote it, so it becomes their proposal (`approval_edit`) and the
    request, returned still pending, waits for another person. Raises
    ApprovalForbidden (no `approval.decide` in the business), SelfApproval
    (the user proposed or last edited it), ApprovalInvalid (a payload key
    the kind does not allow, or a pinned record swapped), ApprovalConflict
    (decided already, expired, or the record it concerns moved on — the
    kind's `check`); then nothing is written.

    `seen`: the public ids of the messages that went out to the person after
    the held one which the approver was shown (an automatic booking
    confirmation may already have said what the held reply says otherwise);
    one they were not shown refuses the decision (SentSinceUnseen), so
    nobody approves words over a message they never saw. None: not asked.
    """
    _lock_first(request)
    current = _locked(request)
    _refuse_unless_may_decide(current, user)
    _refuse_unless_pending(current, timezone.now())
    if seen is not None:
        _refuse_unseen(current, set(seen))
    edited = approval_payload_edited(current, edited_payload) if edited_payload is not None else None
    if edited is not None:
        decided = _edit(current, edited, user=user, note=note)
    else:
        _refuse_the_proposer(current, user)
        decided = _decide(current, user=user, status=ApprovalRequest.Status.APPROVED, note=note)
    request.refresh_from_db()
    return decided


@transaction.atomic
def approval_edit(request: ApprovalRequest, *, user: Any, payload: dict[str, Any], note: str = "") -> ApprovalRequest:
    """Propose an edited payload for a pending request, as `user`.

    Only the fields the kind allows (`approvals.kinds`) may change; the kind's
    `check` and `recheck` run first (a draft that left the queue is a
    conflict; the claims guard reads the new text). The request stays pending
    with `user` as its proposer (`proposed_by`, `proposed_by_user`), so the
    service and the database refuse their approval; the first proposer's
    payload is kept in `original_payload`; an `approval.edited` receipt
    records both. A proposer may revise their own proposal. Refuses as
    `approval_approve`, and an edit that changes nothing (ApprovalInvalid).
    """
    current = _locked(request)
    _refuse_unless_may_decide(current, user)
    _refuse_unless_pending(current, timezone.now())
    edited = approval_payload_edited(current, payload)
    if edited is None:
        raise ApprovalInvalid("the edit changes nothing: approve the request as proposed instead")
    decided = _edit(current, edited, user=user, note=note)
    request.refresh_from_db()
    return decided


@transaction.atomic
def approval_reject(request: ApprovalRequest, *, user: Any, note: str = "") -> ApprovalRequest:
    """Reject a pending request as `user`; the kind's `on_rejected` handler
    cancels the waiting step in the same transaction. Refuses as
    `approval_approve`; a request whose record moved on may still be
    rejected (that clears it from the queue)."""
    _lock_first(request)
    current = _locked(request)
    _refuse_unless_may_decide(current, user)
    _refuse_the_proposer(current, user)
    _refuse_unless_pending(current, timezone.now())
    decided = _decide(current, user=user, status=ApprovalRequest.Status.REJECTED, note=note)
    request.refresh_from_db()
    return decided


def approvals_expire(now: datetime | None = None, *, limit: int = 500) -> int:
    """Expire pending requests whose `expires_at` has passed, at most `limit`
    of them (the oldest; the periodic job's next run takes the rest); returns
    how many.

    Each request is its own transaction (lock, compare-and-set, receipt,
    the kind's `on_expired` handler, never `on_rejected`: nobody decided).
    A request a person is deciding right now is
    skipped (SKIP LOCKED) rather than waited for: the decision wins. A
    handler that fails leaves its request pending for the next run and does
    not stop the others.
    """
    now = now or timezone.now()
    due = ApprovalRequest.objects.filter(status=PENDING, expires_at__lte=now).order_by("expires_at", "pk")
    expired = 0
    for pk in due.values_list("pk", flat=True)[:limit]:
        try:
            expired += _expire_one(pk, now)
        except Exception:
            log.exception("approval %s: expiry failed; it stays pending", pk)
    return expired


@transaction.atomic
def _expire_one(pk: int, now: datetime) -> int:
    current = (
        ApprovalRequest.objects.select_for_update(of=("self",), skip_locked=True)
        .select_related("business", "lead")
        .filter(pk=pk, status=PENDING, expires_at__lte=now)
        .first()
    )
    if current is None:
        return 0  # decided meanwhile, or being decided right now
    deadline = current.expires_at
    _set_from_pending(current, {"status": ApprovalRequest.Status.EXPIRED, "decided_at": now})
    receipt_write(
        business=current.business,
        lead=current.lead,
        subject=current.public_id,
        actor=EXPIRY_ACTOR,
        action="approval.expired",
        reason=f"no decision by {deadline.isoformat() if deadline else 'the deadline'}",
        before={"status": PENDING},
        after={"status": ApprovalRequest.Status.EXPIRED},
    )
    handlers = approval_handlers_for(current.kind)
    if handlers and handlers.on_expired:
        handlers.on_expired(current, current.payload)
    _decision_tell(current)
    return 1
