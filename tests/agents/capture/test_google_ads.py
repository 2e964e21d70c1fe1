"""Google Ads lead form webhooks: the key inside the body, test leads, and a
tolerant reading of the columns Google sends."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django_q.models import OrmQ

from agents.capture.providers.google_ads import parse_lead
from crm.models import Business, InboundEvent, Lead, RejectedDelivery, Source
from crm.services.inbound_handlers import MalformedPayload
from tests.factories import ServiceLineFactory
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

# A lead in Google's "SEND TEST DATA" shape.
SAMPLE = (Path(__file__).parent / "samples" / "google_ads_lead.json").read_bytes()
SAMPLE_KEY = "test-google-key-not-a-secret"
SAMPLE_LEAD_ID = "TeSter-123-ABCDEFGHIJKLMNOPQRSTUVWXYZ-abcdefghijklmnopqrstuvwxyz-0123456789-AaBbCcDdEe"
URL = "/hooks/google-ads/gads-main/"


@pytest.fixture
def google_source(business: Business) -> Source:
    return Source.objects.create(business=business, key="gads-main", provider="google_ads", secret=SAMPLE_KEY)


def post(body: bytes | dict[str, Any], url: str = URL) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Client().post(url, data=data, content_type="application/json")


def real_lead(lead_id: str = "L-1001", **changes: Any) -> dict[str, Any]:
    """The sample as a live (not test) lead with a valid phone number."""
    data = json.loads(SAMPLE)
    data.update(lead_id=lead_id, is_test=False)
    data["user_column_data"][1]["string_value"] = "+12125550147"
    data.update(changes)
    return data


def test_the_url_is_named_and_takes_the_source_key():
    assert reverse("hook-google-ads", kwargs={"source_key": "gads-main"}) == URL


def test_the_sample_lead_is_stored_raw_then_processed_into_a_flagged_test_lead(
    google_source, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(SAMPLE)
    assert response.status_code == 200
    assert response.json()["duplicate"] is False
    event = InboundEvent.objects.get()
    assert bytes(event.body) == SAMPLE
    assert (event.provider, event.external_id, event.kind) == ("google_ads", f"gads-main:{SAMPLE_LEAD_ID}", "lead")
    assert event.is_test and event.status == "received" and event.source == google_source
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    assert lead.is_test and "test_lead" in lead.exceptions
    contact = lead.contact
    assert (contact.first_name, contact.last_name, contact.postal_code) == ("Jordan", "Sample", "94105")
    assert sorted(contact.points.values_list("value", flat=True)) == ["+15555550123", "jordan.sample@example.com"]
    touch = lead.touches.get()
    assert touch.inbound_event == event and touch.source == google_source
    assert (touch.channel, touch.provider) == ("form", "google_ads")
    assert (touch.campaign_id, touch.adgroup_id, touch.ad_id, touch.form_id) == (
        "20000000000",
        "20000000001",
        "30000000000",
        "40000000000",
    )
    assert touch.gclid == "TeSter-123-gclid-ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    assert touch.received_at == datetime(2026, 3, 14, 15, 2, 11, tzinfo=UTC)
    assert touch.answers["SERVICE"] == {"column_name": "What service do you need?", "value": "Roof repair"}
    assert touch.answers["FULL_NAME"] == {"column_name": "Full Name", "value": "Jordan Sample"}
    assert len(touch.answers) == 5
    event.refresh_from_db()
    assert event.status == "processed" and event.attempts == 1


def test_a_live_lead_is_not_flagged_and_its_service_answer_picks_the_service_line(
    google_source, django_capture_on_commit_callbacks
):
    roofing = ServiceLineFactory.create(
        business=google_source.business, slug="roofing", name="Roofing", keywords=["roof"]
    )
    with django_capture_on_commit_callbacks(execute=True):
        post(real_lead())
    assert run_queued_events() == ["processed"]
    lead = Lead.objects.get()
    # Capture flagged nothing; the new-lead step, run with it, found no
    # setter on this team and sent the lead to the manager queue.
    assert not lead.is_test and lead.exceptions == ["no_eligible_owner"]
    assert lead.service_line == roofing
    assert not InboundEvent.objects.get().is_test


def test_a_custom_question_without_a_column_name_is_kept_as_an_answer(
    google_source, django_capture_on_commit_callbacks
):
    columns = [
        {"column_name": "First Name", "string_value": "Rosa", "column_id": "FIRST_NAME"},
        {"column_name": "Last Name", "string_value": "Diaz", "column_id": "LAST_NAME"},
        {"string_value": "(212) 555-0147", "column_id": "PHONE_NUMBER"},
        {"string_value": "Roof is 20 years old", "column_id": "how_old_is_your_roof?"},
        {"column_name": "Street", "string_value": "1 Main St", "column_id": "STREET_ADDRESS"},
        {"column_name": "City", "string_value": "Chicago", "column_id": "CITY"},
    ]
    with django_capture_on_commit_callbacks(execute=True):
        post(real_lead(user_column_data=columns))
    run_queued_events()
    lead = Lead.objects.get()
    assert (lead.contact.first_name, lead.contact.last_name) == ("Rosa", "Diaz")
    assert lead.contact.address == "1 Main St, Chicago"
    assert list(lead.contact.points.values_list("value", flat=True)) == ["+12125550147"]
    assert lead.touches.get().answers["how_old_is_your_roof?"] == {"column_name": "", "value": "Roof is 20 years old"}


def test_phones_in_other_formats_resolve_to_the_same_person(google_source, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        for n, phone in enumerate(["212-555-0147", "+1 (212) 555 0147", "2125550147"]):
            data = real_lead(lead_id=f"L-{n}")
            data["user_column_data"][1]["string_value"] = phone
            del data["user_column_data"][2]  # no email: the phone alone must match
            post(data)
    assert run_queued_events() == ["processed"] * 3
    lead = Lead.objects.get()
    assert list(lead.contact.points.values_list("value", flat=True)) == ["+12125550147"]
    assert lead.touches.count() == 3


def test_a_lead_without_a_name_or_submit_time_is_taken_at_delivery_time(
    google_source, django_capture_on_commit_callbacks
):
    data = real_lead()
    del data["lead_submit_time"]
    data["user_column_data"] = [c for c in data["user_column_data"] if c["column_id"] != "FULL_NAME"]
    with django_capture_on_commit_callbacks(execute=True):
        post(data)
    run_queued_events()
    lead = Lead.objects.get()
    assert (lead.contact.first_name, lead.contact.last_name) == ("", "")
    assert lead.touches.get().received_at == InboundEvent.objects.get().received_at


def test_unknown_fields_and_ids_sent_as_strings_are_tolerated(google_source, django_capture_on_commit_callbacks):
    data = real_lead(
        campaign_id="20000000000", asset_group_id=50000000000, lead_stage="NEW", some_future_field={"a": [1]}
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert post(data).status_code == 200
    assert run_queued_events() == ["processed"]
    assert Lead.objects.get().touches.get().campaign_id == "20000000000"


def test_a_repeated_lead_is_acknowledged_as_a_duplicate_without_reprocessing(
    google_source, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        first, second = post(SAMPLE), post(SAMPLE)
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.json() == {**first.json(), "duplicate": True}
    assert run_queued_events() == ["processed"]
    assert InboundEvent.objects.count() == 1 and Lead.objects.count() == 1


def test_a_wrong_or_missing_key_is_refused_with_401_counted_and_not_stored(google_source):
    wrong = post(real_lead(google_key="not-the-key"))
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_signature"
    missing = real_lead()
    del missing["google_key"]
    assert post(missing).status_code == 401
    assert post(real_lead(google_key=12345)).status_code == 401
    assert not InboundEvent.objects.exists()
    rejection = RejectedDelivery.objects.get()
    assert (rejection.source, rejection.provider, rejection.count) == (google_source, "google_ads", 3)


def test_a_source_without_a_secret_accepts_no_key_at_all(business):
    Source.objects.create(business=business, key="gads-open", provider="google_ads", secret="")
    assert post(real_lead(google_key=""), url="/hooks/google-ads/gads-open/").status_code == 401
    assert not InboundEvent.objects.exists()


def test_a_body_that_is_not_json_cannot_be_authenticated_so_it_is_refused_with_400_and_counted(google_source):
    for body in (b"{not json", b'["a list"]', b"\xff\xfe"):
        response = post(body)
        assert response.status_code == 400
        assert response.json()["error"] == "rejected"
    assert not InboundEvent.objects.exists()
    assert RejectedDelivery.objects.get().count == 3


def test_a_body_over_one_mebibyte_is_refused_with_413(google_source):
    response = post(b"{" + b" " * (1024 * 1024) + b"}")
    assert response.status_code == 413 and response.json()["error"] == "payload_too_large"
    assert not InboundEvent.objects.exists()


def test_an_authentic_lead_with_unreadable_columns_is_stored_failed_and_answered_400(google_source):
    body = json.dumps(real_lead(user_column_data="Jordan Sample")).encode()
    response = post(body)
    assert response.status_code == 400
    assert response.json() == {"error": "malformed_payload", "detail": "user_column_data is not a list"}
    event = InboundEvent.objects.get()
    assert (event.status, event.external_id, bytes(event.body)) == ("failed", "gads-main:L-1001", body)
    assert event.error == "malformed payload: user_column_data is not a list"
    assert not OrmQ.objects.exists() and not Lead.objects.exists()


def test_an_authentic_lead_without_a_lead_id_is_stored_failed_under_its_body_digest(google_source):
    data = real_lead()
    del data["lead_id"]
    response = post(data)
    assert response.status_code == 400 and response.json()["detail"] == "no lead_id"
    event = InboundEvent.objects.get()
    assert event.status == "failed" and event.external_id.startswith("gads-main:sha256:")


def test_an_unknown_source_gets_a_json_404():
    response = post(SAMPLE, url="/hooks/google-ads/nope/")
    assert response.status_code == 404 and response.json()["error"] == "unknown_source"


def test_parsing_keeps_repeated_column_ids_apart():
    data = real_lead(
        user_column_data=[
            {"column_id": "EMAIL", "string_value": "a@example.com"},
            {"column_id": "EMAIL", "string_value": "b@example.com"},
        ]
    )
    capture = parse_lead(data, received_at=datetime(2026, 3, 14, tzinfo=UTC))
    assert capture.emails == ["a@example.com", "b@example.com"]
    assert set(capture.answers) == {"EMAIL", "EMAIL#2"}


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"lead_id": ""}, "no lead_id"),
        ({"user_column_data": [["FULL_NAME", "Jordan"]]}, "user_column_data[0] is not an object"),
        ({"campaign_id": {"id": 1}}, "campaign_id is not an id"),
    ],
)
def test_parsing_names_what_is_malformed(changes, reason):
    with pytest.raises(MalformedPayload, match=re.escape(reason)):
        parse_lead(real_lead(**changes), received_at=datetime(2026, 3, 14, tzinfo=UTC))


def test_the_same_google_test_lead_is_stored_once_per_form(business):
    from crm.models import Source

    for key in ("form-a", "form-b"):
        Source.objects.create(business=business, key=key, provider="google_ads", secret=f"{key}-secret")
        data = json.loads(SAMPLE)
        data["google_key"] = f"{key}-secret"
        response = Client().post(f"/hooks/google-ads/{key}/", json.dumps(data), content_type="application/json")
        assert response.status_code == 200 and response.json()["duplicate"] is False
    assert InboundEvent.objects.filter(provider="google_ads", is_test=True).count() == 2


def test_the_admin_never_shows_the_google_key_of_a_stored_body(business, manager):
    from django.urls import reverse

    from crm.models import Source

    Source.objects.create(business=business, key="gk", provider="google_ads", secret="very-secret-key")
    data = json.loads(SAMPLE)
    data["google_key"] = "very-secret-key"
    Client().post("/hooks/google-ads/gk/", json.dumps(data), content_type="application/json")
    event = InboundEvent.objects.get()
    assert b"very-secret-key" in bytes(event.body)
    client = Client()
    client.force_login(manager.user)
    page = client.get(reverse("admin:crm_inboundevent_change", args=[event.pk])).content.decode()
    assert "very-secret-key" not in page and "[secret redacted]" in page
