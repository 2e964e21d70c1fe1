"""Slack alerts, posted to a real local HTTP server standing in for Slack."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from agents.reporting.alerts import BURST_THRESHOLD, TIMER_KIND, alert_raise, alerts_scan
from agents.routing.sla import sla_check
from agents.tasks import alerts as alerts_job
from crm.models import InboundEvent, Timer
from crm.services import lead_sync
from tests.helpers.reporting import owned, sourced_lead

pytestmark = pytest.mark.django_db


class FakeSlack:
    def __init__(self) -> None:
        self.posts: list[dict] = []
        self.status = 200


@pytest.fixture
def slack(settings) -> Iterator[FakeSlack]:
    fake = FakeSlack()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if fake.status == 200:
                fake.posts.append(json.loads(body))
            self.send_response(fake.status)
            self.end_headers()
            self.wfile.write(b"ok" if fake.status == 200 else b"invalid_token")

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.SLACK_WEBHOOK_URL = f"http://127.0.0.1:{server.server_address[1]}/services/T000/B000/XXX"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def _event(n: int, status: str = "failed") -> InboundEvent:
    return InboundEvent.objects.create(
        provider="stripe",
        external_id=f"evt_{n}",
        body=b"{}",
        status=status,
        error="boom",
        received_at=timezone.now(),
    )


def test_an_sla_breach_is_posted_once(slack, business, source, setter):
    lead = owned(sourced_lead(business, source), setter)
    sla_check(lead, now=timezone.now())
    alerts_job()
    alerts_job()  # found again: already announced
    texts = [p["text"] for p in slack.posts if "first response overdue" in p["text"]]
    assert len(texts) == 1
    assert lead.public_id in texts[0] and "owner sam" in texts[0]
    assert Timer.objects.get(kind=TIMER_KIND, dedupe_key=f"alert:sla:{lead.public_id}").status == "done"


def test_a_complaint_is_posted_once(slack, business, source, setter):
    lead = owned(sourced_lead(business, source), setter)
    lead_sync.lead_flag_exception(lead, "complaint", actor="t", reason="this is harassment")
    assert alerts_scan() == 1
    assert alerts_scan() == 0
    alerts_job()
    assert len(slack.posts) == 1
    assert "complaint" in slack.posts[0]["text"] and lead.public_id in slack.posts[0]["text"]


def test_a_burst_of_failed_webhooks_is_posted_once_an_hour(slack, business):
    for n in range(BURST_THRESHOLD - 1):
        _event(n)
    _event(99, status="processed")
    assert alerts_scan() == 0  # under the threshold
    _event(BURST_THRESHOLD)
    assert alerts_scan() == 1
    _event(100)
    assert alerts_scan() == 0
    alerts_job()
    assert len(slack.posts) == 1
    # The alert says what the scan that queued it saw.
    assert (
        f"{BURST_THRESHOLD} webhook deliveries failed in the last 15 minutes (stripe: {BURST_THRESHOLD})"
        in (slack.posts[0]["text"])
    )
    later = timezone.now() + timedelta(hours=1)
    InboundEvent.objects.update(received_at=later)
    assert alerts_scan(now=later) == 1  # still bursting an hour later: said again


def test_a_refused_post_leaves_the_alert_failed_and_visible(slack, business):
    slack.status = 403
    timer = alert_raise(business=business, key="test:refused", text="hello")
    alerts_job()
    timer.refresh_from_db()
    assert timer.status == "failed"
    assert "403" in timer.error
    assert slack.posts == []


def test_nothing_is_queued_without_a_slack_url(settings, business, source, setter):
    settings.SLACK_WEBHOOK_URL = ""
    lead = owned(sourced_lead(business, source), setter)
    sla_check(lead, now=timezone.now())
    assert alerts_scan() == 0
    assert alert_raise(business=business, key="x", text="y") is None
    assert not Timer.objects.filter(kind=TIMER_KIND).exists()
