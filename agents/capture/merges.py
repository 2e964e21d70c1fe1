"""Two records of one person: the `merge_contacts` request the identity
resolver proposes, and what a person's decision on it does.

- Proposing (`merge_propose`, called by the identity resolver under the
  capture's locks): a capture whose phone, email or handle belong to
  different contacts asks a person whether they are one, naming the
  contact the capture joined as `keep` and the others as `merge`, and the
  capture as `evidence`. Contacts a person already kept apart from the one
  the capture joined are left out (nothing is asked about them again). When
  a pending request already names one of the contacts, the capture extends
  that request (`approval_request_extend`: the new contacts and the capture
  join its payload, with a receipt) instead of opening a second one.
- Approved: every contact named in `merge` is merged into the `keep`
  contact (`crm.services.merge.contacts_merge`, following earlier merges to
  where each contact went), one transaction with the decision.
- Rejected: each pair (keep, other) is kept apart
  (`crm.services.merge.contacts_keep_apart`), durably.
- Either way the leads of those people lose their `merge_conflict` flag,
  unless another pending merge request still names them.

The request's contacts come from its payload: no decision may edit a
merge_contacts payload (`approvals.kinds`), only the proposing role extends
it, every id is looked up within the request's business, and the pinned
lead's person must be one of them. Decisions take the merge's locks before
the request row (the `lock` hook), as crm.locks orders them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Q, QuerySet

from approvals.handlers import approval_handler_register
from approvals.models import ApprovalRequest
from approvals.services import ApprovalConflict, approval_request_extend, approval_request_open
from crm.models import Business, Contact, InboundEvent, Lead, LeadException
from crm.selectors import contacts_kept_apart
from crm.services import lead_sync
from crm.services.merge import MergeError, contact_root, contacts_keep_apart, contacts_merge, merge_locks

KIND = ApprovalRequest.Kind.MERGE_CONTACTS
PENDING = ApprovalRequest.Status.PENDING
ACTOR = "agent:identity_resolver"


def _named(payload: dict[str, Any]) -> list[str]:
    """The contacts a request names, `keep` first."""
    merge = payload.get("merge") or []
    named = [payload.get("keep"), *(merge if isinstance(merge, list) else [merge])]
    return list(dict.fromkeys(str(pid) for pid in named if pid))


def _summary(keep: str, merge: list[str]) -> str:
    return f"Same person? {keep} and {', '.join(merge)}"


def merge_requests_pending(business: Business, contacts: Iterable[Contact]) -> QuerySet[ApprovalRequest]:
    """Pending merge requests that name one of `contacts` (or a contact
    merged into one of them since it was proposed), oldest first."""
    contacts = list(contacts)
    ids = {c.public_id for c in contacts}
    ids.update(Contact.objects.filter(merged_into__in=contacts).values_list("public_id", flat=True))
    naming = Q(pk__in=[])
    for public_id in sorted(ids):
        naming |= Q(payload__keep=public_id) | Q(payload__merge__contains=[public_id])
    return (
        ApprovalRequest.objects.filter(business=business, kind=KIND, status=PENDING)
        .filter(naming)
        .order_by("created_at", "pk")
    )


def merge_propose(
    lead: Lead, contact: Contact, others: list[Contact], *, event: InboundEvent | None
) -> ApprovalRequest | None:
    """Ask a person whether `contact` (the one the capture joined) and
    `others` are one person; None when there is nothing left to ask (every
    other was kept apart by a person). The caller holds the named identity
    locks of all of them, so no other capture or decision about them runs
    meanwhile."""
    apart = contacts_kept_apart(contact, others)
    others = [other for other in others if other.pk not in apart]
    if not others:
        return None
    found = [contact, *others]
    entry = {
        "lead": lead.public_id,
        "event": event.public_id if event is not None else None,
        "contacts": [c.public_id for c in found],
    }
    # Only the resolver's own proposals are extended (a person's stays as they wrote it), and
    # never with a contact kept apart from one the request names.
    own = merge_requests_pending(lead.business, found).filter(proposed_by=ACTOR, proposed_by_user__isnull=True)
    pending = next((request for request in own if not _kept_apart_from_named(request, found)), None)
    if pending is not None:
        named = _named(pending.payload)
        new = [c.public_id for c in found if c.public_id not in named]
        evidence = list(pending.payload.get("evidence") or [])
        if event is not None and entry in evidence and not new:
            return pending  # the same delivery again (a replay): on record already
        merge = [*(pending.payload.get("merge") or []), *new]
        payload = {**pending.payload, "merge": merge, "evidence": [*evidence, entry]}
        seen = f"{lead.public_id} tied {', '.join(entry['contacts'])} together again"
        return approval_request_extend(
            pending,
            payload=payload,
            summary=_summary(str(pending.payload.get("keep")), merge),
            actor=ACTOR,
            reason=f"{seen}: added {', '.join(new)}" if new else seen,
        )
    merge = [c.public_id for c in others]
    return approval_request_open(
        business=lead.business,
        lead=lead,
        kind=KIND,
        summary=_summary(contact.public_id, merge),
        proposed_by=ACTOR,
        payload={"keep": contact.public_id, "merge": merge, "evidence": [entry]},
    )


def _kept_apart_from_named(request: ApprovalRequest, found: list[Contact]) -> bool:
    """Would extending `request` with `found` ask again about a pair a person kept apart?"""
    named = list(Contact.objects.filter(business_id=request.business_id, public_id__in=_named(request.payload)))
    return any(contacts_kept_apart(contact, named) for contact in found if contact not in named)


# --- the decision ---------------------------------------------------------------------------


def _contacts(request: ApprovalRequest, payload: dict[str, Any]) -> dict[str, Contact]:
    """The contacts the payload names, by public id, within the request's business."""
    found = Contact.objects.select_related("business").filter(
        business_id=request.business_id, public_id__in=_named(payload)
    )
    return {contact.public_id: contact for contact in found}


