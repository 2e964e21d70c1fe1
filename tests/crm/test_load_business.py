from __future__ import annotations

from datetime import time
from decimal import Decimal
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command

from crm.models import (
    Business,
    MessageTemplate,
    Receipt,
    Sequence,
    ServiceArea,
    ServiceLine,
    Source,
    TeamMember,
)

pytestmark = pytest.mark.django_db

User = get_user_model()

FILE = """\
business:
  slug: acme
  name: Acme Heating & Air
  timezone: America/Chicago
  region: US
sources:
  - {key: site, provider: website, secret: "site-secret"}
  - {key: fb, provider: meta, page_id: "100000000000001", access_token: "page-token"}
  - {key: main-line, provider: twilio, phone_number: "+15555550100", forward_to: "(312) 555-0199"}
service_lines:
  - {slug: hvac, name: HVAC, keywords: [furnace, "heat pump"], high_value: 10000}
  - {slug: plumbing, name: Plumbing}
service_areas:
  - {name: Metro, postal_codes: ["60601", "606*"]}
team:
  - username: sam
    name: Sam Setter
    email: Sam@Example.com
    phone: "+15555550111"
    role: setter
    service_lines: [hvac]
    service_areas: [Metro]
    weight: 2
    max_open_leads: 50
    hours: {mon: "08:00-18:00", fri: "08:00-17:00"}
  - {username: mia, name: Mia Manager, email: mia@example.com, role: manager}
policy: {first_response_minutes: 7, quiet_hours: "09:00-20:00", dedupe_window_days: 14, max_texts_per_day: 2}
templates:
  - {key: ack_sms, channel: sms, approved: true, body: "Hi {first_name}, we got your request."}
  - {key: nudge_sms, channel: sms, body: "Still there?"}
  - {key: details_email, channel: email, subject: "Your request", body: "Details inside."}
sequences:
  - key: no_reply
    trigger: no_reply
    steps:
      - {after: 15m, channel: sms, template: nudge_sms}
      - {after: 1d, channel: task, title: Call the lead}
      - {after: 2d, channel: email, template: details_email}
availability:
  - {members: [sam], days: [mon, tue], slots: ["09:00-11:00", "13:00-15:00"], capacity: 1}
"""


