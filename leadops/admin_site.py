"""The back office's admin site: its index grouped by what people do.

Django's index lists models by the app that defines them (crm, approvals,
auth, django_q…), which says how the code is laid out, not what anyone came
to do. Here the index and the sidebar group them as the team thinks of
them: the leads and the people behind them, the money, the team and its
settings, and what runs behind the scenes (for the operator). An app's own
page (`/admin/crm/`) keeps Django's listing.

Each group lists only the models the viewer may see, exactly as Django's
index does (`_build_app_dict` applies the permissions); a model registered
later and named in no group lands in "Other", so nothing ever disappears
from the index.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest

# (slug, heading, models as "app_label.ObjectName" in the order shown).
GROUPS: list[tuple[str, str, list[str]]] = [
    (
        "leads",
        "Leads and people",
        [
            "crm.Lead",
            "crm.Contact",
            "crm.ContactPoint",
            "crm.ConsentEvent",
            "crm.Message",
            "crm.Call",
            "crm.Appointment",
            "crm.Task",
            "approvals.ApprovalRequest",
            "crm.Enrollment",
            "crm.LeadTouch",
        ],
    ),
    (
        "money",
        "Money",
        [
            "crm.Estimate",
            "crm.Job",
            "crm.Invoice",
            "crm.Payment",
            "crm.Refund",
            "crm.ConversionUpload",
            "crm.ConversionAccount",
        ],
    ),
    (
        "team",
        "Team and settings",
        [
            "crm.Business",
            "crm.TeamMember",
            "crm.ServiceLine",
            "crm.ServiceArea",
            "crm.Source",
            "crm.Sequence",
            "crm.MessageTemplate",
            "crm.WebhookSubscription",
            "auth.User",
            "auth.Group",
            "authtoken.TokenProxy",
            "otp_totp.TOTPDevice",
        ],
    ),
    (
        "behind",
        "Behind the scenes",
        [
            "crm.InboundEvent",
            "crm.RejectedDelivery",
            "crm.WebhookDelivery",
            "crm.Timer",
            "crm.Receipt",
            "django_q.Failure",
            "django_q.OrmQ",
            "django_q.Schedule",
            "django_q.Success",
        ],
    ),
]


class LeadOpsAdminSite(admin.AdminSite):
    site_header = "LeadOps"
    site_title = "LeadOps"
    index_title = "LeadOps back office"

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[dict[str, Any]]:
        if app_label is not None:
            return super().get_app_list(request, app_label)
        seen = {
            f"{label}.{model['object_name']}": model
            for label, app in self._build_app_dict(request).items()
            for model in app["models"]
        }
        groups = [
            _group(slug, heading, [seen.pop(key) for key in keys if key in seen]) for slug, heading, keys in GROUPS
        ]
        groups.append(_group("other", "Other", sorted(seen.values(), key=lambda m: str(m["name"]).lower())))
        return [group for group in groups if group["models"]]


def _group(slug: str, heading: str, models: list[dict[str, Any]]) -> dict[str, Any]:
    # `group` tells templates/admin/app_list.html this is no app: no link to an app page.
    return {
        "name": heading,
        "app_label": slug,
        "app_url": "",
        "has_module_perms": True,
        "models": models,
        "group": True,
    }


class LeadOpsAdminConfig(AdminConfig):
    default_site = "leadops.admin_site.LeadOpsAdminSite"
