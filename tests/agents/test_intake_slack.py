"""Slack gets text, never markup from outside, and each business its own webhook."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from agents.notify import member_notify
from agents.reporting.alerts import alerts_scan
from agents.routing.sla import sla_check
from agents.tasks import alerts as alerts_job
from crm.models import Business, Role, Timer
from crm.services import lead_sync
from tests.agents.notices import run_queued_notices
from tests.factories import lead_create, member_create

pytestmark = pytest.mark.django_db

EVIL = "<!channel> <https://x|Pay now>"


@pytest.fixture
def sink() -> Iterator[tuple[str, list[tuple[str, dict]]]]:
    """One local HTTP server; each webhook is a path on it."""
    posts: list[tuple[str, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posts.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            failing = self.path.endswith("/fails")
            self.send_response(500 if failing else 200)
            self.end_headers()
            self.wfile.write(b"internal: db password hunter2" if failing else b"ok")

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", posts
    finally:
        server.shutdown()
        server.server_close()


def overdue_lead(business: Business) -> None:
    """A lead of the business past its first-response time: an alert to post."""
    member = member_create(business, Role.SETTER, username="bea")
    lead = lead_create(business)
    lead_sync.lead_assign(lead, member, actor="test", reason="test")
    sla_check(lead, now=timezone.now() + timedelta(hours=2))


def test_slack_escape_leaves_no_markup():
    from agents.notify import slack_escape

    assert slack_escape(EVIL) == "&lt;!channel&gt; &lt;https://x|Pay now&gt;"
    assert slack_escape("A & B") == "A &amp; B"


def test_a_lead_named_with_slack_markup_arrives_escaped(settings, sink, business, django_capture_on_commit_callbacks):
    base, posts = sink
    settings.SLACK_WEBHOOK_URL = base + "/operator"
    member = member_create(business, Role.SETTER, username="sam")
    lead = lead_create(business, first_name=EVIL, last_name="")
    with django_capture_on_commit_callbacks(execute=True):
        member_notify(member, "New lead", f"{lead.contact.name} wants a quote")
    assert run_queued_notices() == 1
    ((path, payload),) = posts
    assert path == "/operator"
    assert "<" not in payload["text"] and "&lt;!channel&gt; &lt;https://x|Pay now&gt;" in payload["text"]


def test_business_b_alert_goes_to_b_webhook_with_the_name_escaped(settings, sink, business, other_business):
    base, posts = sink
    settings.WEBHOOK_ALLOW_PRIVATE = True  # the local sink stands in for Slack
    settings.SLACK_WEBHOOK_URL = base + "/operator"
    Business.objects.filter(pk=other_business.pk).update(slack_webhook_url=base + "/b")
    setter_a = member_create(business, Role.SETTER, username="ann")
    setter_b = member_create(other_business, Role.SETTER, username="bob")
    leads = []
    for biz, setter in ((business, setter_a), (other_business, setter_b)):
        lead = lead_create(biz, first_name=EVIL, last_name="")
        lead_sync.lead_assign(lead, setter, actor="test", reason="test")
        sla_check(lead, now=timezone.now() + timedelta(hours=2))
        leads.append(lead)
    alerts_scan()
    alerts_job()
    by_path = {path: payload["text"] for path, payload in posts if "overdue" in payload["text"]}
    assert set(by_path) == {"/operator", "/b"}
    assert leads[1].public_id in by_path["/b"] and leads[0].public_id in by_path["/operator"]
    assert all("<!channel>" not in text and "&lt;!channel&gt;" in text for text in by_path.values())
    assert Timer.objects.filter(kind="reporting.slack_alert", status="done").count() == 2


def test_a_business_with_its_own_webhook_is_alerted_without_the_operators(settings, sink, other_business):
    base, posts = sink
    settings.WEBHOOK_ALLOW_PRIVATE = True  # the local sink stands in for Slack
    settings.SLACK_WEBHOOK_URL = ""
    Business.objects.filter(pk=other_business.pk).update(slack_webhook_url=base + "/b")
    overdue_lead(other_business)
    assert alerts_scan() == 1
    alerts_job()
    assert [path for path, _ in posts] == ["/b"]


def test_a_business_slack_url_on_this_machine_is_refused_at_save_and_at_each_post(settings, sink, other_business):
    """A tenant's Slack URL is fetched by the server: the outbound webhooks'
    guard refuses a loopback, private or metadata address when the business
    is saved (the admin and the business file) and again at each post."""
    base, posts = sink
    settings.SLACK_WEBHOOK_URL = ""
    other_business.slack_webhook_url = base + "/b"
    with pytest.raises(ValidationError) as refused:
        other_business.full_clean()
    assert "loopback" in str(refused.value.message_dict["slack_webhook_url"])
    other_business.slack_webhook_url = "http://169.254.169.254/latest/meta-data/"
    with pytest.raises(ValidationError):
        other_business.full_clean()

    # Saved before the guard (or a name that resolves inward since): refused at the post, nothing sent.
    Business.objects.filter(pk=other_business.pk).update(slack_webhook_url=base + "/b")
    overdue_lead(other_business)
    assert alerts_scan() == 1
    alerts_job()
    timer = Timer.objects.get(kind="reporting.slack_alert")
    assert posts == [] and timer.status == "failed" and "loopback" in timer.error


def test_slacks_answer_never_reaches_the_stored_error(settings, sink, other_business):
    base, posts = sink
    settings.SLACK_WEBHOOK_URL = base + "/fails"
    overdue_lead(other_business)
    alerts_scan()
    alerts_job()
    timer = Timer.objects.get(kind="reporting.slack_alert")
    assert len(posts) == 1 and "Slack answered 500" in timer.error
    assert "hunter2" not in timer.error
