"""Every API view is throttled (leadops.api): past the rate a caller gets a
429 in the API's error shape with Retry-After, counted per user, so one
runaway token never slows another user down."""

from __future__ import annotations

import pytest
from django.urls import get_resolver
from rest_framework.test import APIClient
from rest_framework.views import APIView

from crm.models import Role
from leadops.api import AnonThrottle, UserThrottle
from tests.factories import member_create

pytestmark = pytest.mark.django_db


def _views(patterns, found=None):
    found = [] if found is None else found
    for pattern in patterns:
        if hasattr(pattern, "url_patterns"):
            _views(pattern.url_patterns, found)
        else:
            view = getattr(pattern.callback, "cls", None) or getattr(pattern.callback, "view_class", None)
            if isinstance(view, type) and issubclass(view, APIView):
                found.append((str(pattern.pattern), view))
    return found


def test_every_api_view_the_project_serves_is_throttled():
    views = _views(get_resolver().url_patterns)
    assert len(views) >= 20
    unthrottled = [route for route, view in views if not {UserThrottle, AnonThrottle} <= set(view.throttle_classes)]
    assert not unthrottled, unthrottled


def test_past_the_rate_a_user_gets_a_429_in_the_error_shape_and_another_user_does_not(business, settings):
    settings.API_THROTTLE_RATES = {"user": "5/minute", "anon": "5/minute"}
    runaway, other = (member_create(business, Role.MANAGER, username=name) for name in ("runaway", "calm"))
    clients = {}
    for member in (runaway, other):
        clients[member.user.username] = APIClient()
        clients[member.user.username].force_authenticate(member.user)
    answers = [clients["runaway"].get("/api/v1/leads/").status_code for _ in range(7)]
    assert answers == [200] * 5 + [429] * 2
    refused = clients["runaway"].get("/api/v1/leads/")
    assert refused.json()["error"] == "too_many_requests" and int(refused["Retry-After"]) > 0
    assert clients["calm"].get("/api/v1/leads/").status_code == 200


def test_the_schema_documents_the_429_every_operation_may_answer(business):
    """A client generated from the schema must expect the throttle's answer:
    a long schemathesis run met 125 undocumented 429s."""
    client = APIClient()
    client.force_authenticate(member_create(business, Role.OWNER, username="olivia").user)
    schema = client.get("/api/schema/", {"format": "json"}).json()
    operations = [
        (path, method, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]
    assert len(operations) >= 30
    undocumented = [f"{method.upper()} {path}" for path, method, op in operations if "429" not in op["responses"]]
    assert not undocumented, undocumented
    answer = operations[0][2]["responses"]["429"]
    assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    assert "Retry-After" in answer["headers"]
