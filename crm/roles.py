"""Roles as Django groups with model permissions.

A group says what a role may do; a TeamMember row says in which business.
Both are needed: permissions without membership show nothing (see
`crm.selectors.scope`).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, Permission

from crm.models import Role

_READ_ALL = [
    "business",
    "contact",
    "contactpoint",
    "consentevent",
    "lead",
    "leadtouch",
    "inboundevent",
    "message",
    "call",
    "task",
    "timer",
    "appointment",
    "estimate",
    "job",
    "invoice",
    "payment",
    "refund",
    "receipt",
    "teammember",
    "serviceline",
    "servicearea",
    "source",
    "sequence",
    "enrollment",
    "messagetemplate",
    "approvalrequest",
]

ROLE_PERMISSIONS: dict[str, list[str]] = {
    Role.SETTER: [
        *(
            f"view_{m}"
            for m in [
                "contact",
                "contactpoint",
                "consentevent",
                "lead",
                "leadtouch",
                "message",
                "call",
                "task",
                "appointment",
                "estimate",
                "job",
                "invoice",
                "payment",
                "refund",
                "receipt",
                "enrollment",
                "approvalrequest",
            ]
        ),
        "change_lead",
        "change_task",
        "add_appointment",
        "change_appointment",
    ],
    Role.TECHNICIAN: ["view_lead", "view_contact", "view_appointment", "view_job", "change_job"],
    Role.MANAGER: [
        *(f"view_{m}" for m in _READ_ALL),
        "change_lead",
        "change_task",
        "change_contact",
        "add_appointment",
        "change_appointment",
        "add_estimate",
        "change_estimate",
        "add_job",
        "change_job",
        "add_invoice",
        "change_invoice",
        "add_payment",
        "change_payment",
        "add_refund",
        "change_inboundevent",
        "change_approvalrequest",
    ],
}
ROLE_PERMISSIONS[Role.OWNER] = [
    *ROLE_PERMISSIONS[Role.MANAGER],
    "change_business",
    "change_teammember",
    "change_source",
    "change_serviceline",
    "change_servicearea",
]


def roles_sync() -> None:
    """Create or update one group per role with exactly its permissions."""
    by_codename = {p.codename: p for p in Permission.objects.filter(content_type__app_label__in=["crm", "approvals"])}
    for role, codenames in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        wanted = [by_codename[c] for c in codenames if c in by_codename]
        group.permissions.set(wanted)


def roles_sync_on_migrate(**kwargs: Any) -> None:
    # Permissions are created by contenttypes/auth on post_migrate; ours runs
    # after theirs because crm comes later in INSTALLED_APPS.
    roles_sync()
