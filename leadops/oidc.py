"""Single sign-on with OpenID Connect: mozilla-django-oidc, configured from
the issuer's discovery document, with PKCE and RS256 tokens checked against
the provider's published keys.

Off while OIDC_ISSUER is empty: the /oidc/ pages answer 404 and the backend
answers no sign-in. On, the login page's button starts the code flow
(`SignInStartView`); the provider sends the browser back to
/oidc/callback/ (`SignInCallbackView`), where `SingleSignOnBackend` trades
the code (with the PKCE verifier) for tokens, checks the ID token (its
signature by the key the provider publishes, issuer, audience, expiry,
nonce) and hands the claims to `crm.services.sso.sso_sign_in`, which
decides who that is and on which teams. A refusal comes back to the login
page as a message that says why.

The discovery document is fetched once per process (and issuer) and kept:
endpoints do not move under a running server; a restart reads them again.
`LocalPasswordsGate` is the LOCAL_PASSWORDS=false side: a password then
signs in a superuser (the operator's break-glass account) and nobody else.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from crm.services.sso import sso_sign_in

logger = logging.getLogger(__name__)

# Set on the request by the backend: why a sign-in was refused, for the login page.
REFUSAL = "leadops_sso_refusal"
UNVERIFIED = "Single sign-on could not be completed: the provider's answer did not check out. Try again; if it keeps failing, tell your administrator."  # noqa: E501
UNREACHABLE = "Single sign-on is unreachable just now (the provider did not answer). Try again in a minute."
# Seconds of clock difference with the provider tolerated on a token's times.
LEEWAY = 60


def sso_configured() -> bool:
    return bool(settings.OIDC_ISSUER)


@dataclass(frozen=True)
class Provider:
    """The endpoints the issuer's discovery document names."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str


class DiscoveryFailed(Exception):
    pass


_discovered: dict[str, Provider] = {}
_discovery_lock = threading.Lock()


def provider() -> Provider:
    """OIDC_ISSUER's endpoints, from its discovery document (fetched at the
    first call and kept for the process; a failure is not kept)."""
    issuer = settings.OIDC_ISSUER
    with _discovery_lock:
        if issuer not in _discovered:
            _discovered[issuer] = _discover(issuer)
        return _discovered[issuer]


def discovery_forget() -> None:
    """Read the discovery document again at the next sign-in (a provider
    that moved its endpoints; each test's provider)."""
    with _discovery_lock:
        _discovered.clear()


def _discover(issuer: str) -> Provider:
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise DiscoveryFailed(f"{url}: {exc}") from exc
    if not isinstance(document, dict):
        raise DiscoveryFailed(f"{url}: not a JSON object")
    # OpenID Connect Discovery 1.0, 4.3: the document must name the issuer
    # it was asked for, or tokens of another issuer could pass as its own.
    if str(document.get("issuer", "")).rstrip("/") != issuer:
        raise DiscoveryFailed(f"{url} names the issuer {document.get('issuer')!r}, not {issuer!r}")
    missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not document.get(k)]
    if missing:
        raise DiscoveryFailed(f"{url} names no {', '.join(missing)}")
    return Provider(
        # As the document spells it: tokens carry it so (Authentik's ends in a slash).
        issuer=str(document["issuer"]),
        authorization_endpoint=document["authorization_endpoint"],
        token_endpoint=document["token_endpoint"],
        jwks_uri=document["jwks_uri"],
        userinfo_endpoint=document.get("userinfo_endpoint") or "",
    )


def _refuse(request: HttpRequest, reason: str) -> None:
    setattr(request, REFUSAL, reason)


def is_sso_attempt(request: HttpRequest, credentials: dict[str, Any] | None) -> bool:
    """django-axes' whitelist: a sign-in callback (it carries the nonce the
    callback view passes), never a password."""
    return credentials is not None and "nonce" in credentials and "password" not in credentials


def _issuers(issuer: str) -> list[str]:
    # Google's ID tokens may name their issuer without the scheme (its documentation says so).
    if issuer == "https://accounts.google.com":
        return [issuer, "accounts.google.com"]
    return [issuer]


class SingleSignOnBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, configured per sign-in from discovery,
    that checks the ID token fully and leaves the decision to the service."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Django builds every backend for every sign-in (passwords too): read
        # nothing here, and fetch nothing, until a callback asks.
        self.UserModel = get_user_model()

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        # Only the callback view passes a nonce: a password sign-in never gets here.
        if request is None or not sso_configured() or "nonce" not in kwargs:
            return None
        try:
            found = provider()
        except DiscoveryFailed as exc:
            logger.error("single sign-on: discovery failed: %s", exc)
            _refuse(request, UNREACHABLE)
            return None
        self.OIDC_OP_TOKEN_ENDPOINT = found.token_endpoint
        self.OIDC_OP_USER_ENDPOINT = found.userinfo_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = found.jwks_uri
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        try:
            return super().authenticate(request, **kwargs)
        except requests.RequestException as exc:
            # The token endpoint's refusal (a wrong or reused code, a PKCE
            # verifier that does not match) or no answer.
            logger.warning("single sign-on: the provider refused or failed: %s", exc)
            _refuse(request, UNVERIFIED)
        except (SuspiciousOperation, jwt.PyJWTError) as exc:
            logger.warning("single sign-on: token refused: %s", exc)
            _refuse(request, UNVERIFIED)
        return None

    def _verify_jws(self, payload: Any, key: Any) -> Any:
        """The token's signature by the provider's key, and what the library
        leaves unchecked: that the provider issued it (iss), for us (aud),
        recently (iat) and not past its expiry (exp)."""
        alg = jwt.get_unverified_header(payload).get("alg")
        if alg != self.OIDC_RP_SIGN_ALGO:
            raise SuspiciousOperation(f"token signed with {alg!r}, not {self.OIDC_RP_SIGN_ALGO}")
        return jwt.decode(
            payload,
            key,
            algorithms=[self.OIDC_RP_SIGN_ALGO],
            audience=self.OIDC_RP_CLIENT_ID,
            issuer=_issuers(provider().issuer),
            leeway=LEEWAY,
            options={"require": ["iss", "aud", "exp", "iat", "sub"]},
        )

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The ID token's claims, completed by the userinfo endpoint's: some
        providers put a custom claim in one only (Microsoft Entra's app roles
        are in the ID token alone). The signed token wins where both speak."""
        if not self.OIDC_OP_USER_ENDPOINT:
            return dict(payload)
        userinfo = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload.get("sub"):
            # OpenID Connect Core 5.3.2: a userinfo answer about someone else is not used.
            raise SuspiciousOperation("userinfo names another subject than the ID token")
        return {**userinfo, **payload}

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        claims = self.get_userinfo(access_token, id_token, payload)
        outcome = sso_sign_in(
            claims,
            issuer=settings.OIDC_ISSUER,
            match_claim=settings.OIDC_USERNAME_CLAIM,
            role_claim=settings.OIDC_ROLE_CLAIM,
        )
        if outcome.refusal:
            _refuse(self.request, outcome.refusal)
        return outcome.user

    def get_user(self, user_id: Any) -> Any:
        # Django's (the library's own skips `is_active`): a user switched off
        # in LeadOps loses a session opened through the provider too.
        return ModelBackend.get_user(self, user_id)


class LocalPasswordsGate:
    """With LOCAL_PASSWORDS=false, a password signs in a superuser only.

    Listed before ModelBackend: refusing raises PermissionDenied, which ends
    Django's `authenticate` (a failed login, counted by django-axes). A
    refused password is hashed all the same, so the answer takes as long
    for a team member as for a name nobody has. No `get_user`: it never
    holds a session (and Django's test client's `force_login` takes the
    first backend that has one)."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> None:
        if settings.LOCAL_PASSWORDS or username is None or password is None:
            return None
        user_model = get_user_model()
        user = user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username}).first()
        if user is not None and user.is_superuser:
            return None  # on to ModelBackend, which checks the password
        user_model().set_password(password)
        raise PermissionDenied("local passwords are off")


def _login_page(request: HttpRequest) -> str:
    return reverse("admin:login")


class SignInStartView(OIDCAuthenticationRequestView):
    """/oidc/authenticate/: off (404) without OIDC_ISSUER; else the library's
    redirect to the provider, with the endpoint from discovery."""

    def __init__(self, **kwargs: Any) -> None:
        # The library's reads the endpoint from settings here; it comes from discovery in `get`.
        View.__init__(self, **kwargs)

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not sso_configured():
            raise Http404("single sign-on is off")
        response: HttpResponse = super().dispatch(request, *args, **kwargs)
        return response

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            found = provider()
        except DiscoveryFailed as exc:
            logger.error("single sign-on: discovery failed: %s", exc)
            messages.error(request, UNREACHABLE)
            return HttpResponseRedirect(_login_page(request))
        self.OIDC_OP_AUTH_ENDPOINT = found.authorization_endpoint
        self.OIDC_RP_CLIENT_ID = settings.OIDC_CLIENT_ID
        return super().get(request)


class SignInCallbackView(OIDCAuthenticationCallbackView):
    """/oidc/callback/: off (404) without OIDC_ISSUER; a refusal goes back to
    the login page with its reason, a sign-in to where it was headed."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not sso_configured():
            raise Http404("single sign-on is off")
        response: HttpResponse = super().dispatch(request, *args, **kwargs)
        return response

    @property
    def failure_url(self) -> str:
        return _login_page(self.request)

    @property
    def success_url(self) -> str:
        # Checked for this host when the sign-in started (the library's get_next_url).
        return self.request.session.get("oidc_login_next") or reverse("admin:index")

    def login_failure(self) -> HttpResponse:
        reason = getattr(self.request, REFUSAL, "")
        if not reason and self.request.GET.get("error"):
            # The provider's own refusal (the person cancelled, or may not use this app).
            reason = f"Your provider did not sign you in ({self.request.GET['error'][:60]})."
        messages.error(self.request, reason or UNVERIFIED)
        return HttpResponseRedirect(self.failure_url)


# mozilla-django-oidc's own URL names (its views reverse them), without its
# logout page: it needs LOGOUT_REDIRECT_URL, which would also change the
# admin's. Signing out is the admin's: it ends the LeadOps session (the
# provider's own session is the provider's).
urlpatterns = [
    path("authenticate/", SignInStartView.as_view(), name="oidc_authentication_init"),
    path("callback/", SignInCallbackView.as_view(), name="oidc_authentication_callback"),
]
