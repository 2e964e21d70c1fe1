"""Fixtures of the language-model tests: the providers are real local HTTP
servers (tests/helpers/llm.py) and the business is loaded from a business
file with its `ai` and `playbook` sections."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from crm.models import Business, Role, TeamMember
from crm.services.business_file import business_file_parse, business_spec_apply
from tests.factories import member_create
from tests.helpers.llm import ModelServer, model_server
from tests.helpers.twilio import LINE, twilio_settings  # noqa: F401 - a fixture: pytest finds it here

BUSINESS_FILE = f"""
business: {{slug: acme-ai, name: Acme Heating & Air, timezone: America/Chicago, region: US}}
sources:
  - {{key: main-line, provider: twilio, phone_number: "{LINE}"}}
service_lines:
  - slug: hvac
    name: HVAC
    keywords: [furnace, "air conditioner", ac]
    offer: "Free second opinion on any replacement quote"
service_areas:
  - {{name: Chicago Metro, postal_codes: ["606*"]}}
policy:
  # Wide open: what the gate says must not depend on the hour the tests run at.
  quiet_hours: "00:00-24:00"
  business_hours: {{mon: "08:00-18:00", tue: "08:00-18:00"}}
ai: {{enabled: true}}
playbook:
  booking_url: "https://acme.example/book"
  prices:
    - {{item: "Diagnostic visit", amount: 89, note: "credited toward the repair"}}
  facts:
    - "1-year labor warranty on repairs we make."
templates:
  - key: ack_sms
    channel: sms
    approved: true
    body: "Hi {{first_name}}, this is {{business}}. We got your request. Reply STOP to opt out."
"""


@pytest.fixture
def acme(db: None) -> Business:
    return business_spec_apply(business_file_parse(BUSINESS_FILE, path="acme-ai.yaml")).business


@pytest.fixture
def mia(acme: Business) -> TeamMember:
    return member_create(acme, Role.MANAGER, username="mia")


@pytest.fixture
def sam(acme: Business) -> TeamMember:
    return member_create(acme, Role.SETTER, username="sam")


@pytest.fixture(params=["openai", "anthropic"])
def model(request: pytest.FixtureRequest, settings: object) -> Iterator[ModelServer]:
    """Each wire format in turn, the LLM_* settings pointing at its server."""
    with model_server(settings, request.param) as server:
        yield server


@pytest.fixture
def openai_model(settings: object) -> Iterator[ModelServer]:
    with model_server(settings, "openai") as server:
        yield server
