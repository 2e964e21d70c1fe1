"""One set of rules for a business's settings, whether typed in the business
file or in the admin (crm.validation, called from the models' clean()):
names without invisible characters, exact embed origins, service lines of
distinct names. Each refusal names where: the file's line, the form's field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from crm.models import Business, Role, ServiceLine
from crm.validation import name_refusal, origin_refusal
from tests.factories import BusinessFactory, member_create

pytestmark = pytest.mark.django_db

RLO = "\u202e"
ZWSP = "\u200b"

FILE = """\
business:
  slug: acme
  name: {name}
  timezone: America/Chicago
  region: US
service_lines:
  - {{slug: hvac, name: HVAC}}
  - {{slug: heating, name: {second}}}
policy: {{embed_origins: [{origin}]}}
"""


def load(tmp_path: Path, *, name="Acme Heating", second="Heating", origin="https://acme.example") -> str:
    path = tmp_path / "acme.yaml"
    path.write_text(FILE.format(name=json.dumps(name), second=json.dumps(second), origin=json.dumps(origin)))
    call_command("load_business", str(path))
    return path.read_text()


@pytest.mark.parametrize(
    ("value", "why"),
    [(f"Acme{RLO}riA", "bidirectional override"), (f"Ac{ZWSP}me", "zero-width space"), ("Acme\x07", "control")],
)
def test_a_name_with_an_invisible_character_is_refused(value, why):
    assert why in (name_refusal(value) or "")
    assert name_refusal("Acme Heating & Air — Niños") is None


@pytest.mark.parametrize(
    ("origin", "why"),
    [
        ("https://*.com", "wildcard"),
        ("https://*.acme.example", "wildcard"),
        ("http://acme.example", "https"),
        ("https://acme.example/form", "origin alone"),
        ("https://user@acme.example", "origin alone"),
        ("javascript:alert(1)", "https"),
    ],
)
def test_an_embed_origin_is_one_exact_https_site(origin, why):
    assert why in (origin_refusal(origin) or "")
    assert origin_refusal("https://acme.example") is None and origin_refusal("https://acme.example:8443") is None
    assert origin_refusal("http://localhost:8000") is None  # a developer's machine


def test_the_business_file_refuses_each_rule_at_its_line(tmp_path):
    with pytest.raises(CommandError, match=r"line 2: business refused: name: The name contains a bidirectional"):
        load(tmp_path, name=f"Acme{RLO} Heating")
    with pytest.raises(CommandError, match=r"line 8: .*name: The name contains a zero-width space"):
        load(tmp_path, second=f"Heat{ZWSP}ing")
    with pytest.raises(CommandError, match=r"line 9: bad origin 'https://\*.com' in embed_origins: a wildcard"):
        load(tmp_path, origin="https://*.com")
    with pytest.raises(CommandError, match=r"line 8: .*already has a service line of that name"):
        load(tmp_path, second="hvac")
    assert not Business.objects.filter(slug="acme").exists(), "every refusal rolled the whole load back"
    load(tmp_path)
    assert ServiceLine.objects.filter(business__slug="acme").count() == 2


def test_the_admin_refuses_the_same_rules_on_its_forms():
    business = BusinessFactory.create(slug="acme", name="Acme")
    owner = member_create(business, Role.OWNER, username="olivia")
    client = Client()
    client.force_login(owner.user)
    url = f"/admin/crm/business/{business.pk}/change/"
    form = client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and not isinstance(v, (list, dict))}
    data.update(
        name=f"Acme{RLO} Air",
        timezone="America/Chicago",
        embed_origins=json.dumps(["https://*.com"]),
        contact_countries=json.dumps([]),
    )
    page = client.post(url, data).content.decode()
    assert "The name contains a bidirectional override" in page
    assert "a wildcard would let any matching site frame the form" in page
    business.refresh_from_db()
    assert business.name == "Acme" and business.embed_origins == []

    ServiceLine.objects.create(business=business, slug="hvac", name="HVAC")
    page = client.post(
        "/admin/crm/serviceline/add/",
        {"business": business.pk, "slug": "hvac-2", "name": "hvac", "keywords": "[]", "offer_templates": "[]"},
    ).content.decode()
    assert "already has a service line of that name" in page
    assert ServiceLine.objects.filter(business=business).count() == 1


# The policy fields the admin shows as raw JSON: each shape the business
# file's parser would refuse, typed in the admin's form instead.
BAD_POLICY = {
    "business_hours": ({"mon": "nine to five"}, "'mon' in business_hours must be a time range"),
    "quiet_hours_by_state": ({"Florida": "08:00-20:00"}, "'Florida' is not a two-letter US state code"),
    "contact_countries": (["XX"], "bad country 'XX' in contact_countries"),
    "scope_keywords": ({"urgent": ["now"]}, "unknown flag 'urgent' in scope_keywords"),
    "fit_rules": ([{"rule": "vibes", "points": 5}], "bad rule 'vibes' in fit_rules"),
    "ai_auto_reply": (["revocation"], "bad intent 'revocation' in ai auto_reply"),
    "call_states": (["ZZ"], "'ZZ' in calls states is not a two-letter US state code"),
    "playbook": ({"booking_url": "javascript:alert(1)"}, "booking_url in playbook must be an http(s) URL"),
}


def test_the_admin_refuses_policy_json_the_business_file_would_refuse():
    """The raw JSON fields went through no rule in the admin: a state window
    keyed "Florida" was saved and silently never applied, a business_hours
    day of "nine to five" broke the SLA clock for every lead."""
    business = BusinessFactory.create(slug="acme", name="Acme", timezone="America/Chicago")
    owner = member_create(business, Role.OWNER, username="olivia")
    client = Client()
    client.force_login(owner.user)
    url = f"/admin/crm/business/{business.pk}/change/"
    form = client.get(url).context["adminform"].form
    base = {k: v for k, v in form.initial.items() if v is not None and not isinstance(v, (list, dict))}
    base.update({name: json.dumps(form.initial[name]) for name in BAD_POLICY})
    for field, (value, message) in BAD_POLICY.items():
        page = client.post(url, {**base, field: json.dumps(value)}).content.decode()
        assert message.replace("'", "&#x27;") in page, field
    business.refresh_from_db()
    assert all(getattr(business, field) == form.initial[field] for field in BAD_POLICY), "nothing was saved"

    good = {
        "business_hours": {"mon": "08:00-18:00", "sat": "09:00-24:00"},
        "quiet_hours_by_state": {"TX": "09:00-20:00"},
        "contact_countries": ["US", "CA"],
        "scope_keywords": {"emergency": ["flooding"]},
        "fit_rules": [{"rule": "in_area", "points": 30}],
        "ai_auto_reply": ["question"],
        "call_states": ["TX"],
        "playbook": {"booking_url": "https://acme.example/book", "facts": ["Family owned."]},
    }
    response = client.post(url, {**base, **{k: json.dumps(v) for k, v in good.items()}})
    assert response.status_code == 302
    business.refresh_from_db()
    assert {field: getattr(business, field) for field in good} == good
