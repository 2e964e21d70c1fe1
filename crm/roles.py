"""Roles as Django groups with model permissions, for Django's own screens.

Nothing in LeadOps asks these groups whether a user may do something: a
user's groups are global, and would merge the roles they hold in different
businesses. `crm.permissions` answers every question, by the role of the
membership in the record's business. The groups stay in step with the roles
so that Django's user page shows what a role is for, and so that a user kept
after their memberships end still carries no permission of Django's that
LeadOps' admin would honour (the admin classes ignore them).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, Permission

from crm.models import Role


def _perms(action: str, models: str) -> list[str]:
    return [f"{action}_{model}" for model in models.split()]


# Record changes go through services (actions and forms that call them), so
# "change" here opens those actions; the admin's own forms stay read-only.
_SETTER_READS = (
    "contact contactpoint consentevent lead leadtouch message call task appointment estimate job invoice "
    "payment refund receipt enrollment approvalrequest"
)
_ALL_READS = (
    _SETTER_READS + " business inboundevent timer teammember serviceline servicearea source sequence messagetemplate"
)

ROLE_PERMISSIONS: dict[str, list[str]] = {
    Role.SETTER: [*_perms("view", _SETTER_READS), *_perms("change", "lead task"), *_perms("add", "appointment")],
    Role.TECHNICIAN: [*_perms("view", "lead contact appointment job"), "change_job"],
    Role.MANAGER: [
        *_perms("view", _ALL_READS),
        *_perms("change", "lead task contact appointment estimate job invoice payment inboundevent approvalrequest"),
        *_perms("add", "appointment estimate job invoice payment refund"),
    ],
}
ROLE_PERMISSIONS[Role.OWNER] = [
    *ROLE_PERMISSIONS[Role.MANAGER],
    *_perms("change", "business teammember source serviceline servicearea"),
]


def roles_sync() -> None:
    """Create or update one group per role with exactly its permissions."""
    by_codename = {p.codename: p for p in Permission.objects.filter(content_type__app_label__in=["crm", "approvals"])}
    for role, codenames in ROLE_PERMISSIONS.items():
        missing = [c for c in codenames if c not in by_codename]
        if missing:
            raise LookupError(f"role {role} names unknown permissions: {', '.join(missing)}")
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set([by_codename[c] for c in codenames])


def roles_sync_on_migrate(**kwargs: Any) -> None:
    # post_migrate fires once per app, and each app's permissions appear only
    # at its own signal: sync once every permission a role names exists
    # (at the last of our apps' signals on a fresh database).
    try:
        roles_sync()
    except LookupError:
        return
