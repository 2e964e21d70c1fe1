"""Meta Lead Ads: the subscription check, signed batched deliveries stored one
event per lead, and leads read from a real local Graph API server."""

from __future__ import annotations

import copy
import hashlib
import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agents.capture.processing import event_replay
from agents.capture.providers.meta import lead_capture, meta_signature
from agents.meta_graph import LEAD_FIELDS, backoff_delays
from crm.models import Business, InboundEvent, Lead, RejectedDelivery, Source
from tests.helpers.capture import run_queued_events
from tests.helpers.graph import GraphServer, graph_running

pytestmark = pytest.mark.django_db

SAMPLES = Path(__file__).parent / "samples"
VECTORS = json.loads((SAMPLES / "meta_signature_vectors.json").read_text())["meta"]
APP_SECRET = VECTORS["app_secret"]
VERIFY_TOKEN = "verify-me-0123"
PAGE_ID = "100000000000001"
LEADGEN_ID = "1234567890123456"
WEBHOOK = (SAMPLES / "meta_leadgen_webhook.json").read_bytes()
GRAPH_LEAD = json.loads((SAMPLES / "meta_lead_graph.json").read_text())
URL = "/hooks/meta/"


def sign(body: bytes, secret: str = APP_SECRET) -> str:
    return meta_signature(secret, body)


def post(client: Client, body: bytes, signature: str | None = None) -> Any:
    headers = {} if signature == "" else {"X-Hub-Signature-256": signature or sign(body)}
    return client.post(URL, data=body, content_type="application/json", headers=headers)


def leadgen_body(*leadgen_ids: str, page_id: str = PAGE_ID) -> bytes:
    """A delivery in Meta's shape; ids after the first go in a second entry,
    so a batch holds several entries and several changes."""
    changes = [
        {
            "field": "leadgen",
            "value": {"leadgen_id": lid, "page_id": page_id, "form_id": "900000000000001", "created_time": 1773500531},
        }
        for lid in leadgen_ids
    ]
    entries = [{"id": page_id, "time": 1773500532, "changes": changes[:1]}]
    if len(changes) > 1:
        entries.append({"id": page_id, "time": 1773500533, "changes": changes[1:]})
    return json.dumps({"object": "page", "entry": entries}).encode()


@pytest.fixture
def graph(settings: Any) -> Iterator[GraphServer]:
    with graph_running(settings, leads={LEADGEN_ID: GRAPH_LEAD}) as server:
        yield server


@pytest.fixture(autouse=True)
def meta_settings(settings: Any) -> None:
    settings.META_APP_SECRET = APP_SECRET
    settings.META_VERIFY_TOKEN = VERIFY_TOKEN


@pytest.fixture
def meta_source(business: Business) -> Source:
    return Source.objects.create(
        business=business, key="fb", provider="meta", config={"page_id": PAGE_ID}, page_token="page-token"
    )


@pytest.mark.parametrize("name", sorted(VECTORS["files"]))
def test_the_sample_bytes_reproduce_the_published_signatures(name: str) -> None:
    body, published = (SAMPLES / name).read_bytes(), VECTORS["files"][name]
    assert meta_signature(APP_SECRET, body) == published["X-Hub-Signature-256"]
    assert meta_signature(APP_SECRET, body, "sha1") == published["X-Hub-Signature(legacy sha1)"]


