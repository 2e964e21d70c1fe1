"""The business file's routing and SLA keys."""

from __future__ import annotations

from datetime import time

import pytest

from agents.fit.qualify import RULE_NAMES
from crm.models import Business, ServiceLine, Source
from crm.services.business_file import BusinessFileError, business_file_parse, business_spec_apply
from crm.services.business_file.parsing import FIT_RULES

pytestmark = pytest.mark.django_db

BASE = """\
business: {slug: acme, name: Acme, timezone: America/Chicago}
sources:
  - {key: gads, provider: google_ads, secret: "k", first_response_minutes: 2}
service_lines:
  - {slug: hvac, name: HVAC, offer: "Free second opinion", offer_templates: [ack_sms]}
policy:
  first_response_minutes: 5
  business_hours: {mon: "08:00-18:00", sat: "09:00-12:00"}
  sla_reassign_on_breach: true
  fit_rules: [{rule: in_area, points: 40}, {rule: warranty, points: -20}]
  scope_keywords: {emergency: ["no hot water"]}
  brief_hour: 6
"""


def test_routing_keys_load_onto_the_business_its_sources_and_lines() -> None:
    business_spec_apply(business_file_parse(BASE))
    business = Business.objects.get(slug="acme")
    assert business.business_hours == {"mon": "08:00-18:00", "sat": "09:00-12:00"}
    assert business.sla_reassign_on_breach and business.brief_hour == 6
    assert business.fit_rules == [{"rule": "in_area", "points": 40}, {"rule": "warranty", "points": -20}]
    assert business.scope_keywords == {"emergency": ["no hot water"]}
    assert Source.objects.get(key="gads").first_response_minutes == 2
    line = ServiceLine.objects.get(slug="hvac")
    assert (line.offer, line.offer_templates) == ("Free second opinion", ["ack_sms"])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("fit_rules: [{rule: vibes, points: 3}]", "bad fit rule 'vibes'"),
        ("fit_rules: [{rule: in_area, points: lots}]", "points of fit rule in_area must be a whole number"),
        ("brief_hour: 24", "brief_hour must be an hour from 0 to 23"),
        ('business_hours: {mon: "18:00-08:00"}', "mon"),
        ('business_hours: {mon: "24:00-08:00"}', "mon"),
        ("scope_keywords: {spooky: [ghost]}", "spooky"),
    ],
)
def test_bad_routing_keys_are_refused_with_the_line(bad: str, message: str) -> None:
    text = BASE.split("policy:")[0] + "policy:\n  " + bad + "\n"
    with pytest.raises(BusinessFileError, match=message) as caught:
        business_file_parse(text)
    assert "line 7" in str(caught.value)


def test_a_day_may_be_open_until_midnight() -> None:
    """A 24/7 emergency line: "00:00-24:00" is open all day, to its last minute."""
    text = BASE.replace(
        'business_hours: {mon: "08:00-18:00", sat: "09:00-12:00"}', 'business_hours: {mon: "00:00-24:00"}'
    )
    text = text.replace("first_response_minutes: 5", 'first_response_minutes: 5\n  quiet_hours: "09:00-24:00"')
    business_spec_apply(business_file_parse(text))
    business = Business.objects.get(slug="acme")
    assert business.business_hours == {"mon": "00:00-24:00"}
    assert (business.quiet_hours_start, business.quiet_hours_end) == (time(9, 0), time.max)


def test_the_loader_and_the_scorer_agree_on_the_rule_names() -> None:
    assert set(FIT_RULES) == RULE_NAMES
