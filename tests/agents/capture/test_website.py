"""Website forms, server to server, and the raw-first rules every hook follows."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from crm.models import ConsentState, InboundEvent, Lead, RejectedDelivery
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

URL = "/hooks/forms/site/"
FORM = {
    "first_name": "Rosa",
    "last_name": "Diaz",
    "phone": "(212) 555-0147",
    "email": "Rosa.Diaz@Example.com",
    "postal_code": "60601",
    "message": "Furnace makes a banging noise",
    "consent": True,
    "consent_text": "You agree to calls and texts from Acme.",
    "page_url": "https://acme.example/quote",
    "utm_source": "google",
    "utm_campaign": "fall-tuneup",
    "gclid": "Cj0KCQ-abc",
    "wbraid": "WBR-web-to-app-1",
    "favourite_colour": "teal",
}


def post(client: Client, body: dict | bytes, secret: str = "site-secret-123", **headers):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(
        URL, data=data, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}", **headers
    )


def test_a_form_is_stored_raw_then_processed_into_a_lead(website_source, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(Client(), FORM)
    assert response.status_code == 200
    event = InboundEvent.objects.get()
    assert bytes(event.body) == json.dumps(FORM).encode()
    assert event.status == "received" and event.headers["Content-Type"] == "application/json"
    assert "Authorization" not in event.headers
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    assert (lead.contact.first_name, lead.contact.last_name, lead.contact.postal_code) == ("Rosa", "Diaz", "60601")
    assert sorted(lead.contact.points.values_list("value", flat=True)) == ["+12125550147", "rosa.diaz@example.com"]
    touch = lead.touches.get()
    assert touch.inbound_event == event and touch.source == website_source
    assert touch.utm == {"source": "google", "campaign": "fall-tuneup"} and touch.gclid == "Cj0KCQ-abc"
    assert (touch.wbraid, touch.gbraid) == ("WBR-web-to-app-1", "")  # Google's other click ids
    assert touch.answers == {"favourite_colour": "teal"}
    assert lead.request_text == "Furnace makes a banging noise"
    sms = ConsentState.objects.get(contact_point__value="+12125550147", channel="sms")
    assert sms.status == "granted"
    assert sms.last_event.evidence["text_shown"] == "You agree to calls and texts from Acme."
    event.refresh_from_db()
    assert event.status == "processed" and event.attempts == 1


def test_a_repeated_delivery_is_acknowledged_without_reprocessing(website_source, django_capture_on_commit_callbacks):
    client = Client()
    with django_capture_on_commit_callbacks(execute=True):
        first = post(client, FORM, HTTP_IDEMPOTENCY_KEY="abc-1")
        second = post(client, FORM, HTTP_IDEMPOTENCY_KEY="abc-1")
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.json()["duplicate"] is True
    assert run_queued_events() == ["processed"]
    assert InboundEvent.objects.count() == 1 and Lead.objects.count() == 1


def test_a_bad_secret_is_refused_counted_and_not_stored(website_source):
    response = post(Client(), FORM, secret="wrong")
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_signature"
    assert not InboundEvent.objects.exists()
    post(Client(), FORM, secret="")
    rejection = RejectedDelivery.objects.get()
    assert (rejection.source, rejection.count) == (website_source, 2)


def test_a_body_over_one_mebibyte_is_refused_with_413(website_source):
    response = post(Client(), b"{" + b" " * (1024 * 1024) + b"}")
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"
    assert not InboundEvent.objects.exists()


def test_a_signed_malformed_body_is_stored_failed_and_answered_400(website_source):
    response = post(Client(), b"{not json")
    assert response.status_code == 400
    event = InboundEvent.objects.get()
    assert event.status == "failed" and "invalid JSON" in event.error
    assert bytes(event.body) == b"{not json"


def test_an_unknown_source_gets_a_json_404():
    response = Client().post("/hooks/forms/nope/", data="{}", content_type="application/json")
    assert response.status_code == 404 and response.json()["error"] == "unknown_source"


def test_a_form_without_any_way_to_reach_the_person_still_makes_a_lead(
    website_source, manager, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        post(Client(), {"name": "Nobody Known", "message": "call me maybe"})
    run_queued_events()
    lead = Lead.objects.get()
    # Capture flagged it and opened one task to find a way to reach the
    # person; the new-lead step, run with the capture, stopped on that same
    # task (its next action) after the manager queue took the lead (the
    # team has no setter).
    assert lead.exceptions == ["missing_identity", "no_eligible_owner"]
    task = lead.tasks.get(kind="exception", title__startswith="Find a way to reach")
    assert task.owner == manager and lead.owner == manager
    assert lead.next_action == task.title
    assert lead.tasks.filter(kind="exception").count() == 2  # and "Find an owner for this lead"


def test_an_unparseable_phone_is_kept_as_typed_and_flagged(website_source, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        post(Client(), {"name": "Al Typo", "phone": "call me at 55"})
    run_queued_events()
    lead = Lead.objects.get()
    point = lead.contact.points.get()
    assert (point.value, point.is_valid) == ("call me at 55", False)
    assert "invalid_phone" in lead.exceptions


@pytest.fixture
def hosted_source(business):
    from crm.models import Source

    return Source.objects.create(business=business, key="quote", provider="hosted_form")


def test_the_hosted_form_refuses_a_post_without_its_csrf_token(hosted_source):
    response = Client(enforce_csrf_checks=True).post("/f/quote/", {"phone": "2125550147"})
    assert response.status_code == 403
    assert not InboundEvent.objects.exists()


def test_the_hosted_form_rate_limits_one_address(hosted_source):
    from django.core.cache import cache

    cache.clear()
    client = Client()
    statuses = [
        client.post(
            "/f/quote/", {"phone": f"21255501{i:02d}", "nonce": f"n{i}"}, REMOTE_ADDR="198.51.100.9"
        ).status_code
        for i in range(12)
    ]
    assert statuses[:10] == [200] * 10 and statuses[10:] == [429, 429]
    assert InboundEvent.objects.count() == 10
    other = client.post("/f/quote/", {"phone": "2125550147", "nonce": "other"}, REMOTE_ADDR="198.51.100.10")
    assert other.status_code == 200


def test_the_hosted_form_stores_a_double_submit_once(hosted_source):
    client = Client()
    for _ in range(2):
        assert client.post("/f/quote/", {"phone": "2125550147", "nonce": "same"}).status_code == 200
    event = InboundEvent.objects.get()
    # The test client posts multipart, as some embeds do: it is parsed too.
    assert event.headers["Content-Type"].startswith("multipart/form-data")
    from agents.capture.processing import event_process

    assert event_process(event.pk) == "processed"
    assert Lead.objects.get().contact.points.get().value == "+12125550147"


@pytest.mark.parametrize(
    "change",
    [
        {"phone": "1" * 100_000},
        {"first_name": "Ro\u0000sa"},
        {"message": "bang\u0000bang"},
        {"favourite_colour": "te\u0000al"},
        {"utm_source": "x" * 100_000},
    ],
    ids=["100k-phone", "nul-in-name", "nul-in-message", "nul-in-answer", "100k-utm"],
)
def test_a_form_the_database_cannot_hold_is_stored_malformed_once_never_retried(
    website_source, django_capture_on_commit_callbacks, change
):
    """The same bytes fail the same way: a value too long for its column or
    a NUL byte (which PostgreSQL text cannot hold) either becomes a lead or
    fails once, kept with its reason, never five times."""
    with django_capture_on_commit_callbacks(execute=True):
        response = post(Client(), {**FORM, **change})
    assert response.status_code in (200, 400)
    outcome = run_queued_events() if response.status_code == 200 else []
    event = InboundEvent.objects.get()
    assert event.attempts <= 1 and event.retry_at is None, (outcome, event.status, event.error)
    assert event.status in ("processed", "failed")
    if event.status == "failed":
        assert event.error.startswith("malformed payload"), event.error
