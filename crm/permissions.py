"""The one permission table: what each role may do, per business.

A user's role is the role of their membership (TeamMember) in the business a
record belongs to, never a union across businesses: an owner of one business
who is a setter in another is a setter there. Every API view, admin view,
admin action and page asks `can` (one business) or `business_ids_where`
(every business where the user may), and the rows a role may see of a record
type come from `crm.selectors.scoped`, which reads this table too.

Permissions are strings: `<record>.view`, `<record>.change`, `<record>.add`
(record names are model names, lower case) and named actions. A permission
missing from the table is granted to nobody: adding a view or an action means
adding its line here, and the role-matrix test notices a URL that asks for
nothing. Operators (superusers) may do everything everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crm.models import Role, TeamMember

SETTER, OWNER, MANAGER, TECHNICIAN = Role.SETTER, Role.OWNER, Role.MANAGER, Role.TECHNICIAN
LEADERS = frozenset({OWNER, MANAGER})
SALES = frozenset({OWNER, MANAGER, SETTER})
EVERYONE = frozenset({OWNER, MANAGER, SETTER, TECHNICIAN})
OWNERS = frozenset({OWNER})

# Roles that see every lead of their business; the others see only leads tied
# to them (a setter the leads they own, a technician the leads of the
# appointments and jobs assigned to them).
FULL_VIEW_ROLES = LEADERS


def _records(names: str, roles: frozenset[str], verb: str = "view") -> dict[str, frozenset[str]]:
    return {f"{name}.{verb}": roles for name in names.split()}


PERMISSIONS: dict[str, frozenset[str]] = {
    # -- reading records
    # The conversation and its history: the sales side only. Technicians work
    # from the appointment, the job and the brief, never the conversation.
    **_records(
        "leadtouch message call task receipt consentevent contactpoint enrollment approvalrequest "
        "estimate invoice payment refund",
        SALES,
    ),
    **_records("lead contact appointment job", EVERYONE),
    # Configuration and operations: the business's leaders.
    **_records(
        "business teammember serviceline servicearea source sequence messagetemplate availability "
        "inboundevent timer rejecteddelivery exceptionitem webhooksubscription webhookdelivery "
        "conversionaccount conversionupload syncconnection",
        LEADERS,
    ),
    # -- changing records (always through services; the admin's forms call them)
    **_records("lead task", SALES, "change"),
    **_records("contact appointment estimate job invoice payment approvalrequest", LEADERS, "change"),
    **_records("job", frozenset({TECHNICIAN}) | LEADERS, "change"),
    **_records("appointment", SALES, "add"),
    **_records("estimate job invoice payment refund", LEADERS, "add"),
    # Settings of the business: its owners only.
    **_records(
        "business teammember source serviceline servicearea sequence messagetemplate availability webhooksubscription",
        OWNERS,
        "change",
    ),
    **_records(
        "teammember source serviceline servicearea sequence messagetemplate availability webhooksubscription",
        OWNERS,
        "add",
    ),
    # -- actions
    "message.send": SALES,
    # The setters' workspace: a conversation marked done without a reply,
    # a note on it, a call logged by hand.
    "conversation.settle": SALES,
    "note.add": SALES,
    "call.add": SALES,
    "approval.decide": LEADERS,
    "estimate.create": LEADERS,
    "estimate.send": LEADERS,
    "estimate.accept": LEADERS,
    "estimate.decline": LEADERS,
    "appointment.book": SALES,
    "appointment.outcome": SALES,
    "task.complete": EVERYONE,  # their own tasks only (the page lists no others)
    "lead.reassign": LEADERS,
    # A new invitation for a team member who has not set a password yet.
    "teammember.invite": LEADERS,
    "event.replay": LEADERS,
    "timer.retry": LEADERS,
    "webhook.replay": LEADERS,
    "webhook.resume": LEADERS,  # pause and resume a subscription
    "conversion.replay": LEADERS,
    # Connecting the business's own systems (Jobber…): its owners.
    "sync.connect": OWNERS,
    "settings.edit": OWNERS,
    "money.view": LEADERS,
    "report.view": SALES,  # a setter's reports count their own leads only
    "csv.export": LEADERS,
    "registration.view": LEADERS,  # the 10DLC evidence pack (consent evidence of contacts)
    "sequence.resume": LEADERS,  # a sequence the SMS health check paused
    "contact.forget": OWNERS,
}


@dataclass(frozen=True)
class Membership:
    member_id: int
    business_id: int
    role: str
    # The member's own time zone, and their business's (read here so that
    # the viewer's zone costs no query of its own: crm.selectors.viewer_zone).
    timezone: str = ""
    business_timezone: str = ""


@dataclass(frozen=True)
class Grants:
    """One user's memberships, read once per request."""

    everything: bool
    memberships: tuple[Membership, ...]

    def role_in(self, business_id: int | None) -> str | None:
        for membership in self.memberships:
            if membership.business_id == business_id:
                return membership.role
        return None


