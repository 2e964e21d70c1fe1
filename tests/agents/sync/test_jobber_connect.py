"""Connecting Jobber and keeping the connection alive: the consent and code
exchange through our back-office views, refresh tokens rotated, and a
revoked grant put in front of the manager instead of a silent fallback."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.db import connection as db
from django.test import Client
from django.utils import timezone

from agents.booking.services import appointment_book
from agents.sync.engine import sync_pump
from crm.models import ExceptionItem, Receipt, SyncChange, SyncConnection
from crm.services.sync import connection_connect
from tests.helpers.booking import NOW, TUE_9
from tests.helpers.jobber import ACCOUNT_ID, CLIENT_ID

pytestmark = pytest.mark.django_db


def _consent(owner_client: Client, shop_slug: str) -> tuple[str, dict[str, str]]:
    """Press Connect, follow the stand-in's consent: the callback URL and its query."""
    started = owner_client.post("/admin/sync/jobber/connect/", {"business": shop_slug})
    assert started.status_code == 302
    authorize = started["Location"]
    back = requests.get(authorize, allow_redirects=False, timeout=5)
    assert back.status_code == 302
    url = urlsplit(back.headers["Location"])
    return url.path, {k: v[0] for k, v in parse_qs(url.query).items()}


def test_connect_jobber_runs_the_consent_and_keeps_the_tokens_encrypted(shop, owner, jobber):
    client = Client()
    client.force_login(owner.user)

    path, query = _consent(client, shop.slug)
    assert path == "/admin/sync/jobber/callback/" and "code" in query
    assert not jobber.seen  # nothing asked of the API before the callback
    finished = client.get(path, query)

    assert finished.status_code == 302 and finished["Location"] == "/admin/sync/"
    conn = SyncConnection.objects.get(business=shop, provider="jobber")
    assert (conn.status, conn.account_id, conn.connected_by) == ("active", ACCOUNT_ID, "olivia")
    assert conn.access_token.count(".") == 2
    assert conn.token_expires_at is not None and conn.token_expires_at > timezone.now() + timedelta(minutes=50)
    with db.cursor() as cursor:
        cursor.execute("SELECT access_token, refresh_token FROM crm_syncconnection WHERE id = %s", [conn.pk])
        stored = cursor.fetchone()
    # At rest only the Fernet tokens: neither token is in the row.
    assert stored[0].startswith("gAAAA") and conn.access_token not in stored[0]
    assert stored[1].startswith("gAAAA") and conn.refresh_token not in stored[1]
    receipt = Receipt.objects.get(subject=conn.public_id, action="sync.connected")
    assert "token" not in str(receipt.after)
    page = client.get("/admin/sync/")
    assert page.status_code == 200 and conn.public_id in page.content.decode()
    assert [s["field"] for s in jobber.seen] == ["account"]
    assert jobber.seen[0]["version"]  # every GraphQL request names the schema version


def test_the_authorize_url_names_our_app_and_a_callback_of_ours(shop, owner, jobber):
    client = Client()
    client.force_login(owner.user)
    started = client.post("/admin/sync/jobber/connect/", {"business": shop.slug})
    url = urlsplit(started["Location"])
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert url.path == "/api/oauth/authorize" and url.netloc == urlsplit(jobber.url).netloc
    assert query["client_id"] == CLIENT_ID and query["response_type"] == "code"
    assert query["redirect_uri"] == "http://testserver/admin/sync/jobber/callback/"
    assert client.session["sync_oauth"]["state"] == query["state"]


def test_a_callback_with_another_state_connects_nothing(shop, owner, jobber):
    client = Client()
    client.force_login(owner.user)
    path, query = _consent(client, shop.slug)

    answer = client.get(path, {**query, "state": "forged-state"}, follow=True)

    assert "without the connection this session started" in answer.content.decode()
    assert not SyncConnection.objects.exists()


def test_a_person_who_refuses_consent_is_told_and_nothing_is_connected(shop, owner, jobber):
    jobber.consent = False
    client = Client()
    client.force_login(owner.user)
    path, query = _consent(client, shop.slug)

    answer = client.get(path, query, follow=True)

    assert "did not connect: access_denied" in answer.content.decode()
    assert not SyncConnection.objects.exists()


