"""Reads, and the rows each user may see.

Who may see which record type is `crm.permissions` (one role per membership,
never merged across businesses). Here that becomes querysets: a role that
sees every lead of its business (owner, manager) sees the business's rows; a
setter sees the leads they own and what hangs off them; a technician the
leads of the appointments and jobs assigned to them. Superusers (operators)
see all.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Exists, Model, OuterRef, Q, QuerySet
from django.urls import reverse
from django.utils import timezone

from crm.context import unit, unit_entered
from crm.localtime import when, zone_or_none
from crm.models import (
    Appointment,
    Contact,
    ContactPoint,
    Job,
    KeptApartPair,
    Lead,
    Message,
    MessageTemplate,
    Role,
    TeamMember,
)
from crm.permissions import FULL_VIEW_ROLES, grants_for, memberships_where
from crm.phones import email_normalize, phone_to_e164


@dataclass(frozen=True)
class Scope:
    """What one user may see of one record type, computed once per request."""

    everything: bool = False
    full_business_ids: frozenset[int] = field(default_factory=frozenset)
    member_ids: frozenset[int] = field(default_factory=frozenset)
    setter_member_ids: frozenset[int] = field(default_factory=frozenset)
    technician_member_ids: frozenset[int] = field(default_factory=frozenset)

    @property
    def business_ids(self) -> frozenset[int]:
        return self.full_business_ids


def scope_for(user: Any, permission: str = "lead.view") -> Scope:
    """The memberships under which `user` holds `permission`, by kind of view."""
    grants = grants_for(user)
    if grants.everything:
        return Scope(everything=True)
    rows = memberships_where(user, permission)
    return Scope(
        full_business_ids=frozenset(m.business_id for m in rows if m.role in FULL_VIEW_ROLES),
        member_ids=frozenset(m.member_id for m in grants.memberships),
        setter_member_ids=frozenset(m.member_id for m in rows if m.role == Role.SETTER),
        technician_member_ids=frozenset(m.member_id for m in rows if m.role == Role.TECHNICIAN),
    )


def viewer_zone(user: Any) -> ZoneInfo:
    """The zone `user` reads times in: their own (a membership's `timezone`),
    else the business's of their first active membership, else the server's
    (settings.TIME_ZONE: an operator on no team, anyone signed out).

    No query of its own for a team member: the memberships are the grants
    every page reads anyway."""
    grants = grants_for(user)
    if grants.everything:
        # An operator's grants skip the memberships; they may still be on a team.
        rows = list(
            TeamMember.objects.filter(user=user, is_active=True)
            .order_by("pk")
            .values_list("timezone", "business__timezone")
        )
    else:
        rows = [(m.timezone, m.business_timezone) for m in grants.memberships]
    own = next((z for z in (zone_or_none(name) for name, _ in rows) if z is not None), None)
    zone = own or (zone_or_none(rows[0][1]) if rows else None)
    return zone or timezone.get_default_timezone()


def member_zone(member: TeamMember) -> ZoneInfo:
    """The zone a notice to `member` speaks (an email, their brief): their
    own, else their business's."""
    return zone_or_none(member.timezone) or zone_or_none(member.business.timezone) or timezone.get_default_timezone()


def lead_visibility_q(scope: Scope, prefix: str = "") -> Q:
    """A Q over Lead (or over a model reaching Lead through `prefix`)."""
    if scope.everything:
        return Q()
    p = f"{prefix}__" if prefix else ""
    q = Q(**{f"{p}business_id__in": scope.full_business_ids}) | Q(**{f"{p}owner_id__in": scope.setter_member_ids})
    if scope.technician_member_ids:
        assigned = Exists(
            Appointment.objects.filter(lead=OuterRef("pk"), assigned_to_id__in=scope.technician_member_ids)
        ) | Exists(Job.objects.filter(lead=OuterRef("pk"), technician_id__in=scope.technician_member_ids))
        tech_leads = Lead.objects.filter(assigned).values("pk")
        q |= Q(**{f"{p}pk__in" if p else "pk__in": tech_leads})
    return q


# --- the playbook, read once per unit of work ----------------------------------

_IN_HAND = "rows in hand"  # the key of the instances `rows_in_hand` filled


@contextmanager
def reads_shared() -> Iterator[None]:
    """Within the block (one unit of work: a task's transaction), playbook
    rows a business has (its message templates) are read once and shared by
    every step that asks, and rows the unit made are handed on in memory
    (`rows_in_hand`); outside one, each call reads them. A unit of work does
    not edit its business's playbook, so what it read stays true; what it
    handed on is forgotten when it ends, so no object outlives it with a
    stale list."""
    with unit_entered() as work:
        if work.reads is not None:
            yield
            return
        shared: dict[Any, Any] = {_IN_HAND: []}
        work.reads = shared
        try:
            yield
        finally:
            work.reads = None
            for instance, relation in shared[_IN_HAND]:
                instance.__dict__.get("_prefetched_objects_cache", {}).pop(relation, None)


def _shared() -> dict[Any, Any] | None:
    work = unit()
    return work.reads if work is not None else None


def message_templates(business_id: int) -> dict[str, MessageTemplate]:
    """The business's message templates by key (approved or not)."""
    shared = _shared()
    key = ("message_templates", business_id)
    if shared is not None and key in shared:
        return dict(shared[key])
    found = {t.key: t for t in MessageTemplate.objects.filter(business_id=business_id)}
    if shared is not None:
        shared[key] = found
    return dict(found)


def rows_in_hand(instance: Model, relation: str, rows: list[Any]) -> None:
    """Tell Django that `instance.<relation>.all()` is `rows`, as a
    prefetch_related would, until the unit of work (`reads_shared`) ends:
    for a row made in this unit together with all of its related rows (a
    new contact's points, a new lead's touch), so the steps after it read
    them without a query. Filtering the relation still queries; `.all()`
    does not. Outside a unit of work it does nothing."""
    shared = _shared()
    if shared is None:
        return
    shared[_IN_HAND].append((instance, relation))
    # As prefetch_related stores it: the relation's queryset, already evaluated.
    queryset = getattr(instance, relation).get_queryset()
    queryset._result_cache, queryset._prefetch_done = list(rows), True
    instance.__dict__.setdefault("_prefetched_objects_cache", {})[relation] = queryset


def rows_held(instance: Model, relation: str) -> list[Any] | None:
    """The rows `rows_in_hand` (or a prefetch) put on `instance`, else None."""
    found = instance.__dict__.get("_prefetched_objects_cache", {}).get(relation)
    return list(found) if found is not None else None


def business_manager(business_id: int) -> TeamMember | None:
    """Who takes what has no owner: the business's first active manager, else its owner."""
    return (
        TeamMember.objects.select_related("user")
        .filter(business_id=business_id, is_active=True, role__in=[Role.MANAGER, Role.OWNER])
        .order_by("role", "pk")
        .first()
    )


def business_managers() -> QuerySet[TeamMember, tuple[int, int]]:
    """`business_manager` for every business at once, as rows of
    (business_id, pk): for set-based writes that join it in SQL."""
    return (
        TeamMember.objects.filter(is_active=True, role__in=[Role.MANAGER, Role.OWNER])
        .order_by("business_id", "role", "pk")
        .distinct("business_id")
        .values_list("business_id", "pk")
    )


def contacts_kept_apart(contact: Contact, others: Iterable[Contact]) -> set[int]:
    """The pks of `others` a person said are not the same person as `contact`
    (a rejected merge: `crm.services.merge.contacts_keep_apart`)."""
    pks = [other.pk for other in others if other.pk != contact.pk]
    if not pks:
        return set()
    rows = KeptApartPair.objects.filter(business_id=contact.business_id).filter(
        Q(contact_low=contact, contact_high_id__in=pks) | Q(contact_high=contact, contact_low_id__in=pks)
    )
    return {low if low != contact.pk else high for low, high in rows.values_list("contact_low_id", "contact_high_id")}


def lead_list_visible(user: Any, permission: str = "lead.view") -> QuerySet[Lead]:
    """The leads `user` may see (or, with `permission`, act on)."""
    return Lead.objects.filter(lead_visibility_q(scope_for(user, permission)))


def scoped(
    qs: QuerySet[Any],
    user: Any,
    *,
    lead_path: str | None = None,
    business_field: str = "business_id",
    permission: str | None = None,
) -> QuerySet[Any]:
    """Restrict any queryset to what `user` may see.

    The permission defaults to `<model>.view`. Rows hanging off a lead
    (`lead_path`) follow the lead's visibility under that permission; rows
    without a lead are visible to the full-view roles of their business only.
    """
    permission = permission or f"{qs.model._meta.model_name}.view"
    scope = scope_for(user, permission)
    if scope.everything:
        return qs
    q = Q(**{f"{business_field}__in": scope.full_business_ids})
    if lead_path and (scope.setter_member_ids or scope.technician_member_ids):
        limited = Scope(setter_member_ids=scope.setter_member_ids, technician_member_ids=scope.technician_member_ids)
        q |= Q(**{f"{lead_path}__in": Lead.objects.filter(lead_visibility_q(limited)).values("pk")})
    return qs.filter(q)


# A record's public id as it is shown (`lead_01JD…`, `cont_01JD…`).
_PUBLIC_ID = re.compile(r"^[a-z]+_[0-9A-Z]{10,40}$")


def lead_search_q(term: str, region: str = "US") -> Q:
    """Match a typed search term on ID, name, email or a phone in any format.

    The term says what it is, and only that is searched, each along its own
    index: an id (the lead's or its contact's), an email or a phone number
    (the normalized contact point), else a name (trigram indexes, so a part
    of a name is found without reading every contact). One condition that
    tried them all at once was an OR across tables that no index serves."""
    term = term.strip()
    if not term:
        return Q()
    if _PUBLIC_ID.match(term):
        return Q(public_id=term) | Q(contact__public_id=term)
    if "@" in term:
        return Q(contact_id__in=ContactPoint.objects.filter(value=email_normalize(term)).values("contact_id"))
    if not any(ch.isalpha() for ch in term) and (e164 := phone_to_e164(term, region)):
        return Q(contact_id__in=ContactPoint.objects.filter(value=e164).values("contact_id"))
    names = Q(first_name__icontains=term) | Q(last_name__icontains=term)
    if " " in term:
        first, _, last = term.partition(" ")
        names |= Q(first_name__iexact=first, last_name__icontains=last.strip())
    return Q(contact_id__in=Contact.objects.filter(names).values("pk"))


@dataclass(frozen=True)
class TimelineEntry:
    at: Any
    kind: str
    ref: str
    title: str
    detail: str = ""
    link: str = ""
    link_label: str = ""


def lead_timeline(lead: Lead) -> list[TimelineEntry]:
    """Everything that happened to a lead, in time order: touches, messages,
    calls, tasks, appointments, estimates, jobs, invoices, payments, refunds
    and receipts. A fixed number of queries however long the history is."""
    from crm.models import Refund

    entries: list[TimelineEntry] = []
    add = entries.append
    for t in lead.touches.select_related("source", "inbound_event"):
        where = t.source.key if t.source else t.provider
        campaign = f" · campaign {t.campaign_id}" if t.campaign_id else ""
        raw = t.inbound_event
        link = reverse("admin:crm_inboundevent_change", args=[raw.pk]) if raw else ""
        add(
            TimelineEntry(
                t.received_at,
                "touch",
                t.public_id,
                f"{t.channel} via {where}{campaign}",
                _utm(t.utm),
                link=link,
                link_label=f"raw event {raw.public_id}" if raw else "",
            )
        )
    for m in lead.messages.all():
        arrow = "←" if m.direction == "in" else "→"
        status = m.status + (f" ({m.block_reason})" if m.block_reason else "")
        add(TimelineEntry(m.created_at, "message", m.public_id, f"{arrow} {m.channel} {status}", m.body))
    for c in lead.calls.all():
        duration = f", {c.duration_seconds}s" if c.duration_seconds is not None else ""
        add(TimelineEntry(c.started_at, "call", c.public_id, f"call {c.direction} {c.status}{duration}", c.transcript))
    for task in lead.tasks.all():
        add(
            TimelineEntry(
                task.created_at,
                "task",
                task.public_id,
                f"task ({task.status}): {task.title}",
                f"due {when(task.due_at)}",
            )
        )
    for a in lead.appointments.all():
        add(
            TimelineEntry(
                a.created_at,
                "appointment",
                a.public_id,
                f"appointment {a.status}",
                f"{timezone.localtime(a.starts_at):%Y-%m-%d %H:%M}–{when(a.ends_at, '%H:%M')}",
            )
        )
    for e in lead.estimates.all():
        add(
            TimelineEntry(
                e.created_at, "estimate", e.public_id, f"estimate {e.status}: {e.amount} {e.currency}", e.description
            )
        )
    for j in lead.jobs.all():
        add(TimelineEntry(j.completed_at or j.created_at, "job", j.public_id, f"job {j.status}"))
    for i in lead.invoices.all():
        add(
            TimelineEntry(
                i.issued_at or i.created_at,
                "invoice",
                i.public_id,
                f"invoice {i.status}: {i.amount} {i.currency}",
                i.number,
            )
        )
    for p in lead.payments.all():
        add(
            TimelineEntry(
                p.received_at, "payment", p.public_id, f"payment {p.amount} {p.currency} ({p.provider})", p.match_status
            )
        )
    for r in Refund.objects.filter(payment__lead=lead):
        add(TimelineEntry(r.refunded_at, "refund", r.public_id, f"refund {r.amount} {r.currency}", r.reason))
    for rc in lead.receipts.all():
        add(
            TimelineEntry(
                rc.at, "receipt", rc.public_id, f"{rc.action} by {rc.actor}", _change(rc.before, rc.after, rc.reason)
            )
        )
    entries.sort(key=lambda e: e.at)
    return entries


def _utm(utm: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(utm.items()) if v)


def _change(before: dict[str, Any], after: dict[str, Any], reason: str) -> str:
    parts = [f"{k}: {before.get(k)!s} → {after.get(k)!s}" if k in before else f"{k}: {after[k]!s}" for k in after]
    return "; ".join(parts) + (f" — {reason}" if reason else "")


def last_text_to(lead: Lead, *, before: Any = None) -> str:
    """Our last message to the person on `lead` (before `before`, when
    given): what a short reply ("yes", "the second one") answers, read with
    it by the intent reader."""
    sent = Message.objects.filter(lead=lead, direction="out")
    if before is not None:
        sent = sent.filter(created_at__lt=before)
    return sent.order_by("-created_at").values_list("body", flat=True).first() or ""
