"""Every page speaks the viewer's time zone: their own, else their business's,
else UTC, and names it; storage and the API stay UTC."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from agents.reporting.daily_brief import brief_build, brief_text
from crm.localtime import stored_times_localized, when
from crm.models import Business, Role, Task, TeamMember
from crm.selectors import viewer_zone
from crm.services.business_file import BusinessFileError, business_file_load
from crm.services.records import task_create
from tests.factories import BusinessFactory, UserFactory, lead_create, member_create

pytestmark = pytest.mark.django_db

# Thursday 15 January 2026, 15:30 UTC: 09:30 in Chicago (CST), 08:30 in Denver (MST).
INSTANT = datetime(2026, 1, 15, 15, 30, tzinfo=UTC)


def client_for(member_or_user: Any) -> Client:
    user = member_or_user.user if isinstance(member_or_user, TeamMember) else member_or_user
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def denver_setter(business: Business) -> TeamMember:
    return member_create(business, Role.SETTER, username="dana", timezone="America/Denver")


@pytest.fixture
def denver_manager(business: Business) -> TeamMember:
    return member_create(business, Role.MANAGER, username="dmitri", timezone="America/Denver")


@pytest.fixture
def due_task(business: Business, setter: TeamMember) -> Task:
    lead = lead_create(business)
    return task_create(lead=lead, title="Call Pat back", due_at=INSTANT, actor="test", owner=setter)


# --- whose zone ---------------------------------------------------------------


def test_a_member_without_a_zone_of_their_own_reads_the_business_zone(setter):
    assert str(viewer_zone(setter.user)) == "America/Chicago"


def test_a_member_with_a_zone_reads_their_own(denver_setter):
    assert str(viewer_zone(denver_setter.user)) == "America/Denver"


def test_a_zone_of_ones_own_on_a_later_membership_beats_the_first_business_zone(business):
    member = member_create(business, Role.SETTER, username="two-teams")
    phoenix = BusinessFactory.create(slug="phx", name="Phoenix Air", timezone="America/Phoenix")
    TeamMember.objects.create(business=phoenix, user=member.user, role=Role.SETTER, timezone="America/Denver")
    assert str(viewer_zone(member.user)) == "America/Denver"


def test_the_first_active_membership_decides_and_an_inactive_one_does_not_count(business):
    early = BusinessFactory.create(slug="early", name="Early Co", timezone="America/New_York")
    member = member_create(early, Role.SETTER, username="moved", is_active=False)
    TeamMember.objects.create(business=business, user=member.user, role=Role.SETTER)
    assert str(viewer_zone(member.user)) == "America/Chicago"


def test_an_operator_on_no_team_and_a_stranger_read_utc(db):
    operator = UserFactory.create(username="root", is_superuser=True)
    stranger = UserFactory.create(username="nobody-here")
    assert str(viewer_zone(operator)) == "UTC"
    assert str(viewer_zone(stranger)) == "UTC"


def test_an_operator_on_a_team_reads_that_teams_zone(business):
    operator = UserFactory.create(username="root-on-team", is_superuser=True)
    TeamMember.objects.create(business=business, user=operator, role=Role.MANAGER)
    assert str(viewer_zone(operator)) == "America/Chicago"


def test_a_zone_zoneinfo_does_not_know_is_refused_on_the_member_and_the_business(business):
    member = TeamMember(business=business, user=UserFactory.create(username="mars"), role="setter")
    member.timezone = "Mars/Olympus_Mons"
    with pytest.raises(ValidationError) as refused:
        member.full_clean()
    assert "timezone" in refused.value.message_dict
    business.timezone = "Chicago"
    with pytest.raises(ValidationError) as refused:
        business.full_clean()
    assert "timezone" in refused.value.message_dict


TEAM_FILE = """\
business: {slug: zoned, name: Zoned Air, timezone: America/Chicago}
team:
  - {username: remote-rae, name: Rae Remote, role: setter, timezone: %s}
