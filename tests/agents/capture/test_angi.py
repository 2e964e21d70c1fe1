"""Angi lead pushes: the URL carries the source's secret (Angi signs
nothing), a wrong one is answered as an unknown key, each source has its own
hourly budget, and a lead lands with its category as the campaign, its
interview kept, and SMS consent only where the source states what Angi showed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agents.capture.processing import event_replay
from crm.models import Business, ConsentEvent, ConsentState, InboundEvent, Lead, RejectedDelivery, Source
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).parent / "samples" / "angi_lead.json").read_bytes()
SECRET = "qH7vN2xK9pL4mR8tW3yZ6bC1dF5gJ0sA"
KEY = "angi-main"
URL = f"/hooks/angi/{KEY}/{SECRET}/"
TASK = "Water Heater - Repair or Service"
CONSENT_TEXT = "By submitting, you agree that up to four pros may call and text you about your project."


@pytest.fixture
def angi_source(business: Business) -> Source:
    return Source.objects.create(business=business, key=KEY, provider="angi", secret=SECRET)


def post(body: bytes | dict[str, Any], url: str = URL):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    # Angi's feed sends these two headers and no User-Agent.
    accept = "text/html, image/gif, image/jpeg, *; q=.2, */*; q=.2"
    return Client().post(url, data=data, content_type="application/json", headers={"Accept": accept})


def sample(**changes: Any) -> dict[str, Any]:
    return {**json.loads(SAMPLE), **changes}


def deliver(django_capture_on_commit_callbacks, body: bytes | dict[str, Any] = SAMPLE):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(body)
    assert response.status_code == 200, response.content
    return response


def test_the_url_is_named_and_carries_the_key_and_the_secret():
    assert reverse("hook-angi", kwargs={"source_key": KEY, "path_secret": SECRET}) == URL


def test_the_sample_lead_lands_with_its_source_its_category_as_campaign_and_its_interview(
    angi_source, django_capture_on_commit_callbacks
):
    response = deliver(django_capture_on_commit_callbacks)
    assert response.json()["status"] == "received" and response.json()["duplicate"] is False
    event = InboundEvent.objects.get()
    assert (event.provider, event.kind, event.external_id) == ("angi", "lead", "402177896")
    assert bytes(event.body) == SAMPLE and event.source == angi_source
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    assert lead.request_text.startswith("Water heater is leaking from the bottom")
    contact = lead.contact
    assert (contact.first_name, contact.last_name, contact.postal_code) == ("Dana", "Whitfield", "60630")
    assert contact.address == "4821 W Larkspur Ln, Chicago, IL 60630"
    assert sorted(contact.points.values_list("value", flat=True)) == ["+13125550142", "dana.whitfield@example.com"]
    touch = lead.touches.get()
    assert (touch.channel, touch.provider, touch.campaign_id) == ("form", "angi", TASK)
    assert touch.source == angi_source and touch.inbound_event == event
    assert touch.answers["interview"][1] == {"question": "What is the nature of the problem?", "answer": "Leaking"}
    assert len(touch.answers["interview"]) == 4
    angi = touch.answers["angi"]
    assert angi["fee"] == {"amount": "38.50", "currency": "USD"}
    assert (angi["lead_id"], angi["service_request_id"], angi["lead_type"]) == ("402177896", "158834201", "Lead")
    # Angi's push says nothing of what the homeowner agreed to about texts.
    assert not ConsentEvent.objects.exists()


def test_a_source_that_states_what_angi_showed_records_sms_consent_with_that_text(
    angi_source, django_capture_on_commit_callbacks
):
    angi_source.config = {"sms_consent_text": CONSENT_TEXT}
    angi_source.save(update_fields=["config"])
    deliver(django_capture_on_commit_callbacks)
    run_queued_events()

    point = Lead.objects.get().contact.points.get(kind="phone")
    state = ConsentState.objects.get(contact_point=point)
    assert (state.channel, state.status) == ("sms", "granted")
    event = ConsentEvent.objects.get()
    assert event.evidence["text_shown"] == CONSENT_TEXT and event.inbound_event == InboundEvent.objects.get()


def test_a_wrong_secret_is_answered_as_an_unknown_key_is_and_counted_against_the_source(angi_source, website_source):
    wrong = post(SAMPLE, url=f"/hooks/angi/{KEY}/{SECRET[:-1]}x/")
    unknown = post(SAMPLE, url=f"/hooks/angi/angi-other/{SECRET}/")
    # Another provider's source never answers here, whatever its secret.
    other_provider = post(SAMPLE, url=f"/hooks/angi/{website_source.key}/{website_source.secret}/")

    assert wrong.status_code == unknown.status_code == other_provider.status_code == 404
    assert wrong.json() == {"error": "unknown_source", "detail": f"no source {KEY!r}"}
    assert unknown.json() == {"error": "unknown_source", "detail": "no source 'angi-other'"}
    assert not InboundEvent.objects.exists()
    counted = RejectedDelivery.objects.get(source=angi_source)
    assert (counted.count, counted.last_reason) == (1, "wrong secret in the URL")


def test_a_source_without_a_secret_refuses_every_delivery(angi_source):
    Source.objects.filter(pk=angi_source.pk).update(secret="")
    assert post(SAMPLE, url=f"/hooks/angi/{KEY}//").status_code == 404
    assert post(SAMPLE, url=f"/hooks/angi/{KEY}/x/").status_code == 404
    assert not InboundEvent.objects.exists()


def test_a_switched_off_source_says_so_only_to_a_caller_holding_its_secret(angi_source):
    Source.objects.filter(pk=angi_source.pk).update(is_active=False)
    assert post(SAMPLE, url=f"/hooks/angi/{KEY}/wrong/").status_code == 404
    response = post(SAMPLE)
    assert response.status_code == 403 and response.json()["error"] == "source_inactive"
    assert not InboundEvent.objects.exists()


def test_a_repeated_delivery_is_acknowledged_without_a_second_event_or_lead(
    angi_source, django_capture_on_commit_callbacks
):
    first = deliver(django_capture_on_commit_callbacks)
    run_queued_events()
    again = deliver(django_capture_on_commit_callbacks)
    assert again.json() == {**first.json(), "status": "processed", "duplicate": True}
    assert run_queued_events() == []
    assert InboundEvent.objects.count() == Lead.objects.count() == 1


def test_a_malformed_lead_is_stored_failed_answered_400_and_stays_replayable(angi_source):
    body = json.dumps(sample(interview="Tank (gas); Leaking")).encode()
    response = post(body)
    assert response.status_code == 400
    assert response.json()["error"] == "malformed_payload"
    assert response.json()["detail"] == "stored as failed, not processed: interview is not a list"
    event = InboundEvent.objects.get()
    assert (event.status, event.external_id, bytes(event.body)) == ("failed", "402177896", body)
    assert event.error == "malformed payload: interview is not a list"
    assert run_queued_events() == []  # stored failed: no loop takes it on its own

    assert event_replay(event) == "failed"  # still unreadable, still there to look at
    event.refresh_from_db()
    assert event.attempts == 1 and not Lead.objects.exists()


def test_a_body_that_is_not_json_is_stored_failed_under_its_digest(angi_source):
    response = post(b'{"leadOid": 402177896, "firstName": "Da')
    assert response.status_code == 400
    event = InboundEvent.objects.get()
    assert event.status == "failed" and event.external_id.startswith("sha256:")


def test_each_source_has_its_own_hourly_budget_and_a_lead_over_it_is_refused_429_and_not_stored(angi_source, business):
    angi_source.config = {"rate_limit_per_hour": 2}
    angi_source.save(update_fields=["config"])
    other = Source.objects.create(business=business, key="angi-second", provider="angi", secret=SECRET)

    answers = [post(sample(leadOid=402177900 + n)).status_code for n in range(3)]
    assert answers == [200, 200, 429]
    refused = post(sample(leadOid=402177999))
    assert refused.status_code == 429
    assert refused.json() == {
        "error": "rate_limited",
        "detail": "more than 2 leads this hour for this source; retry later",
    }
    assert InboundEvent.objects.filter(source=angi_source).count() == 2
    assert RejectedDelivery.objects.get(source=angi_source).last_reason == "rate limited"
    # Another source's budget is untouched.
    assert post(sample(leadOid=402178000), url=f"/hooks/angi/{other.key}/{SECRET}/").status_code == 200
