"""The fixtures of the sync tests: the booking ground (tests/helpers/booking.py),
Jobber's stand-in (tests/helpers/jobber.py) and a connection to it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from crm.models import Business, Role, SyncConnection, TeamMember
from crm.services.sync import connection_connect
from tests.factories import member_create
from tests.helpers.booking import (  # noqa: F401 - fixtures: pytest finds them here
    lead,
    rule,
    shop,
    tech,
    templates,
)
from tests.helpers.jobber import ACCOUNT_ID, JobberServer, jobber_running


@pytest.fixture
def jobber(settings: Any) -> Iterator[JobberServer]:
    with jobber_running(settings) as server:
        yield server


@pytest.fixture
def owner(business: Business) -> TeamMember:
    return member_create(business, Role.OWNER, username="olivia")


@pytest.fixture
def connection(business: Business, jobber: JobberServer, manager: TeamMember) -> SyncConnection:
    """The shop connected to the stand-in's account, as the OAuth callback leaves it."""
    tokens = jobber.grant()
    return connection_connect(
        business,
        provider="jobber",
        account_id=ACCOUNT_ID,
        account_name="Acme (Jobber)",
        access_token=tokens["access_token"],
        refresh_token=tokens["refresh_token"],
        expires_at=timezone.now() + timedelta(hours=1),
        actor="olivia",
    )
