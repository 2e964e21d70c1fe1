"""A manager turns on two-step sign-in and signs in again with a code, in a
real browser (the QR code, the key, the code box, the redirect back)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from django_otp.oath import TOTP
from django_otp.plugins.otp_totp.models import TOTPDevice

from crm.models import Role
from tests.browser.test_back_office import log_in
from tests.factories import BusinessFactory, member_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def code_now(device: TOTPDevice) -> str:
    device.refresh_from_db()
    return f"{TOTP(device.bin_key, device.step, device.t0, device.digits, device.drift).token():06d}"


def test_a_manager_turns_on_two_step_sign_in_and_signs_in_with_a_code(live_server, browser_context, shots):
    business = BusinessFactory.create(slug="acme", name="Acme Heating & Air")
    mia = member_create(business, Role.MANAGER, username="mia")
    base = live_server.url
    page = browser_context.new_page()
    log_in(page, base, "mia")
    page.goto(f"{base}/account/two-factor/")
    page.wait_for_selector("#two-factor-qr svg")
    page.screenshot(path=str(shots / "two-factor-setup.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    page.screenshot(path=str(shots / "two-factor-setup-phone.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 720})
    device = TOTPDevice.objects.get(user=mia.user)
    assert page.inner_text("#two-factor-key").strip()
    page.fill("input[name=code]", code_now(device))
    page.click("#two-factor-confirm")
    page.wait_for_selector("#two-factor-off")
    assert "On." in page.inner_text("#two-factor-setup")

    # Signing in again: the password, then the code, then where they were going.
    other = browser_context.browser.new_context()
    try:
        second = other.new_page()
        log_in_to_code = f"{base}/admin/login/?next=/app/inbox/"
        second.goto(log_in_to_code)
        second.fill("#id_username", "mia")
        second.fill("#id_password", "pw-for-tests-1")
        second.click("input[type=submit]")
        second.wait_for_selector("#two-factor-verify")
        second.screenshot(path=str(shots / "two-factor-verify.png"), full_page=True)
        # A minute on (this process's clock, the live server's too): a code never used before.
        with time_machine.travel(timezone.now() + timedelta(seconds=65), tick=True):
            second.fill("input[name=code]", code_now(device))
            second.click("#verify-submit")
            second.wait_for_url(f"{base}/app/inbox/")
    finally:
        other.close()
