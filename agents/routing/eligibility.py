"""Capacity reader and skill matcher: who may own this lead, and why not.

Eligible owners are active setters who have the lead's service line and
territory (a member listing none covers all), are not out of office, are
under their cap of open leads, and are on shift in their own time zone. A
lead that is not urgent may also go to someone off shift when nobody is on
(it waits for their morning rather than for a manager).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import Count, OuterRef, Q, QuerySet

from agents.outbound.local_hours import hours_open
from crm.models import CLOSED_STAGES, Lead, Role, TeamMember


@dataclass
class Candidate:
    member: TeamMember
    skipped: list[str] = field(default_factory=list)
    on_shift: bool = True
    open_leads: int = 0

    @property
    def eligible(self) -> bool:
        return not self.skipped

    def describe(self) -> dict[str, object]:
        return {
            "member": self.member.user.get_username(),
            "weight": self.member.weight,
            "open_leads": self.open_leads,
            "on_shift": self.on_shift,
            "skipped": self.skipped,
        }


def _open_counts(member_ids: list[int]) -> dict[int, int]:
    rows = (
        Lead.objects.filter(owner_id__in=member_ids)
        .exclude(stage__in=CLOSED_STAGES)
        .values("owner_id")
        .annotate(n=Count("pk"))
    )
    return {row["owner_id"]: row["n"] for row in rows}


def owner_candidates(
    lead: Lead,
    *,
    now: datetime,
    urgent: bool,
    areas: tuple[str, ...] = (),
    exclude: tuple[int, ...] = (),
    members: list[TeamMember] | None = None,
) -> list[Candidate]:
    """Every setter of the business, each with the reasons they were skipped.

    `members` lets the caller pass rows it has locked, so the capacity count
    is read under the same lock the assignment is written under.
    """
    if members is None:
        members = list(setters_of(lead.business_id))
    counts = _open_counts([m.pk for m in members])
    business_zone = lead.business.timezone
    candidates = []
    for member in members:
        c = Candidate(member, open_leads=counts.get(member.pk, 0))
        if member.pk in exclude:
            c.skipped.append("excluded (current owner)")
        if not member.is_active or not member.user.is_active:
            c.skipped.append("inactive")
        lines = set(member.line_ids)  # type: ignore[attr-defined]  # see setters_of
        if lead.service_line_id and lines and lead.service_line_id not in lines:
            c.skipped.append("lacks the service line")
        member_areas = set(member.area_names)  # type: ignore[attr-defined]
        if areas and member_areas and not member_areas & set(areas):
            c.skipped.append("outside their territory")
        if member.out_of_office_until and member.out_of_office_until > now:
            c.skipped.append(f"out of office until {member.out_of_office_until.isoformat()}")
        if member.max_open_leads is not None and c.open_leads >= member.max_open_leads:
            c.skipped.append(f"at their cap of {member.max_open_leads} open leads")
        c.on_shift = hours_open(member.hours or {}, ZoneInfo(member.timezone or business_zone), now)
        candidates.append(c)
    eligible = [c for c in candidates if c.eligible]
    anyone_on_shift = any(c.on_shift for c in eligible)
    for c in eligible:
        # Urgent leads go only to someone working now; others prefer them.
        if not c.on_shift and (urgent or anyone_on_shift):
            c.skipped.append("off shift" + (" and the lead is urgent" if urgent else ""))
    return candidates


def setters_of(business_id: int) -> QuerySet[TeamMember]:
    """The setters, each with `line_ids` and `area_names` (their skills and
    territory, empty for all) read in the same query: arrays of subqueries,
    not joins, so the caller may lock the rows (FOR UPDATE OF the members)."""
    lines = TeamMember.service_lines.through.objects.filter(teammember_id=OuterRef("pk")).values("serviceline_id")
    areas = TeamMember.service_areas.through.objects.filter(teammember_id=OuterRef("pk")).values("servicearea__name")
    return (
        TeamMember.objects.filter(Q(business_id=business_id) & Q(role=Role.SETTER))
        .select_related("user")
        .annotate(line_ids=ArraySubquery(lines), area_names=ArraySubquery(areas))
        .order_by("pk")
    )
