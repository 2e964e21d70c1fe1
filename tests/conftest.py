from __future__ import annotations

import pytest

from crm.models import Business, Role, TeamMember
from tests.factories import BusinessFactory, member_create


@pytest.fixture
def business(db: None) -> Business:
    return BusinessFactory.create(slug="acme", name="Acme Heating & Air")


@pytest.fixture
def other_business(db: None) -> Business:
    return BusinessFactory.create(slug="other", name="Other Plumbing")


@pytest.fixture
def setter(business: Business) -> TeamMember:
    return member_create(business, Role.SETTER, username="sam")


@pytest.fixture
def manager(business: Business) -> TeamMember:
    return member_create(business, Role.MANAGER, username="mia")
