"""Secrets at rest: source secrets and Meta page tokens are encrypted in the
database, write-only in the admin, rotated by command, and the page token
travels in the Authorization header of Graph calls, never in a URL or an error."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldError
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse

from agents.meta_graph import GraphError, lead_fetch, redact
from crm.fields import FieldDecryptionError
from crm.models import Business, Source
from crm.services.business_file import business_file_parse, business_spec_apply
from tests.helpers.migration_paths import migrate_by_originals

SECRET = "whsec-site-4f9c2d7a1b"
PAGE_TOKEN = "EAAGm0PX4ZCpsBAPage1234567890abcdef"
OLD_KEY = Fernet.generate_key().decode()
NEW_KEY = Fernet.generate_key().decode()


def raw_columns(source: Source) -> tuple[str, str, dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret, page_token, config::text FROM crm_source WHERE id = %s", [source.pk])
        secret, token, config = cursor.fetchone()
    return secret, token, json.loads(config)


@pytest.fixture
def meta_source(business: Business) -> Source:
    return Source.objects.create(
        business=business, key="fb", provider="meta", secret=SECRET, page_token=PAGE_TOKEN, config={"page_id": "1"}
    )


def test_the_database_columns_hold_ciphertext_not_the_secrets(meta_source: Source) -> None:
    secret, token, config = raw_columns(meta_source)

    assert SECRET not in secret and PAGE_TOKEN not in token
    assert secret.startswith("gAAAAA") and token.startswith("gAAAAA")  # Fernet tokens
    assert config == {"page_id": "1"}
    fresh = Source.objects.get(pk=meta_source.pk)
    assert (fresh.secret, fresh.page_token) == (SECRET, PAGE_TOKEN)


def test_an_unset_secret_is_stored_empty_so_not_set_stays_visible(business: Business) -> None:
    source = Source.objects.create(business=business, key="site", provider="website")

    assert raw_columns(source)[:2] == ("", "")
    assert Source.objects.filter(secret="").get() == source


def test_an_encrypted_field_cannot_be_searched(meta_source: Source) -> None:
    with pytest.raises(FieldError, match="Unsupported lookup 'startswith'"):
        list(Source.objects.filter(secret__startswith="whsec"))


def test_rotation_reencrypts_with_the_first_key_and_then_the_old_key_can_go(business: Business, settings: Any) -> None:
    settings.FIELD_ENCRYPTION_KEYS = [OLD_KEY]
    source = Source.objects.create(business=business, key="site", provider="website", secret=SECRET)
    before = raw_columns(source)[0]
    assert Fernet(OLD_KEY).decrypt(before.encode()).decode() == SECRET

    settings.FIELD_ENCRYPTION_KEYS = [NEW_KEY, OLD_KEY]
    assert Source.objects.get(pk=source.pk).secret == SECRET  # the old key still decrypts
    call_command("rotate_field_keys", stdout=io.StringIO())

    after = raw_columns(source)[0]
    assert after != before
    assert Fernet(NEW_KEY).decrypt(after.encode()).decode() == SECRET
    settings.FIELD_ENCRYPTION_KEYS = [NEW_KEY]
    assert Source.objects.get(pk=source.pk).secret == SECRET


def test_a_secret_under_a_dropped_key_fails_loudly_without_naming_the_secret(business: Business, settings: Any) -> None:
    settings.FIELD_ENCRYPTION_KEYS = [OLD_KEY]
    source = Source.objects.create(business=business, key="site", provider="website", secret=SECRET)
    settings.FIELD_ENCRYPTION_KEYS = [NEW_KEY]
    # Not even the key derived from SECRET_KEY opens it.
    with pytest.raises(FieldDecryptionError) as caught:
        Source.objects.get(pk=source.pk)

    message = str(caught.value)
    assert "crm_source.secret cannot be decrypted" in message
    assert SECRET not in message


def test_keys_set_later_still_read_secrets_encrypted_with_the_derived_key(business: Business, settings: Any) -> None:
    settings.FIELD_ENCRYPTION_KEYS = []
    source = Source.objects.create(business=business, key="site", provider="website", secret=SECRET)

    settings.FIELD_ENCRYPTION_KEYS = [NEW_KEY]
    call_command("rotate_field_keys", stdout=io.StringIO())

    assert Fernet(NEW_KEY).decrypt(raw_columns(source)[0].encode()).decode() == SECRET


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_plain_secrets_and_moves_the_page_token_out_of_config() -> None:
    business = Business.objects.create(slug="legacy", name="Legacy", timezone="UTC", region="US")
    # Back to before 0016 by the original migrations (the squash hides them).
    migrate_by_originals(connection, [("crm", "0015_timer_indexes")])
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO crm_source (public_id, business_id, key, provider, secret, config, is_active, created_at)"
                " VALUES ('src_legacy', %s, 'fb', 'meta', %s, %s::jsonb, true, now())",
                [business.pk, SECRET, json.dumps({"page_id": "1", "access_token": PAGE_TOKEN})],
            )
    finally:
        migrate_by_originals(connection)

    source = Source.objects.get(key="fb")
    secret, token, config = raw_columns(source)
    assert SECRET not in secret and PAGE_TOKEN not in token
    assert config == {"page_id": "1"}
    assert (source.secret, source.page_token) == (SECRET, PAGE_TOKEN)


def test_the_business_file_writes_the_page_token_encrypted_and_keeps_secrets_it_does_not_name(
    business: Business,
) -> None:
    file = """
