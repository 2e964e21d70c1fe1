"""Optional two-factor sign-in for owners and managers (django-otp, TOTP).

An owner or a manager may add an authenticator app at /account/two-factor/:
scan the code (or type the key), confirm with one code, and from then on a
password alone signs them in to nothing. After the password, every page and
session-signed API call waits at /account/verify/ for a six-digit code;
django-otp marks the session verified (`django_otp.login`) and throttles
wrong codes per device. Whether a user has a confirmed device is read once at
sign-in into the session (`TWO_FACTOR`), so a page costs no query for it.
API tokens are not sessions: a token stands on its own (expiring, revocable).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import django_otp
import qrcode
import qrcode.image.svg
from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django_otp.plugins.otp_totp.models import TOTPDevice

from crm.models import Role
from crm.permissions import grants_for

# In the session: whether the signed-in user has a confirmed device.
TWO_FACTOR = "leadops_two_factor"
DEVICE_NAME = "authenticator"
# Where an unverified session may still go: signing in and out, the code itself, what is not a page.
_OPEN = ("/account/verify/", "/admin/login/", "/admin/logout/", "/static/", "/healthz/", "/hooks/", "/f/", "/favicon")


def may_use_two_factor(user: Any) -> bool:
    grants = grants_for(user)
    return grants.everything or any(m.role in (Role.OWNER, Role.MANAGER) for m in grants.memberships)


def two_factor_at_login(sender: object, request: HttpRequest | None = None, user: Any = None, **kwargs: object) -> None:
    """`user_logged_in`: note in the new session whether a code is needed."""
    if request is not None and user is not None:
        request.session[TWO_FACTOR] = django_otp.user_has_device(user, confirmed=True)


class TwoFactorMiddleware:
    """Sends a signed-in user with a confirmed device to /account/verify/
    until their session is verified (a session-signed API call, or a
    fragment htmx asks for, gets a 403: never the code page swapped into a
    badge).
    After AuthenticationMiddleware and django-otp's OTPMiddleware."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        # Without a session cookie nobody is signed in: no session is loaded
        # (it would add `Vary: Cookie` to public pages).
        if settings.SESSION_COOKIE_NAME not in request.COOKIES:
            return self.get_response(request)
        session = getattr(request, "session", None)
        user = getattr(request, "user", None)
        if (
            session is not None
            and session.get(TWO_FACTOR)
            and user is not None
            and user.is_authenticated
            and not user.is_verified()
            and not request.path_info.startswith(_OPEN)
        ):
            if request.path_info.startswith("/api/") or request.headers.get("HX-Request"):
                return JsonResponse(
                    {"error": "forbidden", "detail": "Enter your authenticator code at /account/verify/ first."},
                    status=403,
                )
            return redirect(f"{reverse('two-factor-verify')}?next={quote(request.get_full_path())}")
        return self.get_response(request)


class CodeForm(forms.Form):
    code = forms.RegexField(
        regex=r"^\s*\d{6}\s*$",
        label="Code from your authenticator app",
        error_messages={"invalid": "Six digits, as the app shows them."},
        widget=forms.TextInput(attrs={"autocomplete": "one-time-code", "inputmode": "numeric", "autofocus": True}),
    )


def _next(request: HttpRequest) -> str:
    wanted = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return wanted
    return reverse("home")


@login_required
def verify(request: HttpRequest) -> HttpResponse:
    """The second step of signing in: one code from the app."""
    form = CodeForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        device = django_otp.match_token(request.user, form.cleaned_data["code"].strip())
        if device is not None:
            django_otp.login(request, device)
            return redirect(_next(request))
        form.add_error("code", "That code is not right (or came too late). Try the one the app shows now.")
    return render(request, "leadops/two_factor_verify.html", {"form": form, "next": _next(request)})


@login_required
def setup(request: HttpRequest) -> HttpResponse:
    """Add (or remove) an authenticator app: owners and managers only."""
    user = request.user
    if not may_use_two_factor(user):
        raise PermissionDenied("Two-step sign-in is for owners and managers.")
    confirmed = TOTPDevice.objects.filter(user=user, confirmed=True).first()
    form = CodeForm(request.POST or None)
    if confirmed is not None:
        if request.method == "POST" and form.is_valid():
            if confirmed.verify_token(form.cleaned_data["code"].strip()):
                TOTPDevice.objects.filter(user=user).delete()
                request.session[TWO_FACTOR] = False
                messages.success(request, "Two-step sign-in is off: your password alone signs you in.")
                return redirect("two-factor-setup")
            form.add_error("code", "That code is not right: two-step sign-in stays on.")
        return render(request, "leadops/two_factor_setup.html", {"form": form, "on": True})
    device = TOTPDevice.objects.filter(user=user, confirmed=False).first() or TOTPDevice.objects.create(
        user=user, name=DEVICE_NAME, confirmed=False
    )
    if request.method == "POST" and form.is_valid():
        if device.verify_token(form.cleaned_data["code"].strip()):
            device.confirmed = True
            device.save(update_fields=["confirmed"])
            django_otp.login(request, device)
            request.session[TWO_FACTOR] = True
            messages.success(request, "Two-step sign-in is on: from now on you sign in with a code as well.")
            return redirect("two-factor-setup")
        form.add_error("code", "That code is not right: check the app's clock and try the code it shows now.")
    image = qrcode.make(device.config_url, image_factory=qrcode.image.svg.SvgPathImage, box_size=8)
    context = {
        "form": form,
        "on": False,
        "qr": image.to_string(encoding="unicode"),
        "key": base64.b32encode(device.bin_key).decode(),
    }
    return render(request, "leadops/two_factor_setup.html", context)