"""


def test_the_business_file_sets_a_members_zone_and_refuses_a_made_up_one(db, tmp_path: Path):
    path = tmp_path / "zoned.yaml"
    path.write_text(TEAM_FILE % "America/Denver")
    business_file_load(path)
    rae = TeamMember.objects.get(user__username="remote-rae")
    assert rae.timezone == "America/Denver" and str(viewer_zone(rae.user)) == "America/Denver"
    path.write_text(TEAM_FILE % "America/Boulder")
    with pytest.raises(BusinessFileError, match="line 3: bad time zone 'America/Boulder'"):
        business_file_load(path)


# --- pages ----------------------------------------------------------------------


def test_a_chicago_setter_sees_the_due_time_in_chicago_with_the_zone_named(due_task, setter):
    page = client_for(setter).get(reverse("my-next-actions")).content.decode()
    assert "2026-01-15 09:30 CST" in page
    assert "15:30" not in page
    assert 'id="viewer-zone"' in page and "America/Chicago" in page


def test_a_denver_member_sees_the_same_instant_on_denver_time(due_task, denver_manager):
    lead = due_task.lead
    page = client_for(denver_manager).get(reverse("admin:crm_lead_change", args=[lead.pk])).content.decode()
    # The lead's timeline: the task's due time, and the zone in the header.
    assert "due 2026-01-15 08:30 MST" in page
    assert "America/Denver" in page


def test_the_admin_changelist_shows_times_in_the_viewers_zone(business, manager):
    lead = lead_create(business)
    type(lead).objects.filter(pk=lead.pk).update(created_at=INSTANT)
    page = client_for(manager).get(reverse("admin:crm_lead_changelist")).content.decode()
    assert "Jan. 15, 2026, 9:30 a.m." in page  # Django's own format, in Chicago
    assert "America/Chicago" in page


def test_an_operator_on_no_team_reads_utc_named_utc(due_task):
    operator = UserFactory.create(username="root", is_superuser=True)
    page = client_for(operator).get(reverse("admin:crm_lead_change", args=[due_task.lead.pk])).content.decode()
    assert "due 2026-01-15 15:30 UTC" in page
    assert "Times in <strong>UTC</strong>" in page


def test_a_time_typed_into_a_form_is_read_in_the_viewers_zone(business, denver_setter):
    lead = lead_create(business, phone="+12125550148")
    task = task_create(lead=lead, title="First call", due_at=INSTANT, actor="test", owner=denver_setter)
    response = client_for(denver_setter).post(
        reverse("task-complete", args=[task.public_id]),
        {"outcome": "Spoke to Pat", "next_title": "Send the quote", "next_due": "2026-01-16T09:00"},
    )
    assert response.status_code == 302
    follow_up = Task.objects.get(lead=lead, status="open")
    assert follow_up.due_at == datetime(2026, 1, 16, 16, 0, tzinfo=UTC)  # 09:00 MST


def test_the_api_speaks_utc_whoever_asks(business, setter):
    lead = lead_create(business)
    type(lead).objects.filter(pk=lead.pk).update(created_at=INSTANT, owner=setter)
    body = client_for(setter).get(f"/api/v1/leads/{lead.public_id}/").json()
    assert body["created_at"] == "2026-01-15T15:30:00Z"


def test_our_own_pages_carry_the_product_name_and_the_user_tools(setter):
    page = client_for(setter).get(reverse("my-next-actions")).content.decode()
    assert "<title>My next actions | LeadOps</title>" in page
    assert ">LeadOps</a>" in page and "Django administration" not in page
    assert 'id="logout-form"' in page


def test_a_public_page_loads_no_session_for_the_zone(db):
    response = Client().get(reverse("healthz"))
    assert "Cookie" not in response.get("Vary", "")


def test_the_emailed_brief_speaks_the_members_zone_and_names_it(due_task, setter):
    TeamMember.objects.filter(pk=setter.pk).update(timezone="America/Denver")
    setter.refresh_from_db()
    brief = brief_build(setter, now=datetime(2026, 1, 16, 15, 0, tzinfo=UTC))
    assert [i.title for i in brief.items] == ["Overdue since Thu 08:30: Call Pat back"]
    assert "Times in America/Denver (MST)." in brief_text(brief).splitlines()


# --- text -----------------------------------------------------------------------


def test_stored_utc_text_is_shown_on_the_readers_clock():
    from zoneinfo import ZoneInfo

    chicago = ZoneInfo("America/Chicago")
    text = "sms sending since 2026-01-15 15:30 UTC, 1 dispatch attempt(s)"
    assert stored_times_localized(text, chicago) == "sms sending since 2026-01-15 09:30 CST, 1 dispatch attempt(s)"
    receipt = "next_action_due_at: None → 2026-01-15T15:30:00.123Z; starts_at: 2026-01-15T09:30:00-06:00"
    assert stored_times_localized(receipt, chicago) == (
        "next_action_due_at: None → 2026-01-15 09:30 CST; starts_at: 2026-01-15 09:30 CST"
    )
    assert when(INSTANT, zone=ZoneInfo("America/Denver")) == "2026-01-15 08:30 MST"
    assert when(None) == "—"
