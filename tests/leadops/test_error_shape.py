"""Errors where a program is the client (`/api/`, `/hooks/`) answer in the
API's shape, and bad input is a 4xx before anything else happens."""

from __future__ import annotations

import json

import pytest
from django.test import Client, RequestFactory
from django.urls import get_resolver

from crm.models import Source
from leadops import api
from tests.helpers.capture import website_source  # noqa: F401 - a fixture
from tests.helpers.twilio import twilio_settings, twilio_source  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db


@pytest.mark.usefixtures("website_source")
def test_a_signed_form_nested_fifty_thousand_levels_deep_is_a_400_not_a_500():
    source = Source.objects.get(provider="website")
    deep = "[" * 50_000 + "]" * 50_000
    response = Client(raise_request_exception=False).post(
        f"/hooks/forms/{source.key}/",
        data='{"first_name": "Ann", "answers": ' + deep + "}",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {source.secret}",
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]


@pytest.mark.usefixtures("twilio_settings", "twilio_source")
@pytest.mark.parametrize(
    "body",
    ["Body=a%00b&From=%2B12125550147", "Body=hi&From=%2B1212555%000147"],
)
def test_an_unsigned_twilio_request_with_a_nul_byte_is_refused_as_unsigned(body):
    response = Client(raise_request_exception=False).post(
        "/hooks/twilio/sms/", data=body, content_type="application/x-www-form-urlencoded", HTTP_X_TWILIO_SIGNATURE="x"
    )
    assert response.status_code == 403 and response.json()["error"] == "invalid_signature"


def test_a_path_under_hooks_that_nothing_serves_answers_in_the_error_shape():
    response = Client().post("/hooks/nothing-here/", data="{}", content_type="application/json")
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "detail": "No endpoint matches this path."}


@pytest.mark.parametrize("path", ["/api/v1/leads/", "/hooks/stripe/"])
def test_a_server_error_under_api_or_hooks_is_json_without_the_failure(path):
    handler = get_resolver().resolve_error_handler(500)
    assert handler is api.server_error
    response = handler(RequestFactory().get(path))
    assert response.status_code == 500
    assert json.loads(response.content) == {"error": "server_error", "detail": "The server failed; try again."}


def test_a_server_error_on_a_page_stays_a_page():
    response = api.server_error(RequestFactory().get("/app/inbox/"))
    assert response.status_code == 500 and b"<" in response.content
