"""A new business's owner comes in: the business file is loaded, the
invitation email arrives, its link opens the set-password page in a real
browser, and the owner lands in the workspace signed in."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core import mail

from crm.models import Invitation
from crm.services.business_file import business_file_load

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FILE = """\
business:
  slug: northwind
  name: Northwind Heating & Air
  timezone: America/Chicago
  region: US
team:
  - {username: olga, name: Olga Owner, email: olga@example.com, role: owner}
"""


def test_the_owner_opens_the_emailed_link_sets_a_password_and_lands_signed_in(
    live_server: Any, browser_context: Any, settings: Any, tmp_path: Path, shots: Path
) -> None:
    # The links in emails point at this server.
    settings.PUBLIC_BASE_URL = live_server.url
    path = tmp_path / "northwind.yaml"
    path.write_text(FILE, encoding="utf-8")

    business_file_load(path)  # commits; the email goes after the commit

    assert [m.to for m in mail.outbox] == [["olga@example.com"]]
    found = re.search(r"https?://\S+/account/invitation/\S+/", str(mail.outbox[0].body))
    assert found, mail.outbox[0].body
    page = browser_context.new_page()
    page.goto(found.group(0))
    page.wait_for_selector("#invitation")
    assert page.inner_text("#invitation-username") == "olga"
    page.screenshot(path=str(shots / "invitation.png"), full_page=True)
    page.fill("#id_new_password1", "a-long-fresh-passphrase-42")
    page.fill("#id_new_password2", "a-long-fresh-passphrase-42")
    page.click("#invitation-submit")

    # /app/ is the owner's inbox: signed in, no login page on the way.
    page.wait_for_url(f"{live_server.url}/app/inbox/")
    assert "/admin/login/" not in page.url
    olga = get_user_model().objects.get(username="olga")
    assert olga.is_staff and olga.has_usable_password()
    assert Invitation.objects.get(member__user=olga).accepted_at is not None

    # The link is spent: opened again, it says to ask for a new one.
    response = page.goto(found.group(0))
    assert response is not None and response.status == 410
    assert "new invitation" in page.inner_text("body")
