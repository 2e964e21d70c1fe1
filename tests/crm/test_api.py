"""The read API (its OpenAPI schema: /api/schema/): fields, filters, scoping, auth, query counts, schema."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from crm.models import (
    Business,
    ConsentEvent,
    ConsentState,
    ContactPoint,
    InboundEvent,
    Lead,
    Message,
    Role,
    Stage,
    TeamMember,
)
from crm.services.lead_sync import lead_assign, lead_flag_exception, lead_set_hold, lead_set_next_action
from crm.services.records import task_create
from tests.factories import BusinessFactory, UserFactory, lead_create, member_create

# A marketplace thread's consent: only the person's own STOP there.
MARKETPLACES = {"thumbtack": "unknown", "yelp": "unknown"}

pytestmark = pytest.mark.django_db

LEAD_FIELDS = {
    "id",
    "business",
    "stage",
    "owner",
    "next_action",
    "next_action_due_at",
    "sla_due_at",
    "hold",
    "exceptions",
    "created_at",
    "contact",
    "touches",
}
CONTACT_FIELDS = {"id", "name", "phones", "emails", "consent"}
TOUCH_FIELDS = {
    "channel",
    "provider",
    "received_at",
    "campaign_id",
    "adgroup_id",
    "ad_id",
    "form_id",
    "gclid",
    "fbclid",
    "utm",
}


# ------------------------------------------------------------------ helpers


def client_for(member: TeamMember | Any) -> APIClient:
    """A session-authenticated client, so each request loads the user afresh."""
    client = APIClient()
    client.force_login(member.user if isinstance(member, TeamMember) else member)
    return client


def get(client: APIClient, url: str, **params: Any) -> Any:
    response = client.get(url, params)
    assert response.status_code == 200, response.content
    return response.json()


def ids(page: dict[str, Any]) -> set[str]:
    return {row["id"] for row in page["results"]}


def assigned_lead(business: Business, owner: TeamMember, **kw: Any) -> Lead:
    lead = lead_create(business, **kw)
    return lead_assign(lead, owner, actor="test", reason="routing")


def consent_record(point: ContactPoint, channel: str, action: str, *, basis: str = "manual") -> ConsentEvent:
    # No consent service exists yet: write the ledger row and the derived
    # state the way the model says they are written, in one go.
    event = ConsentEvent.objects.create(
        business=point.business,
        contact_point=point,
        channel=channel,
        action=action,
        basis=basis,
        evidence={"note": f"{action} in a test"},
        actor="test",
        at=timezone.now(),
    )
    ConsentState.objects.update_or_create(
        contact_point=point,
        channel=channel,
        defaults={"status": "granted" if action == "grant" else "revoked", "last_event": event, "updated_at": event.at},
    )
    return event


def inbound_event(business: Business | None, external_id: str, provider: str = "twilio") -> InboundEvent:
    return InboundEvent.objects.create(
        business=business, provider=provider, external_id=external_id, body=b"{}", received_at=timezone.now()
    )


def inbound_message(lead: Lead, body: str) -> Message:
    return Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        direction="in",
        channel="sms",
        status=Message.Status.RECEIVED,
        body=body,
        from_number="+12125550147",
        to="+15555550100",
    )


def is_iso_with_offset(value: str) -> bool:
    parsed = parse_datetime(value)
    return parsed is not None and parsed.utcoffset() is not None


# ------------------------------------------------------------- lead fields


def test_lead_detail_has_exactly_the_contract_fields(business: Business, setter: TeamMember) -> None:
    lead = assigned_lead(business, setter, email="Pat@Example.com")
    lead_set_next_action(lead, "Call back", timezone.now() + timedelta(hours=1), actor="test", reason="plan")
    lead_flag_exception(lead, "emergency", actor="test", reason="no heat")

    body = get(client_for(setter), f"/api/v1/leads/{lead.public_id}/")

    assert set(body) == LEAD_FIELDS
    assert body["id"] == lead.public_id and body["id"].startswith("lead_")
    assert body["business"] == business.public_id
    assert body["stage"] == Stage.ASSIGNED
    assert body["owner"] == "sam"
    assert body["next_action"] == "Call back"
    assert is_iso_with_offset(body["next_action_due_at"]) and is_iso_with_offset(body["created_at"])
    assert body["sla_due_at"] is None
    assert body["hold"] is False
    assert body["exceptions"] == ["emergency"]
    contact = body["contact"]
    assert set(contact) == CONTACT_FIELDS
    assert contact["id"] == lead.contact.public_id
    assert contact["name"] == "Pat Doe"
    assert contact["phones"] == ["+12125550147"]
    assert contact["emails"] == ["pat@example.com"]
    assert contact["consent"] == {
        "sms": "unknown",
        "voice": "unknown",
        "email": "unknown",
        "instagram": "unknown",
        **MARKETPLACES,
    }
    [touch] = body["touches"]
    assert set(touch) == TOUCH_FIELDS
    assert touch["channel"] == "form" and touch["provider"] == "manual" and touch["utm"] == {}
    assert is_iso_with_offset(touch["received_at"])


def test_an_unowned_lead_has_a_null_owner(business: Business, manager: TeamMember) -> None:
    lead = lead_create(business)

    body = get(client_for(manager), f"/api/v1/leads/{lead.public_id}/")

    assert body["owner"] is None
    assert body["stage"] == Stage.NEW


def test_consent_per_channel_is_revoked_if_any_point_revoked_else_granted_if_any_granted(
    business: Business, manager: TeamMember
) -> None:
    lead = lead_create(business, email="pat@example.com")
    contact = lead.contact
    home = contact.points.get(kind="phone")
    work = ContactPoint.objects.create(business=business, contact=contact, kind="phone", value="+12125550148")
    email = contact.points.get(kind="email")
    consent_record(home, "sms", "grant")
    consent_record(work, "sms", "grant")
    consent_record(work, "sms", "revoke")
    consent_record(home, "voice", "grant")
    consent_record(email, "email", "grant")

    body = get(client_for(manager), f"/api/v1/leads/{lead.public_id}/")

    assert body["contact"]["consent"] == {
        "sms": "revoked",
        "voice": "granted",
        "email": "granted",
        "instagram": "unknown",
        **MARKETPLACES,
    }
    assert body["contact"]["phones"] == ["+12125550147", "+12125550148"]


def test_lead_list_is_paginated_with_count_next_previous_results(business: Business, manager: TeamMember) -> None:
    lead_create(business, phone="+12125550101")
    lead_create(business, phone="+12125550102")

    page = get(client_for(manager), "/api/v1/leads/")

    assert set(page) == {"count", "next", "previous", "results"}
    assert page["count"] == 2 and page["next"] is None and page["previous"] is None
    assert all(set(row) == LEAD_FIELDS for row in page["results"])


# ----------------------------------------------------------------- filters


def test_phone_filter_accepts_any_format_and_matches_on_e164(business: Business, manager: TeamMember) -> None:
    wanted = lead_create(business, phone="+12125550147")
    lead_create(business, first_name="Other", phone="+13125550100")
    client = client_for(manager)

    for typed in ("(212) 555-0147", "212.555.0147", "+1 212 555 0147", "12125550147"):
        assert ids(get(client, "/api/v1/leads/", phone=typed)) == {wanted.public_id}, typed


def test_phone_without_country_code_is_read_in_the_business_region(business: Business) -> None:
    london: Business = BusinessFactory.create(slug="london", region="GB")
    uk_lead = lead_create(london, phone="020 7946 0018")
    lead_create(business, phone="+12125550147")
    operator = UserFactory(username="ops", is_superuser=True)

    page = get(client_for(operator), "/api/v1/leads/", phone="020 7946 0018")

    assert ids(page) == {uk_lead.public_id}
    assert uk_lead.contact.points.get().value == "+442079460018"


def test_email_filter_is_case_insensitive(business: Business, manager: TeamMember) -> None:
    wanted = lead_create(business, phone="", email="Pat.Doe@Example.com")
    lead_create(business, phone="", first_name="Other", email="other@example.com")

    page = get(client_for(manager), "/api/v1/leads/", email="PAT.DOE@example.COM")

    assert ids(page) == {wanted.public_id}


def test_stage_filter_returns_only_leads_in_that_stage(
    business: Business, manager: TeamMember, setter: TeamMember
) -> None:
    assigned = assigned_lead(business, setter, phone="+12125550101")
    fresh = lead_create(business, phone="+12125550102")
    client = client_for(manager)

    assert ids(get(client, "/api/v1/leads/", stage="assigned")) == {assigned.public_id}
    assert ids(get(client, "/api/v1/leads/", stage="new")) == {fresh.public_id}
    assert get(client, "/api/v1/leads/", stage="won")["count"] == 0


def test_an_unknown_stage_is_a_bad_request_in_the_error_shape(manager: TeamMember) -> None:
    response = client_for(manager).get("/api/v1/leads/", {"stage": "bogus"})

    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "bad_request" and "stage" in body["detail"]


def test_empty_filter_values_are_ignored(business: Business, manager: TeamMember) -> None:
    lead = lead_create(business)

    page = get(client_for(manager), "/api/v1/leads/", phone="", email="", stage="", owner="", business="")

    assert ids(page) == {lead.public_id}


def test_owner_filter_takes_a_username(business: Business, manager: TeamMember, setter: TeamMember) -> None:
    other_setter = member_create(business, Role.SETTER, username="sue")
    sams = assigned_lead(business, setter, phone="+12125550101")
    assigned_lead(business, other_setter, phone="+12125550102")
    client = client_for(manager)

    assert ids(get(client, "/api/v1/leads/", owner="sam")) == {sams.public_id}
    assert get(client, "/api/v1/leads/", owner="nobody")["count"] == 0


def test_business_filter_takes_a_slug_or_a_public_id(business: Business, other_business: Business) -> None:
    agency = member_create(business, Role.MANAGER, username="agency")
    member_create(other_business, Role.MANAGER, username="agency")
    acme_lead = lead_create(business)
    other_lead = lead_create(other_business)
    client = client_for(agency)

    assert ids(get(client, "/api/v1/leads/")) == {acme_lead.public_id, other_lead.public_id}
    assert ids(get(client, "/api/v1/leads/", business="acme")) == {acme_lead.public_id}
    assert ids(get(client, "/api/v1/leads/", business=other_business.public_id)) == {other_lead.public_id}


def test_filters_never_widen_what_a_user_sees(business: Business, other_business: Business, setter: TeamMember) -> None:
    lead_create(other_business, phone="+12125550147")

    page = get(client_for(setter), "/api/v1/leads/", phone="(212) 555-0147", business="other")

    assert page["count"] == 0


# ---------------------------------------------------------------- receipts


def test_receipts_list_the_audit_trail_in_time_order(business: Business, setter: TeamMember) -> None:
    lead = assigned_lead(business, setter)
    lead_set_next_action(lead, "Call back", timezone.now() + timedelta(hours=1), actor="sam", reason="plan")
    lead_set_hold(lead, True, actor="sam", reason="customer asked to wait")

    page = get(client_for(setter), f"/api/v1/leads/{lead.public_id}/receipts/")

    assert set(page) == {"count", "next", "previous", "results"}
    rows = page["results"]
    assert [r["action"] for r in rows] == [
        "lead.created",
        "lead.owner_changed",
        "lead.next_action_set",
        "lead.hold_set",
    ]
    assert all(set(r) == {"id", "at", "actor", "action", "reason", "before", "after"} for r in rows)
    assert [r["at"] for r in rows] == sorted(r["at"] for r in rows)
    owner_change = rows[1]
    assert owner_change["before"] == {"owner": None, "stage": "new"}
    assert owner_change["after"] == {"owner": "sam", "stage": "assigned"}
    assert owner_change["reason"] == "routing" and owner_change["actor"] == "test"
    assert rows[3]["actor"] == "sam" and rows[3]["id"].startswith("rcpt_")


# ---------------------------------------------------------------- scoping


def test_setter_sees_only_their_own_leads_in_the_list(business: Business, setter: TeamMember) -> None:
    other_setter = member_create(business, Role.SETTER, username="sue")
    mine = assigned_lead(business, setter, phone="+12125550101")
    assigned_lead(business, other_setter, phone="+12125550102")
    lead_create(business, phone="+12125550103")

    assert ids(get(client_for(setter), "/api/v1/leads/")) == {mine.public_id}


@pytest.mark.parametrize("suffix", ["", "receipts/"])
def test_setter_gets_a_json_404_for_another_setters_lead(business: Business, setter: TeamMember, suffix: str) -> None:
    other_setter = member_create(business, Role.SETTER, username="sue")
    theirs = assigned_lead(business, other_setter)

    response = client_for(setter).get(f"/api/v1/leads/{theirs.public_id}/{suffix}")

    assert response.status_code == 404
    body = response.json()
    assert body["error"] == "not_found" and body["detail"]


def test_manager_sees_the_whole_business(business: Business, manager: TeamMember, setter: TeamMember) -> None:
    owned = assigned_lead(business, setter, phone="+12125550101")
    unowned = lead_create(business, phone="+12125550102")
    client = client_for(manager)

    assert ids(get(client, "/api/v1/leads/")) == {owned.public_id, unowned.public_id}
    assert get(client, f"/api/v1/leads/{owned.public_id}/")["id"] == owned.public_id


@pytest.mark.parametrize("kind", ["lead", "receipts", "contact", "message", "task"])
def test_a_user_of_another_business_gets_a_404(
    business: Business, other_business: Business, setter: TeamMember, kind: str
) -> None:
    outsider = member_create(other_business, Role.OWNER, username="olga")
    lead = assigned_lead(business, setter)
    message = inbound_message(lead, "hi")
    task = task_create(lead=lead, title="Call", due_at=timezone.now(), actor="test")
    url = {
        "lead": f"/api/v1/leads/{lead.public_id}/",
        "receipts": f"/api/v1/leads/{lead.public_id}/receipts/",
        "contact": f"/api/v1/contacts/{lead.contact.public_id}/",
        "message": f"/api/v1/messages/{message.public_id}/",
        "task": f"/api/v1/tasks/{task.public_id}/",
    }[kind]

    response = client_for(outsider).get(url)

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    assert get(client_for(outsider), "/api/v1/leads/")["count"] == 0


# ------------------------------------------------------------ authentication


@pytest.mark.parametrize("url", ["/api/v1/leads/", "/api/v1/contacts/", "/api/v1/inbound-events/"])
def test_an_unauthenticated_request_is_refused_with_a_json_error(url: str) -> None:
    response = APIClient().get(url)

    assert response.status_code in (401, 403)
    assert response.json()["error"] in ("not_authenticated", "forbidden")


def test_a_bad_token_is_refused(business: Business) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-key")

    response = client.get("/api/v1/leads/")

    assert response.status_code == 401
    assert response.json()["error"] == "not_authenticated"


def test_token_authentication_works(business: Business, setter: TeamMember) -> None:
    lead = assigned_lead(business, setter)
    token = Token.objects.create(user=setter.user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")

    page = get(client, "/api/v1/leads/")

    assert ids(page) == {lead.public_id}


# ------------------------------------------------------------------ contacts


def test_contact_detail_is_the_contact_plus_its_consent_ledger_in_order(business: Business, setter: TeamMember) -> None:
    lead = assigned_lead(business, setter, email="pat@example.com")
    phone = lead.contact.points.get(kind="phone")
    granted = consent_record(phone, "sms", "grant", basis="form_disclosure")
    revoked = consent_record(phone, "sms", "revoke", basis="keyword")

    body = get(client_for(setter), f"/api/v1/contacts/{lead.contact.public_id}/")

    assert set(body) == CONTACT_FIELDS | {"consent_events"}
    assert body["consent"] == {
        "sms": "revoked",
        "voice": "unknown",
        "email": "unknown",
        "instagram": "unknown",
        **MARKETPLACES,
    }
    assert [e["id"] for e in body["consent_events"]] == [granted.public_id, revoked.public_id]
    first = body["consent_events"][0]
    assert set(first) == {"id", "channel", "action", "basis", "evidence", "actor", "at"}
    assert (first["channel"], first["action"], first["basis"]) == ("sms", "grant", "form_disclosure")
    assert first["evidence"] == {"note": "grant in a test"} and first["actor"] == "test"


def test_setter_sees_the_contacts_of_their_own_leads_only(business: Business, setter: TeamMember) -> None:
    other_setter = member_create(business, Role.SETTER, username="sue")
    mine = assigned_lead(business, setter, phone="+12125550101")
    theirs = assigned_lead(business, other_setter, phone="+12125550102")
    client = client_for(setter)

    assert ids(get(client, "/api/v1/contacts/")) == {mine.contact.public_id}
    assert client.get(f"/api/v1/contacts/{theirs.contact.public_id}/").status_code == 404


# ---------------------------------------------------------- messages, tasks


def test_messages_filter_by_lead_with_the_contract_fields(business: Business, setter: TeamMember) -> None:
    lead = assigned_lead(business, setter, phone="+12125550101")
    other = assigned_lead(business, setter, phone="+12125550102")
    message = inbound_message(lead, "Is Tuesday OK?")
    inbound_message(other, "Unrelated")

    page = get(client_for(setter), "/api/v1/messages/", lead=lead.public_id)

    [row] = page["results"]
    assert row == {
        "id": message.public_id,
        "lead": lead.public_id,
        "direction": "in",
        "channel": "sms",
        "status": "received",
        "block_reason": "",
        "body": "Is Tuesday OK?",
        "from_number": "+12125550147",
        "to": "+15555550100",
        "provider_sid": None,
        "created_at": row["created_at"],
        # Stored by whatever recorded the message (capture reads it with the rules).
        "intent": "",
        "intent_confidence": None,
        "intent_source": "",
    }
    assert is_iso_with_offset(row["created_at"])


def test_setter_does_not_see_messages_of_another_setters_lead(business: Business, setter: TeamMember) -> None:
    other_setter = member_create(business, Role.SETTER, username="sue")
    theirs = assigned_lead(business, other_setter)
    inbound_message(theirs, "hello")

    assert get(client_for(setter), "/api/v1/messages/", lead=theirs.public_id)["count"] == 0


def test_tasks_filter_by_owner_username_and_status(business: Business, manager: TeamMember, setter: TeamMember) -> None:
    other_setter = member_create(business, Role.SETTER, username="sue")
    due = timezone.now() + timedelta(hours=2)
    sams = task_create(lead=assigned_lead(business, setter, phone="+12125550101"), title="Call", due_at=due, actor="t")
    task_create(lead=assigned_lead(business, other_setter, phone="+12125550102"), title="Call", due_at=due, actor="t")
    client = client_for(manager)

    page = get(client, "/api/v1/tasks/", owner="sam", status="open")

    [row] = page["results"]
    assert set(row) == {"id", "lead", "owner", "kind", "title", "due_at", "status"}
    assert row["id"] == sams.public_id and row["lead"] == sams.lead.public_id
    assert (row["owner"], row["kind"], row["title"], row["status"]) == ("sam", "next_action", "Call", "open")
    assert get(client, "/api/v1/tasks/", status="done")["count"] == 0
    assert get(client, "/api/v1/tasks/")["count"] == 2


# ----------------------------------------------------------- inbound events


def test_inbound_events_are_hidden_from_setters(business: Business, setter: TeamMember) -> None:
    event = inbound_event(business, "SM1")
    client = client_for(setter)

    assert get(client, "/api/v1/inbound-events/")["count"] == 0
    assert client.get(f"/api/v1/inbound-events/{event.public_id}/").status_code == 404


def test_managers_see_their_business_events_filtered_by_provider_and_status(
    business: Business, other_business: Business, manager: TeamMember
) -> None:
    sms = inbound_event(business, "SM1", provider="twilio")
    form = inbound_event(business, "F1", provider="website")
    inbound_event(other_business, "SM2", provider="twilio")
    inbound_event(None, "evt_stripe_1", provider="stripe")
    client = client_for(manager)

    assert ids(get(client, "/api/v1/inbound-events/")) == {sms.public_id, form.public_id}
    [row] = get(client, "/api/v1/inbound-events/", provider="twilio")["results"]
    assert set(row) >= {"id", "provider", "external_id", "status", "error", "received_at"}
    assert (row["id"], row["external_id"], row["status"], row["error"]) == (sms.public_id, "SM1", "received", "")
    assert get(client, "/api/v1/inbound-events/", status="received")["count"] == 2
    assert get(client, "/api/v1/inbound-events/", status="failed")["count"] == 0


def test_an_event_of_no_known_business_is_seen_by_operators_only(manager: TeamMember) -> None:
    orphan = inbound_event(None, "evt_stripe_1", provider="stripe")
    operator = UserFactory(username="ops", is_superuser=True)

    assert ids(get(client_for(operator), "/api/v1/inbound-events/")) == {orphan.public_id}
    assert get(client_for(manager), "/api/v1/inbound-events/")["count"] == 0


# ------------------------------------------------------------- query counts


def _many_leads(business: Business, owner: TeamMember, n: int) -> list[Lead]:
    leads = []
    for i in range(n):
        lead = assigned_lead(business, owner, phone=f"+1212555{1000 + i}", email=f"p{i}@example.com")
        point = lead.contact.points.get(kind="phone")
        consent_record(point, "sms", "grant")
        task_create(lead=lead, title="Call", due_at=timezone.now(), actor="test")
        inbound_message(lead, f"message {i}")
        inbound_event(business, f"SM{owner.pk}-{i}")
        leads.append(lead)
    return leads


def _receipts_url(leads: list[Lead]) -> str:
    lead = leads[0]
    for i in range(len(leads)):
        lead_set_next_action(lead, f"step {i}", timezone.now(), actor="test", reason="plan")
    return f"/api/v1/leads/{lead.public_id}/receipts/"


def _contact_url(leads: list[Lead]) -> str:
    contact = leads[0].contact
    phone = contact.points.get(kind="phone")
    for _ in range(len(leads)):
        consent_record(phone, "sms", "revoke")
    return f"/api/v1/contacts/{contact.public_id}/"


ENDPOINTS: dict[str, Callable[[list[Lead]], str]] = {
    "leads": lambda leads: "/api/v1/leads/",
    "leads by phone": lambda leads: "/api/v1/leads/?phone=(212)%20555-1000",
    "contacts": lambda leads: "/api/v1/contacts/",
    "contact detail": _contact_url,
    "messages": lambda leads: "/api/v1/messages/",
    "tasks": lambda leads: "/api/v1/tasks/",
    "inbound events": lambda leads: "/api/v1/inbound-events/",
    "receipts": _receipts_url,
}


def _query_count(member: TeamMember, url: str) -> int:
    client = client_for(member)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return len(queries)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_lists_run_the_same_number_of_queries_for_2_rows_as_for_20(endpoint: str) -> None:
    small: Business = BusinessFactory.create(slug="small")
    large: Business = BusinessFactory.create(slug="large")
    small_owner = member_create(small, Role.OWNER, username="small-owner")
    large_owner = member_create(large, Role.OWNER, username="large-owner")
    small_url = ENDPOINTS[endpoint](_many_leads(small, small_owner, 2))
    large_url = ENDPOINTS[endpoint](_many_leads(large, large_owner, 20))

    assert _query_count(small_owner, small_url) == _query_count(large_owner, large_url)


def test_the_lead_list_stays_within_a_fixed_query_budget(
    business: Business, manager: TeamMember, django_assert_max_num_queries: Any
) -> None:
    _many_leads(business, manager, 10)
    client = client_for(manager)

    # session, user, scope, count, leads, touches, points, consent states
    with django_assert_max_num_queries(8):
        assert client.get("/api/v1/leads/").status_code == 200


# -------------------------------------------------------------- schema, docs


READ_PATHS = {
    "/api/v1/leads/",
    "/api/v1/leads/{id}/",
    "/api/v1/leads/{id}/receipts/",
    "/api/v1/contacts/{id}/",
    "/api/v1/messages/",
    "/api/v1/inbound-events/",
    "/api/v1/tasks/",
}


def test_the_schema_validates_without_warnings_and_documents_the_read_api(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"

    # --fail-on-warn raises on any warning or error of the generator.
    call_command("spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", "--file", str(out))

    schema = json.loads(out.read_text())
    assert set(schema["paths"]) >= READ_PATHS
    leads = schema["paths"]["/api/v1/leads/"]["get"]
    assert {p["name"] for p in leads["parameters"]} >= {"phone", "email", "stage", "owner", "business", "page"}
    assert {p["name"] for p in schema["paths"]["/api/v1/inbound-events/"]["get"]["parameters"]} >= {
        "provider",
        "status",
    }
    assert {p["name"] for p in schema["paths"]["/api/v1/tasks/"]["get"]["parameters"]} >= {"owner", "status"}
    assert {p["name"] for p in schema["paths"]["/api/v1/messages/"]["get"]["parameters"]} >= {"lead"}
    components = schema["components"]["schemas"]
    assert set(components["Lead"]["properties"]) == LEAD_FIELDS
    assert set(components["Contact"]["properties"]) == CONTACT_FIELDS
    assert set(components["Consent"]["properties"]) == {"sms", "voice", "email", "instagram", "thumbtack", "yelp"}
    # The contract's values first, as they were; values added since after them.
    reasons = components["BlockReasonEnum"]["enum"]
    assert reasons[:7] == ["hold", "stopped", "no_consent", "revoked", "quiet_hours", "daily_cap", "other_path_active"]
    assert {"rejected", "number_not_allowed", "outside_window", "expired"} <= set(reasons[7:])
    assert set(components["LeadTouch"]["properties"]) == TOUCH_FIELDS
    assert components["ConsentStatusEnum"]["enum"] == ["granted", "revoked", "unknown"]


def test_a_page_past_the_last_is_a_json_404_and_every_list_documents_it(
    tmp_path: Path, business: Business, manager: TeamMember
) -> None:
    response = client_for(manager).get("/api/v1/leads/", {"page": 99})

    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "detail": "Invalid page."}
    out = tmp_path / "schema.json"
    call_command("spectacular", "--format", "openapi-json", "--file", str(out))
    paths = json.loads(out.read_text())["paths"]
    lists = [
        path
        for path, item in paths.items()
        if "get" in item and "page" in {p["name"] for p in item["get"].get("parameters", [])}
    ]
    assert len(lists) >= 13
    for path in lists:
        documented = paths[path]["get"]["responses"]
        assert documented.get("404", {}).get("content", {}).get("application/json", {}).get("schema") == {
            "$ref": "#/components/schemas/Error"
        }, path


@pytest.mark.parametrize("path", ["/api/v1/leads/lead.x-y/", "/api/v1/tasks/a.%C3%A9/", "/api/v1/no-such-thing/"])
def test_an_api_path_that_matches_no_route_is_a_json_404(manager: TeamMember, path: str) -> None:
    # An id with a dot never reached the viewset (the router's id pattern
    # stops at dots), and Django answered with its HTML page.
    response = client_for(manager).get(path)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["error"] == "not_found"


def test_a_path_outside_the_api_keeps_the_html_404(db: None) -> None:
    response = APIClient().get("/no-such-page/")

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


def test_the_schema_is_served(db: None) -> None:
    response = APIClient().get("/api/schema/")

    assert response.status_code == 200
    assert b"/api/v1/leads/" in response.content


def test_the_api_docs_page_uses_only_local_assets(db: None) -> None:
    client = APIClient()
    response = client.get("/api/docs/")

    assert response.status_code == 200
    html = response.content.decode()
    assert not re.search(r"https?://", html), "the docs page must not load anything from a CDN"
    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', html)
    assert len(assets) >= 3
    for asset in assets:
        assert client.get(asset).status_code == 200, asset
