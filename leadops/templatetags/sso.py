"""`{% single_sign_on as sso %}`: whether the login page offers single
sign-on (`sso.on`) and whether it still takes passwords from everyone
(`sso.passwords`; false: the operator's break-glass account alone)."""

from __future__ import annotations

from django import template
from django.conf import settings

register = template.Library()


@register.simple_tag
def single_sign_on() -> dict[str, bool]:
    return {"on": bool(settings.OIDC_ISSUER), "passwords": bool(settings.LOCAL_PASSWORDS)}
