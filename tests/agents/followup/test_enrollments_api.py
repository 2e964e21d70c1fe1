"""`GET /api/v1/enrollments/?lead=`: which paths a lead is on, and why one ended."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils.dateparse import parse_datetime
from rest_framework.test import APIClient

from agents.followup.sequences.engine import enrollment_start, enrollments_stop
from crm.models import Lead, Role, TeamMember
from tests.factories import member_create
from tests.helpers.followup import NOON_NY, make_lead

pytestmark = pytest.mark.django_db

FIELDS = {"id", "lead", "sequence", "sequence_key", "status", "stop_reason", "next_step_due_at"}


def client_for(member: TeamMember) -> APIClient:
    client = APIClient()
    client.force_login(member.user)
    return client


def test_a_leads_enrollments_with_their_status_and_stop_reason(lead: Lead, manager: TeamMember, playbook) -> None:
    first = enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    enrollments_stop(lead=lead, reason="reply", actor="test", now=NOON_NY + timedelta(minutes=5))

    response = client_for(manager).get("/api/v1/enrollments/", {"lead": lead.public_id})

    assert response.status_code == 200
    (row,) = response.json()["results"]
    assert set(row) == FIELDS
    assert (row["id"], row["lead"], row["sequence"], row["sequence_key"]) == (
        first.public_id,
        lead.public_id,
        playbook["no_reply"].public_id,
        "no_reply",
    )
    assert (row["status"], row["stop_reason"], row["next_step_due_at"]) == ("stopped", "reply", None)


def test_an_active_enrollment_shows_when_its_next_step_is_due(lead: Lead, manager: TeamMember) -> None:
    enrollment_start(lead, "no_reply", actor="test", now=NOON_NY)
    (row,) = client_for(manager).get("/api/v1/enrollments/", {"lead": lead.public_id}).json()["results"]
    assert row["status"] == "active" and row["stop_reason"] == ""
    assert parse_datetime(row["next_step_due_at"]) == NOON_NY + timedelta(minutes=15)


def test_a_setter_sees_only_the_enrollments_of_their_own_leads(
    business: Any, lead: Lead, owner: TeamMember, playbook, django_assert_max_num_queries: Any
) -> None:
    other_setter = member_create(business, Role.SETTER, username="sid")
    theirs = make_lead(business, other_setter, phone="+12125550148", email="b@example.com")
    for each in (lead, theirs):
        enrollment_start(each, "no_reply", actor="test", now=NOON_NY)
    client = client_for(owner)
    with django_assert_max_num_queries(8):
        rows = client.get("/api/v1/enrollments/").json()["results"]
    assert [r["lead"] for r in rows] == [lead.public_id]
    assert client.get("/api/v1/enrollments/", {"lead": theirs.public_id}).json()["results"] == []


def test_anonymous_requests_are_refused_with_the_error_shape(lead: Lead) -> None:
    response = APIClient().get("/api/v1/enrollments/")
    assert response.status_code in (401, 403)
    assert set(response.json()) == {"error", "detail"}
