"""The business file's `availability`: stored as rules, updated in place,
switched off (never deleted) when the file drops them."""

from __future__ import annotations

from pathlib import Path

import pytest

from crm.models import Availability, Business
from crm.services.business_file import BusinessFileError, business_file_load

pytestmark = pytest.mark.django_db

HEAD = """
business: {slug: acme, name: Acme, timezone: America/Chicago}
service_lines:
  - {slug: hvac, name: HVAC}
team:
  - {username: tom, role: technician}
  - {username: tia, role: technician}
"""


def load(tmp_path: Path, availability: str) -> list[str]:
    path = tmp_path / "acme.yaml"
    path.write_text(HEAD + availability, encoding="utf-8")
    return business_file_load(path).changes


def rules() -> list[tuple[list[str], list[str], list[str], int, bool, list[str]]]:
    return [
        (
            sorted(m.user.username for m in a.members.all()),
            a.days,
            a.slots,
            a.capacity,
            a.is_active,
            sorted(line.slug for line in a.service_lines.all()),
        )
        for a in Availability.objects.order_by("pk")
    ]


def test_rules_are_stored_and_a_second_load_changes_nothing(tmp_path):
    text = """availability:
  - {members: [tom], days: [mon, tue], slots: ["09:00-11:00", "13:00-15:00"], capacity: 1}
  - {members: [tom, tia], days: [sat], slots: ["10:00-12:00"], capacity: 2, service_lines: [hvac]}
"""
    changes = load(tmp_path, text)
    assert rules() == [
        (["tom"], ["mon", "tue"], ["09:00-11:00", "13:00-15:00"], 1, True, []),
        (["tia", "tom"], ["sat"], ["10:00-12:00"], 2, True, ["hvac"]),
    ]
    assert "availability rule tom mon,tue 09:00-11:00,13:00-15:00: created" in changes
    assert load(tmp_path, text) == []


def test_a_changed_capacity_updates_the_rule_and_a_dropped_rule_is_switched_off(tmp_path):
    load(
        tmp_path,
        """availability:
  - {members: [tom], days: [mon], slots: ["09:00-11:00"]}
  - {members: [tia], days: [tue], slots: ["09:00-11:00"]}
""",
    )
    first = Availability.objects.order_by("pk").first()
    changes = load(
        tmp_path,
        """availability:
  - {members: [tom], days: [mon], slots: ["09:00-11:00"], capacity: 3}
""",
    )
    assert Availability.objects.get(pk=first.pk).capacity == 3
    assert [r[4] for r in rules()] == [True, False]
    assert any(c.endswith(": capacity") for c in changes) and any(c.endswith(": is_active") for c in changes)


def test_a_file_without_availability_leaves_the_rules_alone(tmp_path):
    load(
        tmp_path,
        """availability:
  - {members: [tom], days: [mon], slots: ["09:00-11:00"]}
""",
    )
    load(tmp_path, "")
    assert [r[4] for r in rules()] == [True]


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ('{members: [nobody], days: [mon], slots: ["09:00-11:00"]}', "unknown team member 'nobody'"),
        ('{members: [tom], days: [mon], slots: ["09:00-11:00"], service_lines: [roofing]}', "unknown service line"),
        ('{members: [tom], days: [funday], slots: ["09:00-11:00"]}', "bad day 'funday'"),
        ('{members: [tom], days: [mon], slots: ["11:00-09:00"]}', "must end after it starts"),
        ('{members: [tom], days: [mon], slots: ["09:00-11:00"], capacity: 0}', "capacity"),
    ],
)
def test_a_bad_rule_is_refused_with_its_line_and_nothing_is_kept(tmp_path, rule, message):
    with pytest.raises(BusinessFileError, match=message):
        load(tmp_path, f"availability:\n  - {rule}\n")
    assert not Business.objects.filter(slug="acme").exists() and not Availability.objects.exists()
