"""The admin's index groups models by what people do, never losing one."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client

from crm.models import Business, Role, TeamMember
from leadops.admin_site import GROUPS
from tests.factories import member_create

pytestmark = pytest.mark.django_db


def headings(html: str) -> list[str]:
    return re.findall(r'<caption>\s*<span class="section">([^<]+)</span>', html)


def signed_in(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


def test_an_operator_sees_every_registered_model_once_in_the_groups() -> None:
    """Each model once, under its group, in words (no "lead touchs")."""
    operator = get_user_model().objects.create_superuser("root", "root@example.com", "a-long-passphrase-1")

    page = signed_in(operator).get("/admin/")

    html = page.content.decode()
    assert headings(html) == ["Leads and people", "Money", "Team and settings", "Behind the scenes"]
    listed = re.findall(r'<th scope="row" id="[a-z]+-([a-z]+)">', html)
    registered = sorted(model._meta.object_name.lower() for model in admin.site._registry)
    # Each model once: none lost to a group, none shown twice.
    assert sorted(listed) == registered
    # Every model a group names is a registered one (a renamed model would silently drop out).
    names = {f"{m._meta.app_label}.{m._meta.object_name}" for m in admin.site._registry}
    assert {key for _slug, _heading, keys in GROUPS for key in keys} <= names
    assert "Lead touches" in html and "Rejected deliveries" in html


def test_a_setter_sees_only_the_groups_of_what_they_may_open(business: Business, setter: TeamMember) -> None:
    setter.user.is_staff = True
    setter.user.save()

    html = signed_in(setter.user).get("/admin/").content.decode()

    assert headings(html)[0] == "Leads and people"
    assert "Team and settings" not in headings(html)
    assert 'href="/admin/crm/lead/"' in html
    # The sales side sees the money of its leads; the ad platforms' uploads are the leaders.
    money = html.split('<span class="section">Money</span>', 1)[1].split("</table>", 1)[0]
    assert 'href="/admin/crm/job/"' in money
    assert "/admin/crm/conversionupload/" not in html


def test_an_owner_finds_the_team_page_under_team_and_settings(business: Business) -> None:
    owner = member_create(business, Role.OWNER, username="olive")
    owner.user.is_staff = True
    owner.user.save()

    html = signed_in(owner.user).get("/admin/").content.decode()

    team = html.split('<span class="section">Team and settings</span>', 1)[1].split("</table>", 1)[0]
    assert 'href="/admin/crm/teammember/"' in team


def test_an_apps_own_page_keeps_djangos_listing() -> None:
    operator = get_user_model().objects.create_superuser("root", "root@example.com", "a-long-passphrase-1")

    page = signed_in(operator).get("/admin/crm/")

    assert page.status_code == 200
    assert headings(page.content.decode()) == []
    assert 'href="/admin/crm/lead/"' in page.content.decode()