def test_the_subscription_check_answers_the_challenge_as_plain_text() -> None:
    response = Client().get(
        reverse("hook-meta"),
        {"hub.mode": "subscribe", "hub.challenge": "1158201444", "hub.verify_token": VERIFY_TOKEN},
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert response.content == b"1158201444"


@pytest.mark.parametrize(
    "query",
    [
        {"hub.mode": "subscribe", "hub.challenge": "1", "hub.verify_token": "wrong"},
        {"hub.mode": "unsubscribe", "hub.challenge": "1", "hub.verify_token": VERIFY_TOKEN},
        {"hub.mode": "subscribe", "hub.challenge": "1"},
    ],
    ids=["wrong-token", "wrong-mode", "no-token"],
)
def test_a_subscription_check_without_our_token_is_refused_with_403(query: dict[str, str]) -> None:
    response = Client().get(URL, query)
    assert response.status_code == 403
    assert response.json()["error"] == "invalid_verify_token"


def test_the_subscription_check_is_refused_while_no_verify_token_is_configured(settings: Any) -> None:
    settings.META_VERIFY_TOKEN = ""
    response = Client().get(URL, {"hub.mode": "subscribe", "hub.challenge": "1", "hub.verify_token": ""})
    assert response.status_code == 403


def test_a_lead_is_stored_raw_then_read_from_the_graph_api_into_a_lead(
    meta_source: Source, graph: GraphServer, django_capture_on_commit_callbacks: Any
) -> None:
    published = VECTORS["files"]["meta_leadgen_webhook.json"]["X-Hub-Signature-256"]
    with django_capture_on_commit_callbacks(execute=True):
        response = post(Client(), WEBHOOK, signature=published)

    assert response.status_code == 200
    assert response.json()["duplicate"] is False
    event = InboundEvent.objects.get()
    assert (event.provider, event.kind, event.external_id) == ("meta", "leadgen", LEADGEN_ID)
    assert (event.source, event.business, event.status) == (meta_source, meta_source.business, "received")
    assert bytes(event.body) == WEBHOOK
    assert event.headers["X-Hub-Signature-256"] == published
    assert graph.seen == []  # nothing is fetched while Meta waits for its 200

    assert run_queued_events() == ["processed"]
    [request] = graph.seen
    assert request["path"] == f"/v21.0/{LEADGEN_ID}"
    assert request["authorization"] == "Bearer page-token"
    assert "access_token" not in request["query"]
    assert request["query"]["fields"] == [LEAD_FIELDS]
    assert "field_data" in LEAD_FIELDS and "is_organic" in LEAD_FIELDS

    lead = Lead.objects.get()
    contact = lead.contact
    assert (contact.first_name, contact.last_name, contact.postal_code) == ("Jordan", "Sample", "94105")
    assert sorted(contact.points.values_list("kind", "value")) == [
        ("email", "jordan.sample@example.com"),
        ("phone", "+15555550123"),
    ]
    touch = lead.touches.get()
    assert (touch.provider, touch.channel, touch.source, touch.inbound_event) == ("meta", "form", meta_source, event)
    assert (touch.campaign_id, touch.adgroup_id, touch.ad_id, touch.form_id) == (
        "120200000000000301",
        "120200000000000201",
        "120200000000000101",
        "900000000000001",
    )
    assert touch.fbclid == ""
    # Meta's id of the lead: what the Conversions API for CRM matches its later stages on.
    assert touch.meta_lead_id == event.external_id and touch.meta_lead_id.isdigit()
    assert touch.answers == {"what_service_do_you_need?": "roof_repair", "is_organic": False, "platform": "fb"}
    assert touch.received_at == datetime(2026, 3, 14, 15, 2, 11, tzinfo=UTC)
    event.refresh_from_db()
    assert (event.status, event.error, event.attempts) == ("processed", "", 1)


def test_graph_errors_are_retried_until_the_lead_is_read(
    meta_source: Source, graph: GraphServer, django_capture_on_commit_callbacks: Any
) -> None:
    graph.plan = [500, 503]
    with django_capture_on_commit_callbacks(execute=True):
        post(Client(), WEBHOOK)

    assert run_queued_events() == ["processed"]
    assert len(graph.seen) == 3
    assert Lead.objects.count() == 1


@pytest.mark.parametrize("outage", [500, "stall"], ids=["server-error", "read-timeout"])
def test_a_graph_api_that_stays_down_leaves_the_event_failed_until_a_replay(
    outage: int | str, meta_source: Source, graph: GraphServer, django_capture_on_commit_callbacks: Any
) -> None:
    graph.default = outage
    with django_capture_on_commit_callbacks(execute=True):
        post(Client(), WEBHOOK)

    assert run_queued_events() == ["failed"]
    assert len(graph.seen) == 3
    event = InboundEvent.objects.get()
    assert event.status == "failed"
    assert f"Graph API unavailable for lead {LEADGEN_ID} after 3 attempts" in event.error
    assert ("HTTP 500" if outage == 500 else "ReadTimeout") in event.error
    assert "page-token" not in event.error
    assert not Lead.objects.exists()

    graph.recover()
    assert event_replay(event) == "processed"
    event.refresh_from_db()
    assert (event.status, event.error, event.attempts) == ("processed", "", 2)
    assert event_replay(event) == "skipped"
    with django_capture_on_commit_callbacks(execute=True):
        again = post(Client(), WEBHOOK)
    assert again.json()["duplicate"] is True
    assert run_queued_events() == []
    assert Lead.objects.count() == 1 and InboundEvent.objects.count() == 1


def test_an_unreachable_graph_api_fails_without_leaking_the_page_token(
    meta_source: Source, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    with socket.socket() as closed:  # a port nobody listens on once this block ends
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings.META_GRAPH_URL = f"http://127.0.0.1:{port}/v21.0"
    settings.META_GRAPH_RETRY_DELAY = 0.0
    with django_capture_on_commit_callbacks(execute=True):
        post(Client(), WEBHOOK)

    assert run_queued_events() == ["failed"]
    error = InboundEvent.objects.get().error
    assert "after 3 attempts: ConnectionError" in error
    assert "page-token" not in error


def test_a_graph_refusal_is_not_retried(
    meta_source: Source, graph: GraphServer, django_capture_on_commit_callbacks: Any
) -> None:
    graph.plan = [400]
    with django_capture_on_commit_callbacks(execute=True):
        post(Client(), WEBHOOK)

    assert run_queued_events() == ["failed"]
    assert len(graph.seen) == 1
    event = InboundEvent.objects.get()
    assert "HTTP 400: Synthetic error 400, code 2" in event.error


def test_a_batch_of_two_leads_is_stored_and_processed_as_two_events(
    meta_source: Source, graph: GraphServer, django_capture_on_commit_callbacks: Any
) -> None:
    second = copy.deepcopy(GRAPH_LEAD)
    second["id"] = "1234567890123457"
    second["field_data"] = [
        {"name": "first_name", "values": ["Rosa"]},
        {"name": "last_name", "values": ["Diaz"]},
        {"name": "phone_number", "values": ["+12125550147"]},
    ]
    graph.leads[second["id"]] = second
    body = leadgen_body(LEADGEN_ID, second["id"])
    with django_capture_on_commit_callbacks(execute=True):
        response = post(Client(), body)

    assert response.status_code == 200
    assert [e["duplicate"] for e in response.json()["events"]] == [False, False]
    events = InboundEvent.objects.order_by("external_id")
    assert [e.external_id for e in events] == [LEADGEN_ID, second["id"]]
    assert all(bytes(e.body) == body for e in events)
    assert run_queued_events() == ["processed", "processed"]
    names = sorted(Lead.objects.values_list("contact__first_name", flat=True))
    assert names == ["Jordan", "Rosa"]


def test_a_repeated_lead_is_a_duplicate_and_not_processed_again(
    meta_source: Source, graph: GraphServer, django_capture_on_commit_callbacks: Any
) -> None:
    client = Client()
    with django_capture_on_commit_callbacks(execute=True):
        first = post(client, WEBHOOK)
        # Meta redelivers the same lead, here batched with nothing new.
        second = post(client, leadgen_body(LEADGEN_ID))
    assert (first.json()["duplicate"], second.json()["duplicate"]) == (False, True)
    assert run_queued_events() == ["processed"]
    assert len(graph.seen) == 1
    assert InboundEvent.objects.count() == 1 and Lead.objects.count() == 1


@pytest.mark.parametrize(
    "signature",
    ["", sign(WEBHOOK, "another-secret"), "sha1=ffde879466579d20d1ba9bd288b2653ec120f2ac", "sha256=zz"],
    ids=["missing", "other-secret", "legacy-sha1-only", "garbage"],
)
def test_a_bad_or_missing_signature_is_refused_counted_and_not_stored(signature: str) -> None:
    response = post(Client(), WEBHOOK, signature=signature)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_signature"
    assert not InboundEvent.objects.exists()
    rejection = RejectedDelivery.objects.get()
    assert (rejection.provider, rejection.source, rejection.count) == ("meta", None, 1)


def test_every_delivery_is_refused_while_no_app_secret_is_configured(settings: Any) -> None:
    settings.META_APP_SECRET = ""
    response = post(Client(), WEBHOOK, signature=sign(WEBHOOK, ""))
    assert response.status_code == 401
    assert not InboundEvent.objects.exists()


def test_a_signature_over_reserialised_json_is_refused() -> None:
    tampered = json.dumps(json.loads(WEBHOOK)).encode()
    response = post(Client(), tampered, signature=sign(WEBHOOK))
    assert response.status_code == 401


def test_a_body_over_one_mebibyte_is_refused_with_413() -> None:
    body = b'{"object": "page", "entry": []' + b" " * (1024 * 1024) + b"}"
    response = post(Client(), body)
    assert response.status_code == 413
    assert response.json()["error"] == "payload_too_large"
    assert not InboundEvent.objects.exists()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "a JSON object is expected"),
        (b'{"object": "user", "entry": []}', "unexpected object 'user'"),
        (b'{"object": "page"}', "entry[] is missing"),
    ],
    ids=["not-json", "not-an-object", "unknown-object", "no-entries"],
)
def test_a_signed_body_we_cannot_read_is_stored_failed_and_answered_200(
    body: bytes, reason: str, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = post(Client(), body)

    assert response.status_code == 200  # a non-2xx only makes Meta resend it for 36 hours
    assert response.json()["events"][0]["status"] == "failed"
    event = InboundEvent.objects.get()
    assert (event.provider, event.kind, event.status, event.business) == ("meta", "delivery", "failed", None)
    assert event.external_id == "sha256:" + hashlib.sha256(body).hexdigest()
    assert reason in event.error and bytes(event.body) == body
    assert run_queued_events() == []
    assert event_replay(event) == "failed"  # still unreadable, still there to look at


def test_a_partly_unreadable_batch_keeps_its_good_leads_and_the_whole_body_failed(
    meta_source: Source, graph: GraphServer, django_capture_on_commit_callbacks: Any
) -> None:
    data = json.loads(leadgen_body(LEADGEN_ID))
    data["entry"][0]["changes"].append({"field": "leadgen", "value": {"page_id": PAGE_ID}})
    body = json.dumps(data).encode()
    with django_capture_on_commit_callbacks(execute=True):
        response = post(Client(), body)

    assert response.status_code == 200
    assert sorted(InboundEvent.objects.values_list("kind", "status")) == [
        ("delivery", "failed"),
        ("leadgen", "received"),
    ]
    assert "entry[0].changes[1] has no value.leadgen_id" in InboundEvent.objects.get(kind="delivery").error
    assert run_queued_events() == ["processed"]


def test_a_delivery_with_nothing_for_us_is_stored_then_ignored(django_capture_on_commit_callbacks: Any) -> None:
    body = json.dumps(
        {"object": "page", "entry": [{"id": PAGE_ID, "time": 1, "changes": [{"field": "feed", "value": {}}]}]}
    ).encode()
    with django_capture_on_commit_callbacks(execute=True):
        response = post(Client(), body)

    assert response.status_code == 200
    assert run_queued_events() == ["ignored"]
    assert InboundEvent.objects.get().kind == "delivery"


def test_a_lead_for_an_unknown_page_fails_until_its_source_is_configured(
    business: Business, graph: GraphServer, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = post(Client(), WEBHOOK)

    assert response.status_code == 200
    event = InboundEvent.objects.get()
    assert (event.source, event.business) == (None, None)
    assert run_queued_events() == ["failed"]
    event.refresh_from_db()
    assert f"no active meta source has page_id '{PAGE_ID}'" in event.error
    assert graph.seen == []

    source = Source.objects.create(
        business=business, key="fb", provider="meta", config={"page_id": PAGE_ID}, page_token="page-token"
    )
    assert event_replay(event) == "processed"
    event.refresh_from_db()
    assert (event.source, event.business) == (source, business)
    assert Lead.objects.get().touches.get().source == source


def test_a_page_source_without_a_token_fails_with_the_reason(
    business: Business, graph: GraphServer, django_capture_on_commit_callbacks: Any
) -> None:
    Source.objects.create(business=business, key="fb", provider="meta", config={"page_id": PAGE_ID})
    with django_capture_on_commit_callbacks(execute=True):
        post(Client(), WEBHOOK)

    assert run_queued_events() == ["failed"]
    assert "has no access_token" in InboundEvent.objects.get().error


def test_backoff_waits_double_between_attempts() -> None:
    assert backoff_delays(3, 0.5) == [0.5, 1.0]
    assert backoff_delays(1, 0.5) == []


def test_a_graph_lead_keeps_every_answer_and_falls_back_to_the_notification() -> None:
    received = datetime(2026, 3, 15, tzinfo=UTC)
    lead = {
        "id": "1",
        "is_organic": True,
        "field_data": [
            {"name": "first_name", "values": ["Ana"]},
            {"name": "last_name", "values": ["Lima"]},
            {"name": "full_name", "values": ["Ignored When Split Names Exist"]},
            {"name": "email", "values": ["ana@example.com"]},
            {"name": "work_phone_number", "values": ["+12125550148"]},
            {"name": "post_code", "values": ["60601"]},
            {"name": "street_address", "values": ["1 Main St"]},
            {"name": "city", "values": ["Chicago"]},
            {"name": "which_rooms?", "values": ["kitchen", "attic"]},
            {"name": "preferred_service", "values": ["heat_pump"]},
        ],
    }
    capture = lead_capture(
        lead, notified={"ad_id": "77", "form_id": "88", "created_time": 1773500531}, received_at=received
    )

    assert (capture.first_name, capture.last_name, capture.postal_code) == ("Ana", "Lima", "60601")
    assert (capture.emails, capture.phones) == (["ana@example.com"], ["+12125550148"])
    assert capture.address == "1 Main St, Chicago"
    assert capture.answers == {
        "city": "Chicago",
        "which_rooms?": ["kitchen", "attic"],
        "preferred_service": "heat_pump",
        "is_organic": True,
    }
    assert capture.service_hint == "heat pump"
    assert (capture.touch["ad_id"], capture.touch["form_id"], capture.touch["adgroup_id"]) == ("77", "88", "")
    assert capture.occurred_at == datetime.fromtimestamp(1773500531, tz=UTC)
    assert capture.is_test is False


def test_a_lead_from_metas_testing_tool_is_marked_a_test() -> None:
    lead = {"field_data": [{"name": "email", "values": ["<test lead: dummy data for email>"]}]}
    received = datetime(2026, 3, 15, tzinfo=UTC)
    capture = lead_capture(lead, notified={}, received_at=received)
    assert capture.is_test is True and capture.occurred_at == received
