"""Two contacts a person confirmed are one person: `contacts_merge`; and two
a person said are not: `contacts_keep_apart`.

What a merge moves, in one transaction, from the merged contact to the
surviving one:

- Its contact points, and with them their consent ledger and states (those
  hang off the point, not the contact).
- Its leads, each with everything attached, except where both people have
  an open lead of the same service line (no line counts as a line, as in the
  one-open-lead constraint): those two become one. The survivor is the lead
  further along the pipeline, the older on a tie (closing a booked lead
  into a new one would lose where the work stands); the other is closed
  through CRM Sync (`lead_close`, lost, "merged into <lead>", so its
  automated paths end with it), marked `merged_into`, and its touches,
  messages, calls, tasks, appointments, estimates, jobs, invoices and
  payments (with the pending timers that count down for those records) move
  to the survivor. Its receipts, enrollments, approval requests and
  exception items stay on it: they are its history.
- Every other row that names the merged contact (messages, calls,
  enrollments, payments), the contacts merged into it earlier (so
  `merged_into` is always one hop), and the pairs a person kept apart from it.

Then: one automated path per person (the `CONTACTS_MERGING` hooks: the
sequence engine keeps the better-priority path and stops the other, with its
receipt); the strictest consent per channel (a revocation on any of the
survivor's points for a channel is appended to its other points of that
channel through the ledger's one write path, naming the merge and pointing
at the revocation it copies; a merge never grants anything); the
survivor's empty fields filled from the merged contact, and a paused
automation stays paused; `merged_into` set. One `contact.merged` receipt
lists what moved, by kind: counts and public ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Model, Q, QuerySet
from django.utils import timezone

from crm.locks import contacts_lock
from crm.models import (
    CLOSED_STAGES,
    Appointment,
    Call,
    Channel,
    ConsentEvent,
    ConsentState,
    ConsentStatus,
    Contact,
    ContactPoint,
    ContactPointKind,
    Enrollment,
    Estimate,
    Invoice,
    Job,
    KeptApartPair,
    Lead,
    LeadTouch,
    Message,
    Note,
    Payment,
    Receipt,
    Stage,
    Task,
    Timer,
)
from crm.registry import Registry
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.receipts import receipt_write

ACTION = "contact.merged"
# The consent ledger's basis for a revocation a merge copies to another point.
MERGE_BASIS = "contact_merge"
# The channels consent is kept for, and the kind of point each reaches.
CHANNEL_KINDS = {
    Channel.SMS: ContactPointKind.PHONE,
    Channel.VOICE: ContactPointKind.PHONE,
    Channel.EMAIL: ContactPointKind.EMAIL,
    Channel.INSTAGRAM: ContactPointKind.INSTAGRAM,
}
# Filled on the survivor from the merged contact when the survivor has none.
FILLED_FIELDS = ("first_name", "last_name", "postal_code", "address", "notes", "sticky_from_number")
# What a duplicate lead hands to the lead it becomes one with, by receipt key.
LEAD_RECORDS: tuple[tuple[str, type[Model]], ...] = (
    ("lead_touches", LeadTouch),
    ("messages", Message),
    ("calls", Call),
    ("tasks", Task),
    ("appointments", Appointment),
    ("estimates", Estimate),
    ("jobs", Job),
    ("invoices", Invoice),
    ("payments", Payment),
    ("notes", Note),
)
# A pending timer names the record it counts down for in its payload (a
# reminder its appointment, a follow-up its estimate, a retry its message).
TIMER_RECORDS = {"appointment": "appointments", "estimate": "estimates", "message": "messages"}
# How far along the pipeline an open stage is: of two leads for one need,
# the one further along survives.
PROGRESS = {stage: rank for rank, stage in enumerate(Stage.values)}


class MergeError(Exception):
    """A merge refused: nothing written."""


# What other apps do in the merge's transaction before the merged contact's
# rows move, called as hook(keep, merge, actor) with both rows locked; each
# returns the public ids of what it stopped (for the receipt). The sequence
# engine registers one: two active paths would break one-path-per-person.
ContactsMergingHook = Callable[[Contact, Contact, str], list[str]]
CONTACTS_MERGING: Registry[ContactsMergingHook] = Registry("contacts-merging hook")


@dataclass
class MergeResult:
    keep: Contact
    merged: Contact
    # Per kind of record, the public ids that moved (to the survivor or to a surviving lead).
    moved: dict[str, list[str]]
    # Each lead that became one with another: {"closed": …, "into": …}.
    leads_merged: list[dict[str, str]]
    enrollments_stopped: list[str]
    consent_revoked: list[str]
    receipt: Receipt


@dataclass
class _Moves:
    ids: dict[str, list[str]] = field(default_factory=dict)
    pks: dict[str, set[int]] = field(default_factory=dict)

    def move(self, kind: str, rows: QuerySet[Any], **changes: Any) -> None:
        """Point `rows` elsewhere (one UPDATE) and note them under `kind`."""
        found = list(rows.order_by("pk").values_list("pk", "public_id"))
        if not found:
            return
        rows.model.objects.filter(pk__in=[pk for pk, _ in found]).update(**changes)
        self.note(kind, found)

    def note(self, kind: str, found: Iterable[tuple[int, str]]) -> None:
        ids, pks = self.ids.setdefault(kind, []), self.pks.setdefault(kind, set())
        for pk, public_id in found:
            if pk not in pks:
                pks.add(pk)
                ids.append(public_id)


def merge_locks(business_id: int, contact_ids: Iterable[int]) -> dict[int, Contact]:
    """Take what merging these contacts needs, in crm.locks' order: their
    named identity locks (sorted: a capture of either person waits, and then
    finds where its points went), every lead of theirs (FOR NO KEY UPDATE, by
    pk), then their rows (FOR UPDATE, by pk: a row inserted meanwhile that
    names one of them waits for the merge). Returns the contacts of
    `business_id`, read under the lock. Call it inside a transaction; taking
    it again in the same one waits for nothing."""
    ids = sorted(set(contact_ids))
    contacts_lock(business_id, ids)
    leads = Lead.objects.select_for_update(no_key=True).filter(contact_id__in=ids).order_by("pk")
    list(leads.values_list("pk", flat=True))
    contacts = (
        Contact.objects.select_for_update(of=("self",))
        .select_related("business")
        .filter(pk__in=ids, business_id=business_id)
        .order_by("pk")
    )
    return {contact.pk: contact for contact in contacts}


def contact_root(contact: Contact) -> Contact:
    """The contact this one was merged into, or itself (one hop: a merge
    re-points the contacts merged into the one it merges)."""
    seen = {contact.pk}
    while contact.merged_into_id is not None and contact.merged_into_id not in seen:
        seen.add(contact.merged_into_id)
        contact = Contact.objects.select_related("business").get(pk=contact.merged_into_id)
    return contact


@transaction.atomic
def contacts_merge(
    keep: Contact, merge: Contact, *, actor: str, reason: str = "", lead: Lead | None = None
) -> MergeResult | None:
    """Make `merge` part of `keep` (see the module docstring for what moves).

    Owns one transaction (or joins the caller's): the locks of `merge_locks`,
    the moves, the closing of duplicate leads through CRM Sync, the
    `CONTACTS_MERGING` hooks, the consent revocations and one `contact.merged`
    receipt (on `lead`, or the lead it became one with, when given), all or
    nothing. Returns None, writing nothing, when `merge` is already merged
    into `keep` (a second approval, a retry). Raises MergeError when the two
    are one contact, of two businesses, or either was merged elsewhere.
    """
    if keep.pk == merge.pk:
        raise MergeError(f"{keep.public_id} cannot be merged into itself")
    if keep.business_id != merge.business_id:
        raise MergeError(f"{keep.public_id} and {merge.public_id} belong to different businesses")
    locked = merge_locks(keep.business_id, [keep.pk, merge.pk])
    keep, merge = locked[keep.pk], locked[merge.pk]
    if merge.merged_into_id == keep.pk:
        return None
    for contact in (keep, merge):
        if contact.merged_into_id is not None:
            raise MergeError(f"{contact.public_id} was merged into another contact already: merge where it went")
    moves = _Moves()
    leads_merged = [_leads_fold(survivor, duplicate, actor, moves) for survivor, duplicate in _same_needs(keep, merge)]
    stopped = [public_id for hook in CONTACTS_MERGING.values() for public_id in hook(keep, merge, actor)]
    if Enrollment.objects.filter(contact_id__in=[keep.pk, merge.pk], status=Enrollment.Status.ACTIVE).count() > 1:
        raise MergeError(f"{keep.public_id} and {merge.public_id} each run an automated path and nothing stopped one")
    points_before = [p.value for p in merge.points.order_by("pk")]
    _contact_rows_move(keep, merge, moves)
    kept_apart = _kept_apart_follow(keep, merge)
    filled = _blanks_fill(keep, merge)
    revoked = _consent_strictest(keep, merge, actor)
    now = timezone.now()
    Contact.objects.filter(pk=merge.pk).update(merged_into=keep, updated_at=now)
    merge.merged_into, merge.updated_at = keep, now
    if lead is not None:
        lead = _surviving(lead, leads_merged)
    receipt = receipt_write(
        business=keep.business,
        lead=lead,
        subject=merge.public_id,
        actor=actor,
        action=ACTION,
        reason=reason or "a person confirmed they are the same person",
        before={"name": merge.name, "points": points_before},
        after={
            "into": keep.public_id,
            "moved": {kind: {"count": len(ids), "ids": ids} for kind, ids in moves.ids.items()},
            "leads_merged": leads_merged,
            "enrollments_stopped": stopped,
            "consent_revoked": revoked,
            "kept_apart_pairs": kept_apart,
            "filled": filled,
        },
    )
    return MergeResult(keep, merge, moves.ids, leads_merged, stopped, revoked, receipt)


def _same_needs(keep: Contact, merge: Contact) -> list[tuple[Lead, Lead]]:
    """(survivor, duplicate) for each service line both people have an open lead of."""
    open_leads = Lead.objects.filter(contact_id__in=[keep.pk, merge.pk]).exclude(stage__in=CLOSED_STAGES)
    by_line: dict[int | None, list[Lead]] = {}
    for lead in open_leads.order_by("pk"):
        by_line.setdefault(lead.service_line_id, []).append(lead)
    pairs = []
    for leads in by_line.values():
        if len(leads) == 2:  # one per person: the one-open-lead constraint allows no more
            first, second = sorted(leads, key=lambda lead: (-PROGRESS[lead.stage], lead.created_at, lead.pk))
            pairs.append((first, second))
    return pairs


def _leads_fold(survivor: Lead, duplicate: Lead, actor: str, moves: _Moves) -> dict[str, str]:
    """Close `duplicate` as merged into `survivor` and hand it what the survivor carries on."""
    why = f"merged into {survivor.public_id}: the same person and need"
    # Closed first: its next action and paths end with it, and its open
    # next-action task is canceled before it could meet the survivor's.
    lead_sync.lead_close(duplicate, Stage.LOST, actor=actor, reason=why, lost_reason=why)
    Lead.objects.filter(pk=duplicate.pk).update(merged_into=survivor)
    for kind, model in LEAD_RECORDS:
        moves.move(kind, model._default_manager.filter(lead=duplicate), lead=survivor)
    timers = Timer.objects.filter(lead=duplicate, status=Timer.Status.PENDING)
    followed = Q()
    for key, kind in TIMER_RECORDS.items():
        pks = moves.pks.get(kind)
        if pks:
            followed |= Q(**{f"payload__{key}__in": sorted(pks)})
    if followed:
        moves.move("timers", timers.filter(followed), lead=survivor)
    return {"closed": duplicate.public_id, "into": survivor.public_id}


def _surviving(lead: Lead, leads_merged: list[dict[str, str]]) -> Lead:
    for pair in leads_merged:
        if pair["closed"] == lead.public_id:
            return Lead.objects.get(public_id=pair["into"])
    return lead


def _contact_rows_move(keep: Contact, merge: Contact, moves: _Moves) -> None:
    points = ContactPoint.objects.filter(contact=merge)
    moves.note(
        "consent_events",
        ConsentEvent.objects.filter(contact_point__in=points).order_by("pk").values_list("pk", "public_id"),
    )
    moves.move("contact_points", points, contact=keep)
    moves.move("leads", Lead.objects.filter(contact=merge), contact=keep)
    moves.move("messages", Message.objects.filter(contact=merge), contact=keep)
    moves.move("calls", Call.objects.filter(contact=merge), contact=keep)
    moves.move("enrollments", Enrollment.objects.filter(contact=merge), contact=keep)
    moves.move("payments", Payment.objects.filter(contact=merge), contact=keep)
    moves.move("merged_contacts", Contact.objects.filter(merged_into=merge), merged_into=keep)


def _kept_apart_follow(keep: Contact, merge: Contact) -> int:
    """Whom a person said the merged contact is not, the survivor is not
    either: the pairs move to the survivor; returns how many there were."""
    moved = 0
    for pair in KeptApartPair.objects.filter(Q(contact_low=merge) | Q(contact_high=merge)).order_by("pk"):
        other = pair.contact_high_id if pair.contact_low_id == merge.pk else pair.contact_low_id
        if other != keep.pk:
            low, high = sorted((keep.pk, other))
            KeptApartPair.objects.bulk_create(
                [
                    KeptApartPair(
                        business_id=pair.business_id,
                        contact_low_id=low,
                        contact_high_id=high,
                        decided_by=pair.decided_by,
                        approval=pair.approval,
                    )
                ],
                ignore_conflicts=True,
            )
        # The pair with the survivor itself is void: a person has now said they are one.
        pair.delete()
        moved += 1
    return moved


def _blanks_fill(keep: Contact, merge: Contact) -> list[str]:
    filled = [f for f in FILLED_FIELDS if not getattr(keep, f) and getattr(merge, f)]
    for name in filled:
        setattr(keep, name, getattr(merge, name))
    if merge.automation_paused and not keep.automation_paused:
        # Paused for one record of the person is paused for the person.
        keep.automation_paused, keep.automation_paused_reason = True, merge.automation_paused_reason
        filled += ["automation_paused", "automation_paused_reason"]
    if filled:
        keep.save(update_fields=[*filled, "updated_at"])
    return filled


def _consent_strictest(keep: Contact, merge: Contact, actor: str) -> list[str]:
    """For each channel, a revocation on any of the survivor's points (a STOP
    on either record) is appended to its other valid points of that channel
    that are not revoked; returns the new ledger events' ids. Only
    revocations: a merge never grants."""
    appended: list[str] = []
    for channel, kind in CHANNEL_KINDS.items():
        points = list(ContactPoint.objects.filter(contact=keep, kind=kind).order_by("pk"))
        if len(points) < 2:
            continue
        # Locked in pk order before consent_record locks them one by one.
        states = {
            state.contact_point_id: state
            for state in ConsentState.objects.select_for_update(of=("self",))
            .select_related("last_event__contact_point")
            .filter(contact_point__in=points, channel=channel)
            .order_by("pk")
        }
        revoked = [state for state in states.values() if state.status == ConsentStatus.REVOKED]
        if not revoked:
            continue
        origin = max(revoked, key=lambda state: (state.last_event.at, state.last_event.pk)).last_event
        for point in points:
            state = states.get(point.pk)
            if not point.is_valid or (state is not None and state.status == ConsentStatus.REVOKED):
                continue
            event = consent_record(
                contact_point=point,
                channel=channel,
                granted=False,
                basis=MERGE_BASIS,
                actor=actor,
                evidence={
                    "merged": merge.public_id,
                    "into": keep.public_id,
                    "revocation": origin.public_id,
                    "revoked_point": origin.contact_point.public_id,
                },
            )
            appended.append(event.public_id)
    return appended


@transaction.atomic
def contacts_keep_apart(a: Contact, b: Contact, *, actor: str, approval: str = "") -> bool:
    """Record that `a` and `b` are different people, so the identity
    resolver stops asking; True when this call recorded it (with a
    `contact.kept_apart` receipt), False when it was on record already.
    Takes both contacts' identity locks, so a capture finding the two waits
    and then sees the pair."""
    if a.pk == b.pk or a.business_id != b.business_id:
        raise MergeError(f"{a.public_id} and {b.public_id} are not two contacts of one business")
    contacts_lock(a.business_id, [a.pk, b.pk])
    low, high = sorted((a, b), key=lambda contact: contact.pk)
    pair = KeptApartPair.objects.filter(business_id=a.business_id, contact_low=low, contact_high=high)
    if pair.exists():
        return False
    # The constraint stands behind the locks: a caller without them does not fail on a twin row.
    KeptApartPair.objects.bulk_create(
        [
            KeptApartPair(
                business_id=a.business_id, contact_low=low, contact_high=high, decided_by=actor, approval=approval
            )
        ],
        ignore_conflicts=True,
    )
    receipt_write(
        business=a.business,
        subject=low.public_id,
        actor=actor,
        action="contact.kept_apart",
        reason=f"not the same person as {high.public_id}" + (f" ({approval} rejected)" if approval else ""),
        after={"apart_from": high.public_id, "approval": approval},
    )
    return True
