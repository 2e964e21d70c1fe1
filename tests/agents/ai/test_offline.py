"""With LLM_PROVIDER unset, everything works as it did, and nothing leaves
the machine: no timer for a model, no call, no socket opened."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from agents.ai.drafter import RULES, drafter_for
from agents.playbook.copilot import reply_offer
from agents.reader.model import reader
from crm.models import Business, Message, ModelCall, Timer
from tests.helpers.capture import run_queued_events
from tests.helpers.twilio import SMS, post

pytestmark = pytest.mark.django_db


@pytest.fixture
def sockets_refused(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every attempt to open a network connection from Python, recorded and
    refused (the database is reached by libpq, below Python's sockets)."""
    tried: list[Any] = []

    def refuse(self: socket.socket, address: Any) -> None:
        tried.append(address)
        raise OSError(f"no network in this test: {address!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    yield tried


def test_without_a_provider_an_inbound_text_is_read_by_the_rules_and_nothing_leaves_the_machine(
    acme: Business,
    twilio_settings: None,
    settings: Any,
    sockets_refused: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.LLM_PROVIDER = ""
    params = {
        "MessageSid": "SM" + "7" * 32,
        "From": "+12125550147",
        "To": "+13125550100",
        "Body": "how much to replace my AC, can you come tomorrow?",
    }
    with django_capture_on_commit_callbacks(execute=True):
        assert post(SMS, params).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        assert run_queued_events() == ["processed"]

    inbound = Message.objects.get(direction="in")
    # Read by the trained reader, on this machine: its probability is the confidence.
    reading = reader().read(params["Body"])
    assert (inbound.intent, inbound.intent_source) == ("price_question", "reader")
    assert inbound.intent_confidence == pytest.approx(reading.confidence, abs=0.001)
    assert not Timer.objects.filter(kind="ai.inbound").exists() and not ModelCall.objects.exists()
    assert drafter_for(acme) is RULES
    lead = inbound.lead
    assert lead is not None
    offer = reply_offer(lead, inbound.body)
    assert offer.suggested.author == "" and offer.suggested.needs_person  # no price reply in this playbook
    assert sockets_refused == []


def test_the_socket_guard_does_refuse(sockets_refused: list[Any]) -> None:
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", 9), timeout=0.1)
    assert sockets_refused
