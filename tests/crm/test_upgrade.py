"""An upgrade keeps the data: a database at the previous release's schema
(crm 0052, before invitations) migrates forward with its leads, messages and
receipts whole, and its receipt chain still verifies."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from crm.models import Business, Role
from crm.services import lead_sync
from crm.services.next_action import next_action_set
from tests.factories import lead_create, member_create
from tests.helpers.migration_paths import migrate_by_originals

# The previous release's migration heads (what `git show 496289e:crm/migrations/` lists).
PREVIOUS = [("crm", "0052_message_deferral_reason")]
TABLES = ("crm_lead", "crm_contact", "crm_receipt", "crm_task")


def _counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        counts = {}
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM {table}")
            counts[table] = int(cursor.fetchone()[0])
        return counts


@pytest.mark.django_db(transaction=True)
def test_the_previous_release_migrates_forward_without_loss() -> None:
    business = Business.objects.create(slug="upg", name="Upgrade Co", timezone="America/Chicago", region="US")
    setter = member_create(business, Role.SETTER)
    for n in range(3):
        lead = lead_sync.lead_assign(
            lead_create(business, first_name=f"Pat{n}", phone=f"+1212555015{n}"), setter, actor="t", reason="t"
        )
        next_action_set(lead, "Call", timezone.now() + timedelta(hours=1), actor="t", reason="t")
    before = _counts()
    # Down to the previous release with the data in it, and forward again.
    migrate_by_originals(connection, PREVIOUS)
    try:
        assert "crm_invitation" not in connection.introspection.table_names()
        assert _counts() == before
    finally:
        migrate_by_originals(connection)
    assert _counts() == before
    call_command("verify_receipts", stdout=StringIO())
    call_command("audit_leads", stdout=StringIO())