business: {slug: acme, name: Acme Heating & Air, timezone: America/Chicago, region: US}
sources:
  - {key: fb, provider: meta, page_id: "1", access_token: "TOKEN"}
  - {key: site, provider: website}
""".replace("TOKEN", PAGE_TOKEN)
    Source.objects.create(business=business, key="site", provider="website", secret=SECRET)

    business_spec_apply(business_file_parse(file, path="acme.yaml"))

    fb = Source.objects.get(key="fb")
    assert (fb.page_token, fb.config) == (PAGE_TOKEN, {"page_id": "1"})
    assert PAGE_TOKEN not in raw_columns(fb)[1]
    assert Source.objects.get(key="site").secret == SECRET, "a secret set in the admin survives a load"


# --- the admin ------------------------------------------------------------------


@pytest.fixture
def admin_client(db: None) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", "root@example.com", "pw-for-tests-1"))
    return client


def change_form_data(source: Source, **overrides: Any) -> dict[str, Any]:
    return {
        "business": source.business_id,
        "key": source.key,
        "provider": source.provider,
        "config": json.dumps(source.config),
        "first_response_minutes": "",
        "is_active": "on",
        "replace_secret": "",
        "replace_page_token": "",
        **overrides,
    }


def test_the_source_admin_never_shows_the_secret_or_the_page_token(admin_client: Client, meta_source: Source) -> None:
    pages = [
        admin_client.get(reverse("admin:crm_source_changelist")),
        admin_client.get(reverse("admin:crm_source_change", args=[meta_source.pk])),
        admin_client.get(reverse("admin:crm_source_add")),
    ]

    for page in pages:
        assert page.status_code == 200
        text = page.content.decode()
        assert SECRET not in text and PAGE_TOKEN not in text
    change = pages[1].content.decode()
    assert "replace_secret" in change and "replace_page_token" in change
    assert change.count(">set<") >= 2  # secret and page token: "set"


def test_the_source_admin_replaces_a_secret_and_an_empty_input_keeps_it(
    admin_client: Client, meta_source: Source
) -> None:
    url = reverse("admin:crm_source_change", args=[meta_source.pk])

    response = admin_client.post(url, change_form_data(meta_source, replace_secret="whsec-new-one"))
    assert response.status_code == 302, response.content.decode()[:2000]
    meta_source.refresh_from_db()
    assert (meta_source.secret, meta_source.page_token) == ("whsec-new-one", PAGE_TOKEN)

    admin_client.post(url, change_form_data(meta_source))
    meta_source.refresh_from_db()
    assert (meta_source.secret, meta_source.page_token) == ("whsec-new-one", PAGE_TOKEN)

    admin_client.post(url, change_form_data(meta_source, clear_page_token="on"))
    meta_source.refresh_from_db()
    assert meta_source.page_token == ""


def test_the_source_admin_refuses_a_page_token_typed_into_the_config(admin_client: Client, meta_source: Source) -> None:
    url = reverse("admin:crm_source_change", args=[meta_source.pk])

    response = admin_client.post(url, change_form_data(meta_source, config=json.dumps({"access_token": "EAAx"})))

    assert response.status_code == 200
    assert "The page token goes in" in response.content.decode()
    meta_source.refresh_from_db()
    assert meta_source.config == {"page_id": "1"}


# --- the Graph API ----------------------------------------------------------------


class StrictGraph:
    """Graph's lead read on 127.0.0.1, stricter than Graph: the token must
    come as `Authorization: Bearer`; one in the query string is refused.
    `echo` makes it quote the token back in its error, as some proxies do."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.echo = False
        graph = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                authorization = self.headers.get("Authorization", "")
                graph.seen.append({"path": url.path, "query": query, "authorization": authorization})
                body: dict[str, Any]
                if "access_token" in query:
                    status, body = 400, {"error": {"message": "token in the URL", "code": 1}}
                elif authorization != f"Bearer {PAGE_TOKEN}":
                    message = f"Invalid OAuth access token {authorization} (access_token={PAGE_TOKEN}&x=1)"
                    status, body = 400, {"error": {"message": message, "type": "OAuthException", "code": 190}}
                elif graph.echo:
                    status = 400
                    body = {
                        "error": {"message": f"Rate limited for {PAGE_TOKEN} and EAAotherPage0123456789abc", "code": 4}
                    }
                else:
                    status, body = 200, {"id": url.path.rsplit("/", 1)[-1], "field_data": []}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v21.0"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)


