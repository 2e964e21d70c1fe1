"""Typeform webhooks: base64 signatures over the raw bytes, answers read by
ref, and never a 404 or 410 (which would disable the hook) once the source
is found."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django_q.models import OrmQ

from agents.capture.providers.typeform import parse_response, typeform_signature
from crm.models import Business, InboundEvent, Lead, RejectedDelivery, Source
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

# A Typeform response in its documented shape; its published
# signature and secret are the "typeform" entry of signature_vectors.json.
SAMPLE = (Path(__file__).parent / "samples" / "typeform_response.json").read_bytes()
VECTOR_SECRET = "test_typeform_secret_0123456789"
VECTOR_SIGNATURE = "sha256=8BcGjz2tgxYC56rS6frtdeo2n2RMYIbKleJbwu/qzko="
TOKEN = "01jq8z7k3m4n5p6q7r8s9t0v1w"
URL = "/hooks/typeform/tf-quote/"


@pytest.fixture
def typeform_source(business: Business) -> Source:
    return Source.objects.create(business=business, key="tf-quote", provider="typeform", secret=VECTOR_SECRET)


def post(body: bytes | dict[str, Any], *, secret: str = VECTOR_SECRET, signature: str | None = None, url: str = URL):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Typeform-Signature": typeform_signature(secret, data) if signature is None else signature}
    return Client().post(url, data=data, content_type="application/json", headers=headers)


def sample(**form_changes: Any) -> dict[str, Any]:
    data = json.loads(SAMPLE)
    data["form_response"].update(form_changes)
    return data


def with_question(data: dict[str, Any], field: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    data["form_response"]["definition"]["fields"].append(field)
    data["form_response"]["answers"].append({**answer, "field": {k: field[k] for k in ("id", "type", "ref")}})
    return data


def test_the_signing_helper_reproduces_the_published_vector():
    assert typeform_signature(VECTOR_SECRET, SAMPLE) == VECTOR_SIGNATURE


def test_the_url_is_named_and_takes_the_source_key():
    assert reverse("hook-typeform", kwargs={"source_key": "tf-quote"}) == URL


def test_the_sample_response_is_stored_raw_then_processed_into_a_lead(
    typeform_source, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(SAMPLE, signature=VECTOR_SIGNATURE)
    assert response.status_code == 200
    assert response.json()["status"] == "received"
    event = InboundEvent.objects.get()
    assert bytes(event.body) == SAMPLE
    assert (event.provider, event.external_id, event.kind) == ("typeform", TOKEN, "form_response")
    assert event.headers["Typeform-Signature"] == VECTOR_SIGNATURE
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    assert not lead.is_test
    contact = lead.contact
    assert (contact.first_name, contact.last_name, contact.postal_code) == ("Jordan", "Sample", "94105")
    assert sorted(contact.points.values_list("value", flat=True)) == ["+15555550123", "jordan.sample@example.com"]
    touch = lead.touches.get()
    assert touch.inbound_event == event and touch.source == typeform_source
    assert (touch.channel, touch.provider, touch.form_id) == ("form", "typeform", "aBcD1234")
    assert touch.utm == {"source": "facebook", "medium": "paid_social", "campaign": "spring_roof_promo"}
    assert touch.gclid == ""
    assert touch.received_at == datetime(2026, 3, 14, 15, 2, 11, tzinfo=UTC)
    assert touch.answers["service"] == {"title": "What do you need?", "type": "multiple_choice", "value": "Roof repair"}
    assert touch.answers["phone"] == {"title": "Best phone number?", "type": "phone_number", "value": "+15555550123"}
    assert touch.answers["_hidden"]["lead_source"] == "website_quote_form"
    assert set(touch.answers) == {"full_name", "email", "phone", "service", "zip", "_hidden"}
    event.refresh_from_db()
    assert event.status == "processed" and event.attempts == 1


def test_an_unknown_question_free_text_and_click_ids_are_all_kept(typeform_source, django_capture_on_commit_callbacks):
    data = sample(hidden={"utm_source": "google", "gclid": "Cj0KCQ-abc", "fbclid": "IwAR-xyz"})
    data = with_question(
        data,
        {"id": "Fq6AgeAbcd06", "ref": "roof_age", "type": "number", "title": "How old is the roof?"},
        {"type": "number", "number": 22},
    )
    data = with_question(
        data,
        {"id": "Fq7MsgAbcd07", "ref": "a7f3c2", "type": "long_text", "title": "Anything else?"},
        {"type": "text", "text": "Leak over the kitchen"},
    )
    with django_capture_on_commit_callbacks(execute=True):
        post(data)
    run_queued_events()
    lead = Lead.objects.get()
    touch = lead.touches.get()
    assert touch.answers["roof_age"] == {"title": "How old is the roof?", "type": "number", "value": 22}
    assert touch.answers["a7f3c2"]["value"] == "Leak over the kitchen"
    assert lead.request_text == "Leak over the kitchen"
    assert (touch.utm, touch.gclid, touch.fbclid) == ({"source": "google"}, "Cj0KCQ-abc", "IwAR-xyz")


def test_a_name_question_without_a_readable_ref_is_found_by_its_title_and_a_national_phone_is_normalized(
    typeform_source, django_capture_on_commit_callbacks
):
    data = sample()
    form = data["form_response"]
    form["definition"]["fields"][0]["ref"] = "3f1b9c0e-aaaa"
    form["answers"][0]["field"]["ref"] = "3f1b9c0e-aaaa"
    form["answers"][2]["phone_number"] = "(212) 555-0147"
    with django_capture_on_commit_callbacks(execute=True):
        post(data)
    run_queued_events()
    contact = Lead.objects.get().contact
    assert (contact.first_name, contact.last_name) == ("Jordan", "Sample")
    assert contact.points.get(kind="phone").value == "+12125550147"


def test_a_response_without_a_name_still_makes_a_lead(typeform_source, django_capture_on_commit_callbacks):
    data = sample()
    data["form_response"]["answers"] = data["form_response"]["answers"][1:]
    with django_capture_on_commit_callbacks(execute=True):
        post(data)
    assert run_queued_events() == ["processed"]
    contact = Lead.objects.get().contact
    assert (contact.first_name, contact.last_name) == ("", "")


def test_a_repeated_response_is_acknowledged_as_a_duplicate_without_reprocessing(
    typeform_source, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        first, second = post(SAMPLE), post(SAMPLE)
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.json() == {**first.json(), "duplicate": True}
    assert run_queued_events() == ["processed"]
    assert InboundEvent.objects.count() == 1 and Lead.objects.count() == 1


def test_a_bad_or_missing_signature_is_refused_with_401_counted_and_not_stored(typeform_source):
    hex_digest = "sha256=" + "0" * 64
    for response in (
        post(SAMPLE, secret="not-the-secret"),
        post(SAMPLE, signature=""),
        post(SAMPLE, signature=hex_digest),
        post(SAMPLE, signature=VECTOR_SIGNATURE.removeprefix("sha256=")),
    ):
        assert response.status_code == 401
        assert response.json()["error"] == "invalid_signature"
    assert not InboundEvent.objects.exists()
    rejection = RejectedDelivery.objects.get()
    assert (rejection.source, rejection.provider, rejection.count) == (typeform_source, "typeform", 4)


def test_a_body_changed_after_signing_is_refused(typeform_source):
    assert post(SAMPLE.replace(b"Jordan", b"Jordon"), signature=VECTOR_SIGNATURE).status_code == 401


def test_a_body_over_one_mebibyte_is_refused_with_413(typeform_source):
    response = post(b"{" + b" " * (1024 * 1024) + b"}")
    assert response.status_code == 413 and response.json()["error"] == "payload_too_large"
    assert not InboundEvent.objects.exists()


def test_a_signed_body_with_unreadable_answers_is_stored_failed_and_answered_200(typeform_source):
    body = json.dumps(sample(answers={"full_name": "Jordan"})).encode()
    response = post(body)
    assert response.status_code == 200
    assert response.json()["status"] == "failed"
    assert response.json()["detail"] == "stored as failed, not processed: form_response.answers is not a list"
    event = InboundEvent.objects.get()
    assert (event.status, event.external_id, bytes(event.body)) == ("failed", TOKEN, body)
    assert event.error == "malformed payload: form_response.answers is not a list"
    assert not OrmQ.objects.exists() and not Lead.objects.exists()
    retry = post(body)  # still not a 404 or 410, and still not processed
    assert retry.status_code == 200
    assert (retry.json()["status"], retry.json()["duplicate"]) == ("failed", True)
    assert InboundEvent.objects.count() == 1 and not OrmQ.objects.exists()


def test_a_signed_body_that_is_not_json_is_stored_failed_under_its_digest_and_answered_200(typeform_source):
    response = post(b"{not json")
    assert response.status_code == 200 and response.json()["status"] == "failed"
    event = InboundEvent.objects.get()
    assert event.status == "failed" and event.external_id.startswith("sha256:")
    assert "invalid JSON" in event.error


def test_an_unknown_source_key_gets_a_json_404():
    response = post(SAMPLE, url="/hooks/typeform/nope/")
    assert response.status_code == 404 and response.json()["error"] == "unknown_source"


def test_a_switched_off_source_is_answered_403_not_404_and_counted(typeform_source):
    Source.objects.filter(pk=typeform_source.pk).update(is_active=False)
    response = post(SAMPLE)
    assert response.status_code == 403 and response.json()["error"] == "source_inactive"
    assert not InboundEvent.objects.exists()
    assert RejectedDelivery.objects.get().last_reason == "source is inactive"


def test_a_source_without_a_secret_refuses_unsigned_deliveries(business):
    Source.objects.create(business=business, key="tf-open", provider="typeform", secret="")
    assert post(SAMPLE, signature="", url="/hooks/typeform/tf-open/").status_code == 401


def test_a_partial_response_is_ignored_and_does_not_hide_the_complete_one(
    typeform_source, django_capture_on_commit_callbacks
):
    partial = sample()
    partial["event_type"] = "form_response_partial"
    with django_capture_on_commit_callbacks(execute=True):
        assert post(partial).status_code == 200
        complete = post(SAMPLE)
    assert complete.json()["duplicate"] is False
    assert run_queued_events() == ["ignored", "processed"]
    assert InboundEvent.objects.get(kind="form_response_partial").external_id == f"form_response_partial:{TOKEN}"
    assert Lead.objects.count() == 1


def test_parsing_reads_multiple_choices_and_falls_back_to_the_event_time():
    data = with_question(
        sample(submitted_at=None),
        {"id": "Fq8Multi0008", "ref": "extras", "type": "multiple_choice", "title": "Extras?"},
        {"type": "choices", "choices": {"labels": ["Gutters", "Skylight"], "other": "Chimney"}},
    )
    received_at = datetime(2026, 3, 14, 16, 0, tzinfo=UTC)
    capture = parse_response(data, received_at=received_at)
    assert capture.answers["extras"]["value"] == ["Gutters", "Skylight", "Chimney"]
    assert capture.occurred_at == received_at
    assert capture.service_hint == "Roof repair"
