"""API tokens in the admin: see who holds one and until when, and revoke it.

Revoking is deleting the token (DRF's own admin delete); the next request
with that key is refused (401). The key itself is shown only by its first
characters: the admin is not a way to copy another person's credentials.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.utils import timezone
from rest_framework.authtoken.admin import TokenAdmin
from rest_framework.authtoken.models import TokenProxy

from leadops.authentication import token_expires_at


class ExpiringTokenAdmin(TokenAdmin):
    list_display = ("key_start", "user", "created", "expires_at", "state")

    @admin.display(description="key")
    def key_start(self, token: TokenProxy) -> str:
        return f"{token.key[:6]}…"

    @admin.display(description="expires")
    def expires_at(self, token: TokenProxy) -> Any:
        return token_expires_at(token)

    @admin.display(description="state")
    def state(self, token: TokenProxy) -> str:
        return "expired" if token_expires_at(token) <= timezone.now() else "active"


admin.site.unregister(TokenProxy)
admin.site.register(TokenProxy, ExpiringTokenAdmin)