NOBODY = Grants(everything=False, memberships=())


def grants_for(user: Any) -> Grants:
    """The user's active memberships (cached on the user object for the request)."""
    if not user or not getattr(user, "is_authenticated", False) or not user.is_active:
        return NOBODY
    cached = getattr(user, "_leadops_grants", None)
    if cached is not None:
        return cached
    if user.is_superuser:
        grants = Grants(everything=True, memberships=())
    else:
        rows = TeamMember.objects.filter(user=user, is_active=True).values_list(
            "pk", "business_id", "role", "timezone", "business__timezone"
        )
        grants = Grants(everything=False, memberships=tuple(Membership(*row) for row in rows.order_by("pk")))
    user._leadops_grants = grants
    return grants


def role_allows(role: str | None, permission: str) -> bool:
    if permission not in PERMISSIONS:
        raise KeyError(f"unknown permission {permission!r}: add it to crm.permissions.PERMISSIONS")
    return role is not None and role in PERMISSIONS[permission]


def can(user: Any, permission: str, business_id: int | None) -> bool:
    """May `user` do `permission` in this business? Their role there decides."""
    grants = grants_for(user)
    if grants.everything:
        role_allows(OWNER, permission)  # still refuses an unknown permission name
        return True
    return role_allows(grants.role_in(business_id), permission)


def can_anywhere(user: Any, permission: str) -> bool:
    """May `user` do `permission` in at least one business (menus, index pages)."""
    grants = grants_for(user)
    if grants.everything:
        role_allows(OWNER, permission)
        return True
    return any(role_allows(m.role, permission) for m in grants.memberships)


def memberships_where(user: Any, permission: str) -> tuple[Membership, ...]:
    """The memberships under which `user` may do `permission`."""
    return tuple(m for m in grants_for(user).memberships if role_allows(m.role, permission))


def business_ids_where(user: Any, permission: str, *, full_view: bool = False) -> frozenset[int] | None:
    """The businesses where `user` may do `permission` (None: every business,
    for operators). `full_view` keeps only memberships that see every lead."""
    grants = grants_for(user)
    if grants.everything:
        return None
    return frozenset(
        m.business_id for m in memberships_where(user, permission) if not full_view or m.role in FULL_VIEW_ROLES
    )


def permission_table_markdown() -> str:
    """The table as docs/security.md shows it (a test keeps the two equal)."""
    order = (OWNER, MANAGER, SETTER, TECHNICIAN)
    lines = ["| permission | owner | manager | setter | technician |", "|---|---|---|---|---|"]
    for permission in sorted(PERMISSIONS):
        roles = PERMISSIONS[permission]
        lines.append(f"| `{permission}` | " + " | ".join("yes" if r in roles else "—" for r in order) + " |")
    return "\n".join(lines)
