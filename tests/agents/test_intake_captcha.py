"""The hosted form's optional challenge, verified server side against a real
local HTTP server standing in for the provider's siteverify endpoint."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
from django.test import Client

from agents.capture.processing import event_process
from crm.models import Business, InboundEvent, LeadTouch, Source

pytestmark = pytest.mark.django_db


class FakeVerifier:
    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []


@pytest.fixture
def verifier(settings) -> Iterator[FakeVerifier]:
    fake = FakeVerifier()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode()).items()}
            fake.requests.append(form)
            ok = form.get("secret") == "test-secret" and form.get("response") == "good-token"
            body = b'{"success": true}' if ok else b'{"success": false, "error-codes": ["invalid-input-response"]}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.CAPTCHA_PROVIDER = "turnstile"
    settings.CAPTCHA_SITE_KEY = "test-site-key"
    settings.CAPTCHA_SECRET_KEY = "test-secret"
    settings.CAPTCHA_VERIFY_URL = f"http://127.0.0.1:{server.server_address[1]}/siteverify"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def guarded(business: Business) -> Source:
    Business.objects.filter(pk=business.pk).update(captcha_required=True)
    return Source.objects.create(business=business, key="quote", provider="hosted_form")


def post(token: str | None, nonce: str = "n1"):
    data = {"first_name": "Ann", "phone": "2125550147", "nonce": nonce}
    if token is not None:
        data["cf-turnstile-response"] = token
    return Client().post("/f/quote/", data, REMOTE_ADDR="198.51.100.4")


def test_a_business_that_wants_a_challenge_refuses_a_form_without_a_passing_token(verifier, guarded):
    missing, bad = post(None, "a"), post("forged", "b")
    assert (missing.status_code, bad.status_code) == (400, 400)
    assert "check that you are a person" in bad.content.decode()
    assert not InboundEvent.objects.exists()
    assert [r["response"] for r in verifier.requests] == ["forged"], "an empty token is refused without asking"


def test_a_passing_token_is_verified_server_side_and_the_submission_kept(verifier, guarded):
    assert post("good-token").status_code == 200
    assert verifier.requests == [{"secret": "test-secret", "response": "good-token", "remoteip": "198.51.100.4"}]
    event = InboundEvent.objects.get()
    assert event_process(event.pk) == "processed"
    assert "cf-turnstile-response" not in LeadTouch.objects.get(inbound_event=event).answers


def test_an_unreachable_verifier_lets_nothing_through(settings, guarded):
    settings.CAPTCHA_PROVIDER, settings.CAPTCHA_SITE_KEY, settings.CAPTCHA_SECRET_KEY = "hcaptcha", "k", "s"
    settings.CAPTCHA_VERIFY_URL = "http://127.0.0.1:9/siteverify"
    response = Client().post("/f/quote/", {"phone": "2125550147", "h-captcha-response": "t", "nonce": "x"})
    assert response.status_code == 400 and not InboundEvent.objects.exists()


def test_the_widget_script_is_the_providers_and_shown_only_when_configured(settings, business):
    Source.objects.create(business=business, key="quote", provider="hosted_form")
    settings.CAPTCHA_PROVIDER, settings.CAPTCHA_SITE_KEY, settings.CAPTCHA_SECRET_KEY = "turnstile", "site-k", "s"
    plain = Client().get("/f/quote/").content.decode()
    assert "challenges.cloudflare.com" not in plain, "a business that did not ask shows no widget"
    Business.objects.filter(pk=business.pk).update(captcha_required=True)
    page = Client().get("/f/quote/").content.decode()
    assert '<script src="https://challenges.cloudflare.com/turnstile/v0/api.js"' in page
    assert 'class="cf-turnstile" data-sitekey="site-k"' in page
    settings.CAPTCHA_PROVIDER = ""
    assert "challenges.cloudflare.com" not in Client().get("/f/quote/").content.decode()