def test_a_manager_sees_the_status_but_only_an_owner_connects(shop, manager, jobber):
    client = Client()
    client.force_login(manager.user)
    assert client.get("/admin/sync/").status_code == 200
    assert client.post("/admin/sync/jobber/connect/", {"business": shop.slug}).status_code == 403


def test_a_technician_sees_only_their_own_calendar_and_may_connect_it(shop, owner, tech, connection):
    """The shop's Jobber connection is the leaders' business; a technician's
    own calendar is theirs to connect, from the same page."""
    client = Client()
    client.force_login(tech.user)

    page = client.get("/admin/sync/")

    assert page.status_code == 200
    offers = {(o["business"].pk, o["adapter"].provider) for o in page.context["offers"]}
    assert offers == {(shop.pk, "google_calendar"), (shop.pk, "microsoft365")}
    assert page.context["statuses"] == []  # the shop's Jobber connection is not theirs to see
    assert client.post("/admin/sync/jobber/connect/", {"business": shop.slug}).status_code == 403
    answer = client.post("/admin/sync/google_calendar/connect/", {"business": shop.slug})
    assert answer.status_code == 302 and "state=" in answer["Location"]


def test_an_expired_access_token_is_refreshed_once_and_the_rotated_refresh_token_kept(
    connection, jobber, lead, rule, templates
):
    first_refresh = connection.refresh_token
    SyncConnection.objects.filter(pk=connection.pk).update(token_expires_at=timezone.now() + timedelta(minutes=1))
    appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)

    assert sync_pump() == {"done": 1}

    connection.refresh_from_db()
    assert jobber.refreshed == [first_refresh]
    assert connection.refresh_token not in (first_refresh, "") and connection.refresh_claimed_at is None
    assert connection.token_expires_at is not None
    assert connection.token_expires_at > timezone.now() + timedelta(minutes=50)
    # The old refresh token died with its first use.
    assert first_refresh not in jobber.refresh and connection.refresh_token in jobber.refresh


def test_a_token_refused_before_its_time_is_refreshed_and_the_call_made_again(
    connection, jobber, lead, rule, templates
):
    jobber.expire_access()  # Jobber refuses it although its exp is an hour away
    appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)

    assert sync_pump() == {"done": 1}

    assert len(jobber.refreshed) == 1 and jobber.made == {"client": 1, "request": 1}


def test_a_revoked_grant_is_shown_to_the_manager_and_the_booking_waits_for_the_reconnection(
    connection, jobber, lead, rule, templates, manager, owner
):
    jobber.revoke()
    appointment_book(lead, availability=rule, starts_at=TUE_9, actor="sam", now=NOW)

    assert sync_pump() == {"pending": 1}

    connection.refresh_from_db()
    assert connection.status == "reauthorize" and "invalid_grant" in connection.last_error
    item = ExceptionItem.objects.get(kind="sync_reconnect", status="open")
    assert item.owner == manager and item.subject == connection.public_id and "Reconnect jobber" in item.detail
    change = SyncChange.objects.get()
    assert change.status == "pending" and change.errors == 0
    # Nothing is claimed while the connection waits for a person; the page says so.
    assert sync_pump(now=timezone.now() + timedelta(hours=1)) == {}
    page = Client()
    page.force_login(manager.user)
    html = page.get("/admin/sync/").content.decode()
    assert "reconnect needed" in html and '<td class="waiting">1</td>' in html

    tokens = jobber.grant()
    connection_connect(
        connection.business,
        provider="jobber",
        account_id=ACCOUNT_ID,
        account_name="Acme (Jobber)",
        access_token=tokens["access_token"],
        refresh_token=tokens["refresh_token"],
        expires_at=timezone.now() + timedelta(hours=1),
        actor="olivia",
    )
    assert ExceptionItem.objects.get(pk=item.pk).status == "resolved"
    assert sync_pump() == {"done": 1}
    assert jobber.made == {"client": 1, "request": 1}