def write(tmp_path: Path, text: str, name: str = "acme.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load(path: Path) -> str:
    out = StringIO()
    call_command("load_business", str(path), stdout=out)
    return out.getvalue()


def line_of(text: str, fragment: str) -> int:
    """The 1-based line of the first line containing `fragment`."""
    return next(n for n, line in enumerate(text.splitlines(), start=1) if fragment in line)


def counts() -> dict[str, int]:
    models: list[Any] = [
        Business,
        Source,
        ServiceLine,
        ServiceArea,
        TeamMember,
        MessageTemplate,
        Sequence,
        Receipt,
        User,
    ]
    return {model.__name__: model.objects.count() for model in models}


def snapshot(slug: str) -> dict[str, Any]:
    """Every row a load writes, every column (updated_at included)."""
    business = Business.objects.get(slug=slug)
    team = TeamMember.objects.filter(business=business)
    return {
        "business": list(Business.objects.filter(pk=business.pk).values()),
        "sources": list(Source.objects.filter(business=business).order_by("pk").values()),
        "service_lines": list(ServiceLine.objects.filter(business=business).order_by("pk").values()),
        "service_areas": list(ServiceArea.objects.filter(business=business).order_by("pk").values()),
        "templates": list(MessageTemplate.objects.filter(business=business).order_by("pk").values()),
        "sequences": list(Sequence.objects.filter(business=business).order_by("pk").values()),
        "team": list(team.order_by("pk").values()),
        "team_lines": list(
            TeamMember.service_lines.through.objects.filter(teammember__in=team).order_by("pk").values()
        ),
        "team_areas": list(
            TeamMember.service_areas.through.objects.filter(teammember__in=team).order_by("pk").values()
        ),
        "users": list(User.objects.filter(memberships__in=team).order_by("pk").values()),
        "groups": list(User.groups.through.objects.filter(user__memberships__in=team).order_by("pk").values()),
        "receipts": Receipt.objects.filter(business=business).count(),
    }


def test_loading_a_file_creates_the_business_and_everything_it_lists(tmp_path: Path) -> None:
    output = load(write(tmp_path, FILE))

    business = Business.objects.get(slug="acme")
    assert (business.name, business.timezone, business.region) == ("Acme Heating & Air", "America/Chicago", "US")
    assert (business.first_response_minutes, business.dedupe_window_days, business.max_texts_per_day) == (7, 14, 2)
    assert (business.quiet_hours_start, business.quiet_hours_end) == (time(9, 0), time(20, 0))

    sources = {s.key: s for s in Source.objects.filter(business=business)}
    assert set(sources) == {"site", "fb", "main-line"}
    assert (sources["site"].provider, sources["site"].secret, sources["site"].config) == ("website", "site-secret", {})
    assert sources["fb"].config == {"page_id": "100000000000001"}
    assert sources["fb"].page_token == "page-token"
    assert sources["main-line"].config == {"phone_number": "+15555550100", "forward_to": "+13125550199"}

    hvac = ServiceLine.objects.get(business=business, slug="hvac")
    assert (hvac.name, hvac.keywords, hvac.high_value_amount) == ("HVAC", ["furnace", "heat pump"], Decimal("10000.00"))
    assert ServiceLine.objects.get(business=business, slug="plumbing").high_value_amount is None
    metro = ServiceArea.objects.get(business=business, name="Metro")
    assert metro.postal_codes == ["60601", "606*"]

    sam = TeamMember.objects.get(business=business, user__username="sam")
    assert (sam.role, sam.display_name, sam.email, sam.phone) == (
        "setter",
        "Sam Setter",
        "sam@example.com",
        "+15555550111",
    )
    assert (sam.weight, sam.max_open_leads, sam.timezone) == (2, 50, "")
    assert sam.hours == {"mon": "08:00-18:00", "fri": "08:00-17:00"}
    assert list(sam.service_lines.all()) == [hvac]
    assert list(sam.service_areas.all()) == [metro]
    assert not sam.user.has_usable_password()
    assert list(sam.user.groups.values_list("name", flat=True)) == ["setter"]
    mia = TeamMember.objects.get(business=business, user__username="mia")
    assert (mia.role, mia.weight, mia.max_open_leads) == ("manager", 1, None)
    assert list(mia.user.groups.values_list("name", flat=True)) == ["manager"]

    ack = MessageTemplate.objects.get(business=business, key="ack_sms")
    assert (ack.channel, ack.approved, ack.body) == ("sms", True, "Hi {first_name}, we got your request.")
    email = MessageTemplate.objects.get(business=business, key="details_email")
    assert (email.subject, email.approved) == ("Your request", False)

    sequence = Sequence.objects.get(business=business, key="no_reply")
    assert sequence.trigger == "no_reply"
    assert sequence.steps == [
        {"after": "15m", "channel": "sms", "template": "nudge_sms"},
        {"after": "1d", "channel": "task", "title": "Call the lead"},
        {"after": "2d", "channel": "email", "template": "details_email"},
    ]

    receipt = Receipt.objects.get(business=business)
    assert (receipt.actor, receipt.action, receipt.subject) == ("load_business", "business.loaded", business.public_id)
    assert receipt.after["created"] == {
        "business": 1,
        "source": 3,
        "service line": 2,
        "service area": 1,
        "template": 3,
        "sequence": 1,
        "team member": 2,
        "availability rule": 1,
    }
    assert "availability: 1 rules in the file" in output


def test_loading_the_same_file_twice_changes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, FILE)
    load(path)
    before = snapshot("acme")

    output = load(path)

    assert snapshot("acme") == before
    assert "nothing changed" in output
    assert "availability: 1 rules in the file" in output


def test_a_changed_file_updates_only_what_changed_and_writes_one_receipt(tmp_path: Path) -> None:
    load(write(tmp_path, FILE))
    before = snapshot("acme")
    changed = (
        FILE.replace("    weight: 2\n", "    weight: 3\n")
        .replace("service_lines: [hvac]", "service_lines: [hvac, plumbing]")
        .replace('body: "Still there?"', 'body: "Still looking for help?"')
        .replace('secret: "site-secret"', 'secret: "rotated-secret"')
    )

    output = load(write(tmp_path, changed))

    after = snapshot("acme")
    assert after["business"] == before["business"], "business fields did not change, so updated_at stays put"
    sam = TeamMember.objects.get(business__slug="acme", user__username="sam")
    assert sam.weight == 3
    assert set(sam.service_lines.values_list("slug", flat=True)) == {"hvac", "plumbing"}
    assert MessageTemplate.objects.get(business__slug="acme", key="nudge_sms").body == "Still looking for help?"
    assert Source.objects.get(key="site").secret == "rotated-secret"
    assert after["team"][1] == before["team"][1], "mia's row is untouched"
    assert after["receipts"] == before["receipts"] + 1
    receipt = Receipt.objects.filter(business__slug="acme").order_by("-id").first()
    assert receipt is not None
    assert receipt.after["updated"] == {"source": 1, "template": 1, "team member": 1}
    assert "team member sam: weight, service_lines" in receipt.after["changes"]
    assert "rotated-secret" not in str(receipt.after), "secrets never reach the audit trail"
    assert "updated 1 source, 1 team member, 1 template" in output
    assert "created" not in output


