"""Reads, and the one definition of who may see what.

Scoping rules (issue 2, DESIGN §4): a user sees only businesses they are a
member of; owners and managers see their whole business; a setter sees only
the leads they own (and what hangs off them); a technician sees the leads of
the appointments and jobs assigned to them. Superusers (operators) see all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from crm.models import Appointment, ContactPoint, Job, Lead, Role, TeamMember
from crm.phones import email_normalize, phone_to_e164

FULL_VIEW_ROLES = (Role.OWNER, Role.MANAGER)


@dataclass(frozen=True)
class Scope:
    """What one user may see, computed once per request."""

    everything: bool = False
    full_business_ids: frozenset[int] = field(default_factory=frozenset)
    member_ids: frozenset[int] = field(default_factory=frozenset)
    setter_member_ids: frozenset[int] = field(default_factory=frozenset)
    technician_member_ids: frozenset[int] = field(default_factory=frozenset)

    @property
    def business_ids(self) -> frozenset[int]:
        return self.full_business_ids


def scope_for(user: Any) -> Scope:
    if not user or not user.is_authenticated or not user.is_active:
        return Scope()
    cached = getattr(user, "_leadops_scope", None)
    if cached is not None:
        return cached  # type: ignore[no-any-return]
    if user.is_superuser:
        scope = Scope(everything=True)
    else:
        rows = list(TeamMember.objects.filter(user=user, is_active=True).values_list("pk", "business_id", "role"))
        scope = Scope(
            full_business_ids=frozenset(b for _, b, r in rows if r in FULL_VIEW_ROLES),
            member_ids=frozenset(pk for pk, _, _ in rows),
            setter_member_ids=frozenset(pk for pk, _, r in rows if r == Role.SETTER),
            technician_member_ids=frozenset(pk for pk, _, r in rows if r == Role.TECHNICIAN),
        )
    user._leadops_scope = scope
    return scope


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


def lead_list_visible(user: Any) -> QuerySet[Lead]:
    scope = scope_for(user)
    return Lead.objects.filter(lead_visibility_q(scope))


def scoped(qs: QuerySet[Any], user: Any, *, lead_path: str | None = None, business_path: str = "business") -> QuerySet[Any]:
    """Restrict any queryset to what `user` may see.

    Rows hanging off a lead (`lead_path`) follow the lead's visibility; rows
    without a lead are visible to full-view roles of their business only.
    """
    scope = scope_for(user)
    if scope.everything:
        return qs
    q = Q(**{f"{business_path}_id__in" if "__" not in business_path else f"{business_path}__in": scope.full_business_ids})
    if lead_path:
        q |= Q(**{f"{lead_path}__in": lead_list_visible(user).values("pk")})
    return qs.filter(q)


def lead_search_q(term: str, region: str = "US") -> Q:
    """Match a typed search term on ID, name, email or a phone in any format."""
    term = term.strip()
    q = Q(public_id=term) | Q(contact__public_id=term)
    q |= Q(contact__first_name__icontains=term) | Q(contact__last_name__icontains=term)
    if " " in term:
        first, _, last = term.partition(" ")
        q |= Q(contact__first_name__iexact=first, contact__last_name__icontains=last.strip())
    points = Q(value=email_normalize(term)) if "@" in term else Q()
    e164 = phone_to_e164(term, region) if any(ch.isdigit() for ch in term) else None
    if e164:
        points = points | Q(value=e164) if points else Q(value=e164)
    if points:
        q |= Q(contact__in=ContactPoint.objects.filter(points).values("contact_id"))
    return q