@pytest.fixture
def strict_graph() -> Iterator[StrictGraph]:
    graph = StrictGraph()
    graph.thread.start()
    yield graph
    graph.httpd.shutdown()
    graph.httpd.server_close()
    graph.thread.join(5)


def test_the_graph_call_carries_the_page_token_in_the_authorization_header(strict_graph: StrictGraph) -> None:
    lead = lead_fetch("4242", access_token=PAGE_TOKEN, base_url=strict_graph.url, retry_delay=0)

    assert lead["id"] == "4242"
    [request] = strict_graph.seen
    assert request["authorization"] == f"Bearer {PAGE_TOKEN}"
    assert "access_token" not in request["query"]
    assert PAGE_TOKEN not in request["path"]


def test_graph_errors_are_redacted_of_every_token(strict_graph: StrictGraph) -> None:
    strict_graph.echo = True
    with pytest.raises(GraphError) as echoed:
        lead_fetch("4242", access_token=PAGE_TOKEN, base_url=strict_graph.url, retry_delay=0)
    with pytest.raises(GraphError) as refused:
        lead_fetch("4242", access_token="EAAwrongToken1234567890xyz", base_url=strict_graph.url, retry_delay=0)

    for error in (str(echoed.value), str(refused.value)):
        assert PAGE_TOKEN not in error and "EAAotherPage" not in error and "EAAwrongToken" not in error
        assert "[redacted]" in error
    assert "HTTP 400" in str(refused.value)


def test_redaction_covers_tokens_in_urls_and_bearer_headers() -> None:
    text = "GET https://graph.example/1?fields=id&access_token=abc123&x=1 failed; Authorization: Bearer s3cr3t"

    assert redact(text) == (
        "GET https://graph.example/1?fields=id&access_token=[redacted]&x=1 failed; Authorization: Bearer [redacted]"
    )