def test_a_changed_policy_updates_the_business(tmp_path: Path) -> None:
    load(write(tmp_path, FILE))
    before = Business.objects.get(slug="acme").updated_at

    load(write(tmp_path, FILE.replace('quiet_hours: "09:00-20:00"', 'quiet_hours: "08:30-21:00"')))

    business = Business.objects.get(slug="acme")
    assert (business.quiet_hours_start, business.quiet_hours_end) == (time(8, 30), time(21, 0))
    assert business.updated_at > before


def test_a_new_role_moves_the_user_to_that_group(tmp_path: Path) -> None:
    load(write(tmp_path, FILE))

    load(write(tmp_path, FILE.replace("role: manager", "role: owner")))

    mia = User.objects.get(username="mia")
    assert list(mia.groups.values_list("name", flat=True)) == ["owner"]


def test_an_existing_user_joins_the_team_with_their_password_kept(tmp_path: Path) -> None:
    user = User.objects.create_user(username="sam", password="kept-password-1")

    load(write(tmp_path, FILE))

    user.refresh_from_db()
    assert user.check_password("kept-password-1")
    assert TeamMember.objects.filter(business__slug="acme", user=user, role="setter").exists()


ERRORS = [
    pytest.param(
        ("    weight: 2\n", "    weight: 2\n    colour: blue\n"),
        "colour: blue",
        "unknown key 'colour' in team member",
        id="unknown key",
    ),
    pytest.param(
        ("timezone: America/Chicago", "timezone: America/Gotham"),
        "America/Gotham",
        "bad time zone 'America/Gotham'",
        id="bad time zone",
    ),
    pytest.param(('phone: "+15555550111"', 'phone: "12"'), 'phone: "12"', "bad phone '12'", id="bad phone"),
    pytest.param(
        ("service_lines: [hvac]", "service_lines: [roofing]"),
        "[roofing]",
        "unknown service line 'roofing'",
        id="unknown service line",
    ),
    pytest.param(
        ("service_areas: [Metro]", "service_areas: [Suburbs]"),
        "[Suburbs]",
        "unknown service area 'Suburbs'",
        id="unknown service area",
    ),
    pytest.param(
        ("template: nudge_sms", "template: nudge_sms_v2"),
        "nudge_sms_v2",
        "unknown template 'nudge_sms_v2'",
        id="unknown template",
    ),
    pytest.param(("role: manager", "role: boss"), "role: boss", "bad role 'boss'", id="bad role"),
    pytest.param(("provider: website", "provider: myspace"), "myspace", "bad provider 'myspace'", id="bad provider"),
    pytest.param(
        ("members: [sam]", "members: [tom]"),
        "members: [tom]",
        "unknown team member 'tom'",
        id="bad availability member",
    ),
    pytest.param(("days: [mon, tue]", "days: [mon, tues]"), "tues", "bad day 'tues'", id="bad day"),
    pytest.param(("after: 15m", "after: soon"), "after: soon", "bad 'after' 'soon'", id="bad step delay"),
    pytest.param(("channel: task", "channel: fax"), "channel: fax", "bad channel 'fax'", id="bad step channel"),
    pytest.param(
        ("    weight: 2\n", "    weight: two\n"),
        "weight: two",
        "'weight' in team member must be a whole number",
        id="wrong type",
    ),
    pytest.param(
        ("  - {username: mia, ", "  - {"), "Mia Manager", "missing key 'username' in team member", id="missing key"
    ),
    pytest.param(("{key: fb,", "{key: site,"), "key: site, provider: meta", "duplicate source 'site'", id="duplicate"),
    pytest.param(
        ('quiet_hours: "09:00-20:00"', 'quiet_hours: "9am-8pm"'), "9am-8pm", "time range", id="bad time range"
    ),
]


@pytest.mark.parametrize(("edit", "at", "reason"), ERRORS)
def test_a_bad_file_is_refused_with_its_line_and_writes_nothing(
    tmp_path: Path, edit: tuple[str, str], at: str, reason: str
) -> None:
    old, new = edit
    assert old in FILE
    text = FILE.replace(old, new, 1)
    path = write(tmp_path, text)
    rows = counts()

    with pytest.raises(CommandError) as refused:
        load(path)

    message = str(refused.value)
    assert f"line {line_of(text, at)}: " in message
    assert reason in message
    assert str(path) in message
    assert counts() == rows


