"""What templates/admin/base_site.html needs on the back office's own pages.

The admin's views pass these themselves (`AdminSite.each_context`); our pages
(reports, next actions, booking, copilot) extend the same base and get them
here, so every page carries the product's name and the user tools (which name
the viewer's time zone). The full `each_context` would also build the app list,
a dozen permission checks a page that never shows it would pay for.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject


def back_office(request: HttpRequest) -> dict[str, Any]:
    def staff() -> bool:
        user = getattr(request, "user", None)
        return bool(user is not None and user.is_active and user.is_staff)

    return {
        "site_header": admin.site.site_header,
        "site_title": admin.site.site_title,
        # Lazy: a public page (the hosted form) never loads a session for it.
        "has_permission": SimpleLazyObject(staff),
    }
