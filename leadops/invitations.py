"""The page an invitation's link opens: a new team member sets their password.

GET shows Django's SetPasswordForm (the configured password validators say
what a password needs); a good POST sets it, accepts the invitation (which
lets the member into the back office), signs them in and sends them to
/app/. A link that no longer works (expired, used, garbled, or its member's
membership ended) answers 410 with a page that says to ask for a new one:
never which of those it was.
"""

from __future__ import annotations

from django.contrib.auth import login
from django.contrib.auth.forms import SetPasswordForm
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters

from crm.services.invitations import invitation_accept, invitation_user

# The one backend that signs in by password (the other only throttles).
_BACKEND = "django.contrib.auth.backends.ModelBackend"


def _gone(request: HttpRequest) -> HttpResponse:
    return render(request, "leadops/invitation_invalid.html", status=410)


@sensitive_post_parameters("new_password1", "new_password2")
@never_cache
def invitation_page(request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
    user = invitation_user(uidb64, token)
    if user is None:
        return _gone(request)
    form = SetPasswordForm(user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            # Checked again under the user's lock: of two posts of one link, the second finds it used.
            if invitation_user(uidb64, token, lock=True) is None:
                return _gone(request)
            form.save()
            invitation_accept(user)
        login(request, user, backend=_BACKEND)
        return redirect("/app/")
    return render(request, "leadops/invitation.html", {"form": form, "username": user.get_username()})
