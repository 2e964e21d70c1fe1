"""What people notice around the workspace: each role lands on its own page,
refusals and missing pages in the product's look, a favicon, and the
person's number and email one tap away."""

from __future__ import annotations

import pytest
from django.test import Client

from crm.models import Business, Role, TeamMember
from crm.services import lead_sync
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db


def _client(member: TeamMember) -> Client:
    client = Client()
    client.force_login(member.user)
    return client


def test_a_technician_lands_on_their_visits_not_a_bare_403(business: Business) -> None:
    tom = _client(member_create(business, Role.TECHNICIAN, username="tom"))
    assert tom.get("/app/")["Location"] == "/admin/crm/appointment/"


def test_a_page_outside_the_role_is_a_friendly_403_with_the_way_back(business: Business) -> None:
    response = _client(member_create(business, Role.TECHNICIAN, username="tom")).get("/app/inbox/")
    page = response.content.decode()
    assert response.status_code == 403
    assert "This page is not part of your role" in page and 'href="/app/"' in page
    assert "workspace/workspace" in page, "in the workspace's look"


def test_a_missing_page_is_a_404_in_the_products_look(setter: TeamMember) -> None:
    response = _client(setter).get("/app/leads/lead_nothing/")
    assert response.status_code == 404
    assert "Nothing here" in response.content.decode()


def test_the_favicon_is_served_where_browsers_ask_for_it() -> None:
    response = Client().get("/favicon.ico", follow=True)
    assert response.redirect_chain[0][1] == 301
    assert response.status_code == 200 and response["Content-Type"] == "image/svg+xml"


def test_the_persons_phone_and_email_are_a_tap_away_in_the_thread(business: Business, setter: TeamMember) -> None:
    lead = lead_create(business, phone="+12125550147", email="rosa.diaz@example.com")
    lead_sync.lead_assign(lead, setter, actor="t", reason="t")
    page = _client(setter).get(f"/app/leads/{lead.public_id}/").content.decode()
    assert 'href="tel:+12125550147"' in page and 'href="mailto:rosa.diaz@example.com"' in page


@pytest.mark.parametrize(
    ("role", "shown", "hidden"),
    [
        (Role.SETTER, {"nav-brief", "nav-exceptions"}, {"nav-revenue"}),
        (Role.TECHNICIAN, {"nav-brief"}, {"nav-revenue", "nav-exceptions", "nav-funnel", "nav-leaks", "nav-inbox"}),
        (Role.MANAGER, {"nav-revenue", "nav-exceptions", "nav-inbox"}, set()),
    ],
)
def test_the_back_offices_navigation_shows_only_what_the_role_opens(
    business: Business, role: str, shown: set[str], hidden: set[str]
) -> None:
    page = _client(member_create(business, role, username="someone")).get("/admin/my/next-actions/").content.decode()
    for link in shown:
        assert f'id="{link}"' in page, link
    for link in hidden:
        assert f'id="{link}"' not in page, link
