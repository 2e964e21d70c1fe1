"""The simulator's Google Local Services stand-in on its own (no test
server around it): leads planted there are read by the real poller, and
`lsa_simulate` serves them until the server's poller has read them all."""

from __future__ import annotations

import socket
import threading
from io import StringIO
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.db import connection

from agents.capture.providers.google_lsa.run import lsa_run
from agents.conversions.google import google_services_reset
from crm.models import Business, LeadTouch, Message, Source
from devtools.polling import poll_until
from devtools.simulator.lsa import leads_plant, lsa_serving, lsa_simulate
from tests.helpers.capture import run_queued_events

CUSTOMER = "5550001111"


def _credentials(settings: Any) -> None:
    settings.GOOGLE_ADS_DEVELOPER_TOKEN = "sim-dev-token"
    settings.GOOGLE_ADS_CLIENT_ID = "sim-client"
    settings.GOOGLE_ADS_CLIENT_SECRET = "sim-secret"
    settings.GOOGLE_ADS_REFRESH_TOKEN = "sim-refresh"
    settings.GOOGLE_ADS_TIMEOUT = 5.0


@pytest.mark.django_db
def test_planted_leads_are_read_by_the_poller_with_their_first_messages(business: Business, settings: Any) -> None:
    Source.objects.create(business=business, key="lsa", provider="google_lsa", config={"customer_id": CUSTOMER})
    _credentials(settings)
    with lsa_serving() as serving:
        settings.GOOGLE_ADS_ENDPOINT, settings.GOOGLE_OAUTH_TOKEN_URL = serving.endpoint, serving.token_url
        google_services_reset()
        planted = leads_plant(serving.stand_in, [(CUSTOMER, ZoneInfo(business.timezone))], count=6, seed=7)

        assert lsa_run()["stored"] == 6 + len(serving.stand_in.conversations)
        google_services_reset()

    run_queued_events()
    touches = LeadTouch.objects.filter(provider="google_lsa")
    assert set(touches.values_list("inbound_event__external_id", flat=True)) == set(planted)
    messages = Message.objects.filter(channel="google_lsa", direction="in")
    assert messages.count() == len(serving.stand_in.conversations) > 0


@pytest.mark.django_db(transaction=True)
def test_lsa_simulate_serves_until_the_servers_poller_has_read_every_lead(business: Business, settings: Any) -> None:
    Source.objects.create(business=business, key="lsa", provider="google_lsa", config={"customer_id": CUSTOMER})
    _credentials(settings)
    ports = []
    for _ in range(2):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
    settings.GOOGLE_ADS_ENDPOINT = f"127.0.0.1:{ports[0]}"
    settings.GOOGLE_OAUTH_TOKEN_URL = f"http://127.0.0.1:{ports[1]}/token"
    google_services_reset()
    report: list[str] = []

    def simulate() -> None:
        try:
            report.extend(lsa_simulate(business.slug, leads=4, port=ports[0], token_port=ports[1], timeout=60))
        finally:
            connection.close()  # the thread's own

    simulating = threading.Thread(target=simulate)
    simulating.start()
    try:
        # The server's job, run as its cluster would (more often), until the
        # stand-in has served every lead and stopped; a run before it listens
        # finds Google unavailable and stores nothing.
        poll_until(lambda: (lsa_run(), not simulating.is_alive())[1], timeout=60, interval=0.2)
    finally:
        simulating.join(timeout=70)
        google_services_reset()

    assert report == ["google_lsa: 4 leads planted over 1 account(s), 4 read by the server's poller"]


def _neighbouring_free_ports() -> int:
    """A free port whose next port is free too: the stand-in's and its token endpoint's.

    Under xdist another worker may hold the port after the one the kernel hands out,
    so a pair that fails to bind is given back and another tried."""
    for _ in range(50):
        with socket.socket() as probe, socket.socket() as second:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise AssertionError("no two neighbouring free ports on 127.0.0.1")


@pytest.mark.django_db(transaction=True)
def test_the_simulate_command_serves_local_services_leads_to_the_servers_poller(
    business: Business, settings: Any
) -> None:
    Source.objects.create(business=business, key="lsa", provider="google_lsa", config={"customer_id": CUSTOMER})
    _credentials(settings)
    port = _neighbouring_free_ports()
    settings.GOOGLE_ADS_ENDPOINT = f"127.0.0.1:{port}"
    settings.GOOGLE_OAUTH_TOKEN_URL = f"http://127.0.0.1:{port + 1}/token"
    google_services_reset()
    out = StringIO()

    def simulate() -> None:
        try:
            call_command(
                "simulate",
                "--only",
                "google_lsa",
                "--leads",
                "20",
                "--seed",
                "3",
                "--lsa-port",
                str(port),
                "--lsa-wait",
                "60",
                stdout=out,
            )
        finally:
            connection.close()  # the thread's own

    simulating = threading.Thread(target=simulate)
    simulating.start()
    try:
        poll_until(lambda: (lsa_run(), not simulating.is_alive())[1], timeout=60, interval=0.2)
    finally:
        simulating.join(timeout=70)
        google_services_reset()

    assert "google_lsa: 2 leads planted over 1 account(s), 2 read by the server's poller" in out.getvalue()
    run_queued_events()
    assert LeadTouch.objects.filter(provider="google_lsa").count() == 2


@pytest.mark.django_db
def test_the_simulate_command_says_when_there_is_no_local_services_source(business: Business) -> None:
    out = StringIO()
    call_command("simulate", "--only", "google_lsa", stdout=out)
    assert "skipped google_lsa: no active google_lsa source" in out.getvalue()
