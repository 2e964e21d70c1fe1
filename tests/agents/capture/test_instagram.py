"""Instagram DMs on the Meta endpoint: a handle makes a contact, a DM makes a
lead with its message, a later DM is a reply, and our own echoes are ignored."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from agents.capture.processing import event_replay
from crm.models import Business, ContactPoint, InboundEvent, Lead, Message, Source
from tests.agents.capture.test_meta import APP_SECRET, SAMPLES, VECTORS, post, sign
from tests.helpers.capture import run_queued_events

pytestmark = pytest.mark.django_db

ACCOUNT_ID = "17841400000000001"
SENDER = "1122334455667788"
DM_SAMPLE = (SAMPLES / "instagram_dm.json").read_bytes()
SAMPLE = json.loads(DM_SAMPLE)
MID = SAMPLE["entry"][0]["messaging"][0]["message"]["mid"]
TEXT = "Hi! Can I get a quote for a roof repair? Señor José referred me."


@pytest.fixture(autouse=True)
def meta_settings(settings: Any) -> None:
    settings.META_APP_SECRET = APP_SECRET


@pytest.fixture
def ig_source(business: Business) -> Source:
    return Source.objects.create(business=business, key="ig", provider="instagram", config={"account_id": ACCOUNT_ID})


def dm_body(*messagings: dict[str, Any]) -> bytes:
    # json.dumps escapes non-ASCII as \uXXXX, as Meta does.
    return json.dumps(
        {"object": "instagram", "entry": [{"id": ACCOUNT_ID, "time": 1773500700000, "messaging": list(messagings)}]}
    ).encode()


def dm(mid: str, text: str, *, sender: str = SENDER, timestamp: int = 1773500700000, **extra: Any) -> dict[str, Any]:
    return {
        "sender": {"id": sender},
        "recipient": {"id": ACCOUNT_ID if sender != ACCOUNT_ID else SENDER},
        "timestamp": timestamp,
        "message": {"mid": mid, "text": text, **extra},
    }


def deliver(body: bytes, django_capture_on_commit_callbacks: Any, signature: str | None = None) -> Any:
    with django_capture_on_commit_callbacks(execute=True):
        response = post(Client(), body, signature=signature)
    assert response.status_code == 200
    return response


def test_the_escaped_sample_bytes_reproduce_the_published_signature() -> None:
    assert b"Se\\u00f1or Jos\\u00e9" in DM_SAMPLE
    published = VECTORS["files"]["instagram_dm.json"]["X-Hub-Signature-256"]
    assert sign(DM_SAMPLE) == published
    # Hashing the decoded text instead of the bytes received gives another signature.
    assert sign(json.dumps(SAMPLE, ensure_ascii=False, indent=2).encode() + b"\n") != published


def test_a_dm_makes_a_contact_with_an_instagram_handle_a_lead_and_an_inbound_message(
    ig_source: Source, django_capture_on_commit_callbacks: Any
) -> None:
    published = VECTORS["files"]["instagram_dm.json"]["X-Hub-Signature-256"]
    deliver(DM_SAMPLE, django_capture_on_commit_callbacks, signature=published)

    event = InboundEvent.objects.get()
    assert (event.provider, event.kind, event.external_id) == ("instagram", "instagram_dm", MID)
    assert (event.source, event.business) == (ig_source, ig_source.business)
    assert bytes(event.body) == DM_SAMPLE
    assert run_queued_events() == ["processed"]

    lead = Lead.objects.get()
    point = ContactPoint.objects.get()
    assert (point.contact, point.kind, point.value) == (lead.contact, "instagram", SENDER)
    message = Message.objects.get()
    assert (message.lead, message.contact, message.contact_point) == (lead, lead.contact, point)
    assert (message.direction, message.channel, message.status) == ("in", "dm", "received")
    assert message.body == TEXT
    assert (message.from_number, message.to, message.inbound_event) == (SENDER, ACCOUNT_ID, event)
    # The full mid (116 characters) is the event's id; the message keeps a digest that fits.
    assert message.provider_sid == MID  # the whole mid fits (provider_sid holds 255)
    touch = lead.touches.get()
    assert (touch.provider, touch.channel, touch.source) == ("instagram", "dm", ig_source)
    assert touch.received_at == datetime.fromtimestamp(1773500599.876, tz=UTC)  # milliseconds
    assert lead.request_text == TEXT


def test_an_echo_of_our_own_message_is_ignored(ig_source: Source, django_capture_on_commit_callbacks: Any) -> None:
    deliver(
        dm_body(dm("mid.echo.1", "Thanks, we will call you", sender=ACCOUNT_ID, is_echo=True)),
        django_capture_on_commit_callbacks,
    )

    assert run_queued_events() == ["ignored"]
    assert InboundEvent.objects.get().status == "ignored"
    assert not Lead.objects.exists() and not Message.objects.exists() and not ContactPoint.objects.exists()


def test_a_second_dm_from_the_same_sender_is_a_reply_on_the_same_lead(
    ig_source: Source, django_capture_on_commit_callbacks: Any
) -> None:
    deliver(DM_SAMPLE, django_capture_on_commit_callbacks)
    deliver(dm_body(dm("mid.second", "Tomorrow after 3 works — gracias! 🙂")), django_capture_on_commit_callbacks)

    assert run_queued_events() == ["processed", "processed"]
    lead = Lead.objects.get()
    assert list(lead.messages.order_by("id").values_list("body", flat=True)) == [
        TEXT,
        "Tomorrow after 3 works — gracias! 🙂",
    ]
    assert lead.touches.count() == 1
    assert ContactPoint.objects.count() == 1


def test_a_repeated_dm_is_a_duplicate_and_not_processed_again(
    ig_source: Source, django_capture_on_commit_callbacks: Any
) -> None:
    deliver(DM_SAMPLE, django_capture_on_commit_callbacks)
    again = deliver(dm_body(SAMPLE["entry"][0]["messaging"][0]), django_capture_on_commit_callbacks)

    assert again.json()["duplicate"] is True
    assert run_queued_events() == ["processed"]
    assert Message.objects.count() == 1


def test_the_dashboard_test_shape_with_changes_is_processed_too(
    ig_source: Source, django_capture_on_commit_callbacks: Any
) -> None:
    body = json.dumps(
        {
            "object": "instagram",
            "entry": [
                {"id": ACCOUNT_ID, "time": 1, "changes": [{"field": "messages", "value": dm("mid.test", "test")}]}
            ],
        }
    ).encode()
    deliver(body, django_capture_on_commit_callbacks)

    assert run_queued_events() == ["processed"]
    assert Message.objects.get().body == "test"


def test_a_batch_stores_one_event_per_message_and_sighting(
    ig_source: Source, django_capture_on_commit_callbacks: Any
) -> None:
    read_receipt = {"sender": {"id": SENDER}, "recipient": {"id": ACCOUNT_ID}, "timestamp": 1, "read": {"mid": "x"}}
    reaction = {"sender": {"id": SENDER}, "recipient": {"id": ACCOUNT_ID}, "timestamp": 1, "reaction": {"mid": "x"}}
    other = copy.deepcopy(dm("mid.other", "Hello from someone else", sender="99887766"))
    response = deliver(dm_body(dm("mid.a", "first"), read_receipt, reaction, other), django_capture_on_commit_callbacks)

    assert len(response.json()["events"]) == 3
    kinds = sorted(InboundEvent.objects.values_list("kind", "external_id"))
    assert kinds[:2] == [("instagram_dm", "mid.a"), ("instagram_dm", "mid.other")]
    assert kinds[2][0] == "instagram_seen" and kinds[2][1].startswith("seen:")
    # The sighting of a message that is not ours proves nothing: ignored.
    assert sorted(run_queued_events()) == ["ignored", "processed", "processed"]
    assert Lead.objects.count() == 2


def test_a_dm_to_an_unknown_account_fails_until_its_source_is_configured(
    business: Business, django_capture_on_commit_callbacks: Any
) -> None:
    deliver(DM_SAMPLE, django_capture_on_commit_callbacks)

    assert run_queued_events() == ["failed"]
    event = InboundEvent.objects.get()
    assert f"no active instagram source has account_id '{ACCOUNT_ID}'" in event.error
    source = Source.objects.create(business=business, key="ig", provider="instagram", config={"account_id": ACCOUNT_ID})
    assert event_replay(event) == "processed"
    event.refresh_from_db()
    assert event.source == source
    assert Message.objects.get().body == TEXT


def test_a_photo_without_text_is_recorded_with_its_link(
    ig_source: Source, django_capture_on_commit_callbacks: Any
) -> None:
    photo = dm("mid.photo", "")
    photo["message"] = {
        "mid": "mid.photo",
        "attachments": [{"type": "image", "payload": {"url": "https://cdn.example/p.jpg"}}],
    }
    deliver(dm_body(photo), django_capture_on_commit_callbacks)

    assert run_queued_events() == ["processed"]
    assert Message.objects.get().body == "[image] https://cdn.example/p.jpg"
