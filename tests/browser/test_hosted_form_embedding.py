"""The hosted form inside a business's own site, in a real browser: framed
where the business said, refused everywhere else, and a visitor can send it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from crm.models import Business, InboundEvent, Source
from tests.factories import BusinessFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def other_site(live_server) -> Iterator[str]:
    """A page on another origin (another port on 127.0.0.1) that frames the form."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = (
                f'<html><body><iframe id="f" src="{live_server.url}/f/quote/" width="600" '
                'height="900"></iframe></body></html>'
            )
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _framed(page):  # the iframe's frame once it has loaded (or failed to)
    page.wait_for_load_state("load")
    return next(f for f in page.frames if f != page.main_frame)


def test_a_site_the_business_did_not_name_cannot_frame_the_form(other_site, browser_context):
    business = BusinessFactory.create(slug="acme", name="Acme")
    Source.objects.create(business=business, key="quote", provider="hosted_form")
    page = browser_context.new_page()
    page.goto(other_site)
    frame = _framed(page)
    assert frame.query_selector("input[name=phone]") is None
    # Chromium says why: the form's policy refused the frame (expected here, so taken off the list).
    refused = browser_context.csp_refused
    assert refused and all("frame-ancestors 'none'" in line for line in refused)
    refused.clear()


def test_the_business_site_frames_the_form_and_a_visitor_sends_it(other_site, browser_context):
    business = BusinessFactory.create(slug="acme", name="Acme")
    Business.objects.filter(pk=business.pk).update(embed_origins=[other_site])
    Source.objects.create(business=business, key="quote", provider="hosted_form")
    page = browser_context.new_page()
    page.goto(other_site)
    frame = _framed(page)
    frame.wait_for_selector("input[name=phone]")
    frame.fill("input[name=first_name]", "Rosa")
    frame.fill("input[name=phone]", "(212) 555-0147")
    frame.check("input[name=consent]")
    frame.click("button[type=submit]")
    frame.wait_for_selector("#thanks")
    assert InboundEvent.objects.count() == 1
