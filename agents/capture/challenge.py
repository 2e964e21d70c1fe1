"""An optional human challenge on the hosted form: Cloudflare Turnstile or
hCaptcha, verified server side.

The server's keys come from the environment (CAPTCHA_PROVIDER,
CAPTCHA_SITE_KEY, CAPTCHA_SECRET_KEY; CAPTCHA_VERIFY_URL overrides the
provider's siteverify endpoint, for tests). A business asks for it with
`policy: {captcha: true}`. The widget's script is the provider's own and is
rendered only when both are set; without server keys a business's request
for a challenge cannot be honoured, which is logged on every form shown.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import requests
from django.conf import settings

from crm.models import Business

log = logging.getLogger(__name__)
TIMEOUT = (3.05, 5)


@dataclass(frozen=True)
class ChallengeProvider:
    script_url: str
    verify_url: str
    widget_class: str
    response_field: str


PROVIDERS = {
    "turnstile": ChallengeProvider(
        script_url="https://challenges.cloudflare.com/turnstile/v0/api.js",
        verify_url="https://challenges.cloudflare.com/turnstile/v0/siteverify",
        widget_class="cf-turnstile",
        response_field="cf-turnstile-response",
    ),
    "hcaptcha": ChallengeProvider(
        script_url="https://js.hcaptcha.com/1/api.js",
        verify_url="https://api.hcaptcha.com/siteverify",
        widget_class="h-captcha",
        response_field="h-captcha-response",
    ),
}
RESPONSE_FIELDS = {p.response_field for p in PROVIDERS.values()}


def challenge_for(business: Business) -> ChallengeProvider | None:
    """The challenge this business's form shows, or None."""
    if not business.captcha_required:
        return None
    provider = PROVIDERS.get(settings.CAPTCHA_PROVIDER)
    if provider is None:
        log.warning("business %s asks for a form challenge but CAPTCHA_PROVIDER is not set", business.slug)
    return provider


def challenge_passed(provider: ChallengeProvider, token: str, client_address: str) -> bool:
    """Ask the provider whether `token` is a fresh pass. A provider that cannot
    be reached counts as a failure: the person may try again, a bot may not
    slip through while the provider is down."""
    if not token:
        return False
    try:
        response = requests.post(
            settings.CAPTCHA_VERIFY_URL or provider.verify_url,
            data={"secret": settings.CAPTCHA_SECRET_KEY, "response": token, "remoteip": client_address},
            timeout=TIMEOUT,
        )
        response.raise_for_status()
        return bool(response.json().get("success"))
    except (requests.RequestException, ValueError) as exc:
        log.warning("form challenge could not be verified: %s", exc)
        return False
