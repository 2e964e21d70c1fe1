"""`manage.py flush`: crm's (a wipe past the receipts' TRUNCATE guard) and the
test runs' own between transactional tests (tests/management/commands/flush.py,
DELETE in place of TRUNCATE) both leave every table empty, then put back
what migrating puts there; a bare TRUNCATE of the receipts stays refused."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import ProgrammingError, connection, transaction
from django_q.models import Schedule

from agents.schedules import JOBS
from crm.management.commands.flush import Command as CrmFlush
from crm.models import Business, ConsentEvent, Receipt, Role
from crm.roles import ROLE_PERMISSIONS
from crm.services.consent import consent_record
from crm.services.receipts import receipt_write
from tests.factories import BusinessFactory, lead_create, member_create
from tests.management.commands import flush as runs_flush

pytestmark = pytest.mark.django_db(transaction=True)


def fill() -> Business:
    business = BusinessFactory.create(slug="acme", name="Acme")
    member_create(business, Role.MANAGER, username="mia")
    point = lead_create(business).contact.points.get()
    consent_record(contact_point=point, channel="sms", granted=True, basis="manual", actor="t", evidence={})
    receipt_write(business=business, actor="t", action="t.noted", subject="x")
    Group.objects.all().delete()
    Schedule.objects.all().delete()
    return business


def non_empty_tables() -> set[str]:
    tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
    filled = set()
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {connection.ops.quote_name(table)})")
            if cursor.fetchone()[0]:
                filled.add(table)
    return filled


def assert_wiped_and_migrated() -> None:
    assert not Business.objects.exists() and not Receipt.objects.exists() and not ConsentEvent.objects.exists()
    # What post_migrate puts back: content types, permissions, the role groups, the periodic jobs.
    assert set(Group.objects.values_list("name", flat=True)) == set(ROLE_PERMISSIONS)
    assert set(Schedule.objects.values_list("name", flat=True)) == {job.name for job in JOBS}
    assert non_empty_tables() == {
        "auth_group",
        "auth_group_permissions",
        "auth_permission",
        "django_content_type",
        "django_q_schedule",
    }


def assert_bare_truncate_refused() -> None:
    with pytest.raises(ProgrammingError, match="TRUNCATE refused"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("TRUNCATE crm_receipt CASCADE")


@pytest.mark.parametrize("reset_sequences", [True, False])
def test_crms_flush_wipes_the_receipts_past_their_guard_and_puts_the_migrated_rows_back(reset_sequences):
    fill()

    call_command(CrmFlush(), interactive=False, verbosity=0, reset_sequences=reset_sequences, stdout=StringIO())

    assert_wiped_and_migrated()
    assert_bare_truncate_refused()  # the session's permission ended with the flush


def test_the_flush_between_transactional_tests_leaves_what_crms_flush_leaves():
    fill()

    # As Django's TransactionTestCase calls it after each test.
    call_command(
        "flush", interactive=False, verbosity=0, reset_sequences=False, allow_cascade=False, inhibit_post_migrate=False
    )

    assert_wiped_and_migrated()
    assert_bare_truncate_refused()
    # The row triggers it did not fire are still on.
    business = BusinessFactory.create(slug="acme", name="Acme")
    receipt_write(business=business, actor="t", action="t.noted", subject="x")
    with pytest.raises(ProgrammingError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM crm_receipt")


def test_the_test_runs_flush_is_the_one_django_finds() -> None:
    from django.core.management import get_commands, load_command_class

    assert isinstance(load_command_class(get_commands()["flush"], "flush"), runs_flush.Command)