def merge_lock(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    """Before the request row: the merge's locks on every contact the request
    names and on where each went (crm.locks levels 1-3). A capture that
    extended the request, or another merge that moved one of its contacts,
    while this waited is a conflict: the person decides again, on what the
    request says now."""
    fresh = ApprovalRequest.objects.filter(pk=request.pk).values_list("status", "payload").first()
    if fresh is None or fresh[0] != PENDING:
        return  # the decision refuses it under the row lock
    named = _named(fresh[1])
    locked = _people(request, fresh[1])
    merge_locks(request.business_id, locked)
    # Read again under the locks: a capture may have extended the request, or
    # another merge moved one of its contacts elsewhere, while this waited.
    now = ApprovalRequest.objects.filter(pk=request.pk).values_list("payload", flat=True).get()
    if _named(now) != named or not _people(request, now) <= locked:
        raise ApprovalConflict(f"{request.public_id} changed while it was being decided: look at it again, then decide")


def _people(request: ApprovalRequest, payload: dict[str, Any]) -> set[int]:
    """The pks of the contacts the payload names and of where each went."""
    contacts = _contacts(request, payload).values()
    return {c.pk for c in contacts} | {contact_root(c).pk for c in contacts}


def merge_check(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    """Only a merge of contacts of the request's business, its lead's person among them, is approved."""
    contacts = _contacts(request, payload)
    named = _named(payload)
    missing = [public_id for public_id in named if public_id not in contacts]
    if missing or not payload.get("merge"):
        what = f"{', '.join(missing)} is not a contact of {request.business.slug}" if missing else "nobody to merge"
        raise ApprovalConflict(f"{what}: nothing in {request.public_id} can be approved; reject it to clear it")
    if request.lead is not None:
        roots = {contact_root(contact).pk for contact in contacts.values()}
        if contact_root(request.lead.contact).pk not in roots:
            raise ApprovalConflict(
                f"the person of {request.lead.public_id} is none of the contacts {request.public_id} names"
            )


def merge_approved(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    merge_check(request, payload)  # ran under this transaction's locks; kept for callers that skip it
    actor = _decider(request)
    contacts = _contacts(request, payload)
    keep = contact_root(contacts[str(payload["keep"])])
    for public_id in _named(payload)[1:]:
        other = contact_root(contacts[public_id])
        if other.pk == keep.pk:
            continue  # one already (merged meanwhile)
        try:
            contacts_merge(keep, other, actor=actor, reason=f"{request.public_id} approved", lead=request.lead)
        except MergeError as exc:
            raise ApprovalConflict(str(exc)) from exc
    _flags_clear(request, [keep], actor=actor, why=f"merged ({request.public_id} approved)")


def merge_rejected(request: ApprovalRequest, payload: dict[str, Any]) -> None:
    actor = _decider(request)
    contacts = _contacts(request, payload)
    keep_id = str(payload.get("keep") or "")
    if keep_id not in contacts:
        return  # names nobody of this business: rejecting only clears it
    keep = contact_root(contacts[keep_id])
    people = [keep]
    for public_id in _named(payload)[1:]:
        if public_id not in contacts:
            continue
        other = contact_root(contacts[public_id])
        if other.pk != keep.pk:
            contacts_keep_apart(keep, other, actor=actor, approval=request.public_id)
            people.append(other)
    _flags_clear(request, people, actor=actor, why=f"kept apart ({request.public_id} rejected)")


def _flags_clear(request: ApprovalRequest, people: list[Contact], *, actor: str, why: str) -> None:
    """The people's leads lose `merge_conflict`, except a person another
    pending merge request still asks about."""
    asked = [person for person in people if not merge_requests_pending(request.business, [person]).exists()]
    flagged = Lead.objects.filter(contact__in=asked, exceptions__contains=[LeadException.MERGE_CONFLICT])
    for lead in flagged.order_by("pk"):
        lead_sync.lead_flag_exception(lead, LeadException.MERGE_CONFLICT, actor=actor, reason=why, present=False)


def _decider(request: ApprovalRequest) -> str:
    return request.decided_by.get_username() if request.decided_by else ACTOR


def register() -> None:
    approval_handler_register(
        KIND, on_approved=merge_approved, on_rejected=merge_rejected, check=merge_check, lock=merge_lock
    )
