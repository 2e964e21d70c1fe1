"""Optional two-step sign-in for owners and managers (django-otp TOTP):
adding an app, signing in with a code, wrong codes refused, and a user
without an app signing in with the password alone."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from django_otp.oath import TOTP
from django_otp.plugins.otp_totp.models import TOTPDevice

from crm.models import Role
from tests.factories import member_create

pytestmark = pytest.mark.django_db


def code_for(device: TOTPDevice) -> str:
    """The code the app shows now."""
    totp = TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift)
    return f"{totp.token():06d}"


def signed_in(member) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def test_a_manager_adds_an_app_confirms_it_with_a_code_and_then_needs_one_to_sign_in(business):
    mia = member_create(business, Role.MANAGER, username="mia")
    client = signed_in(mia)
    page = client.get("/account/two-factor/").content.decode()
    assert "<svg" in page and 'id="two-factor-key"' in page
    device = TOTPDevice.objects.get(user=mia.user, confirmed=False)
    assert client.post("/account/two-factor/", {"code": "000000" if code_for(device) != "000000" else "111111"})
    assert not TOTPDevice.objects.get(pk=device.pk).confirmed, "a wrong code confirms nothing"
    device.refresh_from_db()
    assert client.post("/account/two-factor/", {"code": code_for(device)}).status_code == 200, (
        "right after a wrong code the device waits (django-otp's throttle)"
    )
    with time_machine.travel(timezone.now() + timedelta(seconds=5)):
        device.refresh_from_db()
        assert client.post("/account/two-factor/", {"code": code_for(device)}).status_code == 302
    assert TOTPDevice.objects.get(pk=device.pk).confirmed
    assert client.get("/app/inbox/").status_code == 200, "the session that confirmed is verified"

    # A new sign-in: the password is no longer enough, anywhere.
    later = signed_in(mia)
    answer = later.get("/app/inbox/")
    assert answer.status_code == 302 and answer["Location"].startswith("/account/verify/?next=/app/inbox/")
    assert later.get("/admin/").status_code == 302
    refused = later.get("/api/v1/leads/")
    assert refused.status_code == 403 and "authenticator code" in refused.json()["detail"]
    wrong = later.post("/account/verify/", {"code": "12345x", "next": "/app/inbox/"})
    assert wrong.status_code == 200 and "Six digits" in wrong.content.decode()
    # A minute on: a code the app shows then, never the one already used.
    with time_machine.travel(timezone.now() + timedelta(seconds=65)):
        device.refresh_from_db()
        right = later.post("/account/verify/", {"code": code_for(device), "next": "/app/inbox/"})
        assert right.status_code == 302 and right["Location"] == "/app/inbox/"
        assert later.get("/app/inbox/").status_code == 200 and later.get("/api/v1/leads/").status_code == 200


def test_a_user_without_an_app_signs_in_with_the_password_alone(business):
    olivia = member_create(business, Role.OWNER, username="olivia")
    assert signed_in(olivia).get("/app/inbox/").status_code == 200


def test_the_verify_page_sends_nobody_to_another_site(business):
    mia = member_create(business, Role.MANAGER, username="mia")
    device = TOTPDevice.objects.create(user=mia.user, name="authenticator", confirmed=True)
    client = signed_in(mia)
    answer = client.post("/account/verify/", {"code": code_for(device), "next": "https://evil.example/"})
    assert answer.status_code == 302 and answer["Location"] == "/"


def test_two_step_sign_in_is_for_owners_and_managers(business):
    sam = member_create(business, Role.SETTER, username="sam")
    assert signed_in(sam).get("/account/two-factor/").status_code == 403
    assert not TOTPDevice.objects.exists()