def test_an_unknown_key_is_named_with_its_exact_line(tmp_path: Path) -> None:
    text = """\
business: {slug: acme, name: Acme, timezone: America/Chicago}
team:
  - username: sam
    role: setter
    name: Sam
    weight: 1
    colour: blue
"""
    with pytest.raises(CommandError, match=r"line 7: unknown key 'colour' in team member"):
        load(write(tmp_path, text))
    assert not Business.objects.filter(slug="acme").exists()
    assert not User.objects.filter(username="sam").exists()


def test_a_yaml_alias_bomb_is_refused_at_its_line_before_it_expands(tmp_path: Path) -> None:
    # Nine aliases per level, nine levels: 1.7 KB that expands to 387 million
    # strings (it took 4 GB and minutes to die with a MemoryError).
    levels = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    levels += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 9)]
    text = "business: {slug: acme, name: Acme, timezone: America/Chicago}\n" + "\n".join(levels) + "\n"
    with pytest.raises(CommandError, match=r"line 3: aliases \(\*a0\) are not allowed"):
        load(write(tmp_path, text))
    assert not Business.objects.filter(slug="acme").exists()


def test_a_file_over_the_size_cap_is_refused_unread(tmp_path: Path) -> None:
    text = "business: {slug: acme, name: Acme, timezone: America/Chicago}\n# " + "x" * (600 * 1024) + "\n"
    with pytest.raises(CommandError, match=r"larger than 512 KB"):
        load(write(tmp_path, text))


def test_a_refused_update_rolls_back_the_changes_made_before_the_error(tmp_path: Path) -> None:
    load(write(tmp_path, FILE))
    before = snapshot("acme")
    text = (
        FILE.replace('secret: "site-secret"', 'secret: "rotated-secret"')
        .replace("name: Acme Heating & Air", "name: Acme Renamed")
        .replace("username: mia,", "username: max,")
        .replace("members: [sam]", "members: [sam, nobody]")
    )

    with pytest.raises(CommandError, match=r"line \d+: unknown team member 'nobody' in availability rule"):
        load(write(tmp_path, text))

    assert snapshot("acme") == before
    assert not User.objects.filter(username="max").exists()


def test_a_source_key_of_another_business_is_refused(tmp_path: Path, other_business: Business) -> None:
    Source.objects.create(business=other_business, key="site", provider="website", secret="theirs")
    rows = counts()

    with pytest.raises(CommandError, match=r"line 7: source key 'site' is already in use by another business"):
        load(write(tmp_path, FILE))

    assert counts() == rows
    assert Source.objects.get(key="site").secret == "theirs"


def test_a_reference_may_name_a_row_the_business_already_has(tmp_path: Path) -> None:
    load(write(tmp_path, FILE))
    # hvac, Metro and nudge_sms are not in this file: they come from the first load.
    text = """\
business: {slug: acme, name: Acme Heating & Air, timezone: America/Chicago}
team:
  - {username: sara, role: setter, service_lines: [hvac], service_areas: [Metro]}
sequences:
  - {key: no_show, trigger: no_show, steps: [{after: 30m, channel: sms, template: nudge_sms}]}
"""

    load(write(tmp_path, text, "more.yaml"))

    sara = TeamMember.objects.get(business__slug="acme", user__username="sara")
    assert list(sara.service_lines.values_list("slug", flat=True)) == ["hvac"]
    assert list(sara.service_areas.values_list("name", flat=True)) == ["Metro"]
    assert Sequence.objects.get(business__slug="acme", key="no_show").steps[0]["template"] == "nudge_sms"
    assert Source.objects.filter(business__slug="acme").count() == 3, "rows the file does not list are left alone"
    assert Business.objects.get(slug="acme").first_response_minutes == 7, "a missing policy section keeps the policy"


def test_invalid_yaml_is_refused_with_its_line(tmp_path: Path) -> None:
    text = FILE.replace("  region: US\n", "  region: [US\n")

    with pytest.raises(CommandError, match=r"line \d+: not valid YAML"):
        load(write(tmp_path, text))
    assert not Business.objects.exists()


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="cannot read the file"):
        load(tmp_path / "nope.yaml")


def test_the_roles_used_by_the_loader_exist_as_groups() -> None:
    assert set(Group.objects.values_list("name", flat=True)) >= {"setter", "owner", "manager", "technician"}
