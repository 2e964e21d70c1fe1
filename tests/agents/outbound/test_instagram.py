"""Instagram DM replies through the one send gate and dispatcher, against a
real local HTTP server in the Graph API's shape (tests/helpers/graph.py):
sent once inside Meta's 24-hour window, refused outside it, Meta's own
refusals and rate limits, an answer lost in a timeout settled without a
second send, echoes and sightings, dry run, and opt-outs by DM."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client, TestCase
from django.utils import timezone

from agents.outbound.dispatch import message_claim, message_dispatch
from agents.outbound.gate import message_send
from agents.outbound.reconcile import messages_reconcile
from approvals.models import ApprovalRequest
from crm.models import (
    Business,
    ConsentState,
    ExceptionItem,
    InboundEvent,
    Lead,
    Message,
    Receipt,
    Role,
    Source,
    Timer,
)
from crm.services import lead_sync
from crm.services.business_file import business_file_parse, business_spec_apply
from tests.agents.capture.test_meta import APP_SECRET, post
from tests.factories import member_create
from tests.helpers.capture import run_queued_events
from tests.helpers.graph import GraphServer, graph_running

pytestmark = pytest.mark.django_db

ACCOUNT_ID = "17841400000000001"
SENDER = "1122334455667788"
TOKEN = "EAAinstagrampagetoken0123456789"
REPLY = "Thanks! Could you send a photo of the roof? — Sam"


@pytest.fixture(autouse=True)
def live(settings: Any) -> None:
    settings.META_APP_SECRET = APP_SECRET
    settings.SEND_MODE = "live"


@pytest.fixture
def graph(settings: Any) -> Iterator[GraphServer]:
    with graph_running(settings) as server:
        yield server


@pytest.fixture
def ig_source(business: Business) -> Source:
    return Source.objects.create(
        business=business, key="ig", provider="instagram", config={"account_id": ACCOUNT_ID}, page_token=TOKEN
    )


@pytest.fixture
def manager(business: Business) -> Any:
    return member_create(business, Role.MANAGER, username="mia")


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def deliver(*events: dict[str, Any], account: str = ACCOUNT_ID) -> list[str]:
    """Post one signed Instagram delivery to the real endpoint and process what it stored."""
    body = json.dumps(
        {"object": "instagram", "entry": [{"id": account, "time": ms(timezone.now()), "messaging": events}]}
    )
    # The processing task is enqueued on commit, as in production.
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert post(Client(), body.encode()).status_code == 200
    return run_queued_events()


def dm(text: str, *, mid: str, at: datetime | None = None, account: str = ACCOUNT_ID) -> dict[str, Any]:
    return {
        "sender": {"id": SENDER},
        "recipient": {"id": account},
        "timestamp": ms(at or timezone.now()),
        "message": {"mid": mid, "text": text},
    }


def dm_in(
    text: str = "Can you fix a leaking roof?", *, mid: str = "mid.in.1", ago: timedelta = timedelta(minutes=5)
) -> Lead:
    """The person writes to the business's account (`ago` before now, by Meta's clock)."""
    assert deliver(dm(text, mid=mid, at=timezone.now() - ago)) == ["processed"]
    return Lead.objects.get()


def reply(lead: Lead, body: str = REPLY, *, key: str = "reply:1", **kw: Any) -> Message:
    kw.setdefault("automated", False)
    return message_send(lead=lead, channel="instagram", body=body, actor="sam", idempotency_key=key, **kw)


def actions(message: Message) -> list[str]:
    return list(Receipt.objects.filter(subject=message.public_id).order_by("pk").values_list("action", flat=True))


def later(minutes: int) -> datetime:
    return timezone.now() + timedelta(minutes=minutes)


# --- inside the window: sent once ---------------------------------------------------


def test_a_setters_reply_inside_the_window_is_sent_once_through_the_send_api(
    ig_source: Source, graph: GraphServer
) -> None:
    lead = dm_in()

    message = reply(lead)

    assert (message.status, message.block_reason) == ("queued", "")
    assert (message.to, message.from_number, message.contact_point.kind) == (SENDER, ACCOUNT_ID, "instagram")
    assert message_dispatch(message.pk) == "sent"
    assert message_dispatch(message.pk) == "skipped"  # a redelivered task
    [sent] = graph.posts()
    assert sent["path"] == "/v21.0/me/messages"
    assert sent["authorization"] == f"Bearer {TOKEN}" and sent["query"] == {}  # the token never in the URL
    assert sent["json"] == {"recipient": {"id": SENDER}, "message": {"text": REPLY}, "messaging_type": "RESPONSE"}
    message.refresh_from_db()
    [taken] = graph.sent
    assert (message.status, message.provider_sid, message.attempts) == ("sent", taken["message_id"], 1)
    assert message.sent_at is not None
    assert actions(message) == ["message.queued", "message.sent"]


@pytest.mark.django_db(transaction=True)
def test_the_dispatch_task_run_twice_at_once_sends_one_dm(business: Business, settings: Any) -> None:
    Source.objects.create(
        business=business, key="ig", provider="instagram", config={"account_id": ACCOUNT_ID}, page_token=TOKEN
    )
    with graph_running(settings) as graph:
        settings.META_GRAPH_TIMEOUT = (2.0, 20.0)  # the held answer is waited for
        message = reply(dm_in())
        graph.default = "hold"  # Meta takes the DM and answers only once released
        barrier = threading.Barrier(2)

        def dispatch(_: int) -> str:
            try:
                barrier.wait(timeout=10)
                return message_dispatch(message.pk)
            finally:
                connection.close()

        with ThreadPoolExecutor(max_workers=2) as pool:
            outcomes = pool.map(dispatch, range(2))
            assert graph.held.wait(10)
            graph.release.set()
            results = sorted(outcomes)

        assert results == ["sent", "skipped"]
        assert len(graph.posts()) == 1 and len(graph.sent) == 1
        message.refresh_from_db()
        assert (message.status, message.provider_sid, message.attempts) == ("sent", graph.sent[0]["message_id"], 1)


def test_the_reply_goes_from_the_account_the_person_wrote_to_with_its_token(
    business: Business, ig_source: Source, graph: GraphServer
) -> None:
    other = "17841400000000002"
    Source.objects.create(
        business=business, key="ig-2", provider="instagram", config={"account_id": other}, page_token="other-token"
    )
    assert deliver(dm("Hola, ¿hacen techos?", mid="mid.other"), account=other) == ["processed"]

    message = reply(Lead.objects.get())

    assert message.from_number == other
    assert message_dispatch(message.pk) == "sent"
    assert graph.posts()[0]["authorization"] == "Bearer other-token"


def test_an_instagram_source_from_the_business_file_sends_with_its_encrypted_token(
    business: Business, graph: GraphServer
) -> None:
    file = f"""
business: {{slug: acme, name: Acme Heating & Air, timezone: America/Chicago, region: US}}
sources:
  - {{key: ig, provider: instagram, account_id: "{ACCOUNT_ID}", access_token: "{TOKEN}"}}
"""
    business_spec_apply(business_file_parse(file, path="acme.yaml"))
    source = Source.objects.get(key="ig")
    assert (source.page_token, source.config) == (TOKEN, {"account_id": ACCOUNT_ID})
    with connection.cursor() as cursor:
        cursor.execute("SELECT page_token FROM crm_source WHERE id = %s", [source.pk])
        assert TOKEN not in cursor.fetchone()[0]  # encrypted at rest

    assert message_dispatch(reply(dm_in()).pk) == "sent"
    assert graph.posts()[0]["authorization"] == f"Bearer {TOKEN}"


def test_a_source_without_a_token_fails_the_dm_visibly_without_calling_meta(
    business: Business, graph: GraphServer
) -> None:
    Source.objects.create(business=business, key="ig", provider="instagram", config={"account_id": ACCOUNT_ID})
    message = reply(dm_in())

    assert message_dispatch(message.pk) == "failed"
    message.refresh_from_db()
    assert message.error_code == "no_access_token"
    assert graph.seen == []
    receipt = Receipt.objects.get(subject=message.public_id, action="message.failed")
    assert "no active instagram source with account_id" in receipt.reason


# --- the window ------------------------------------------------------------------------


def test_a_reply_outside_the_window_is_blocked_and_never_reaches_meta(ig_source: Source, graph: GraphServer) -> None:
    # Written 25 hours ago by Meta's clock, though it reaches us only now.
    lead = dm_in(ago=timedelta(hours=25))

    message = reply(lead)

    assert (message.status, message.block_reason) == ("blocked", "outside_window")
    assert message_dispatch(message.pk) == "skipped"
    assert graph.seen == []
    receipt = Receipt.objects.get(subject=message.public_id)
    assert receipt.action == "message.blocked"
    assert receipt.reason.startswith("outside_window: Meta's 24-hour window after the person's last DM closed at")


def test_a_new_dm_opens_the_window_again(ig_source: Source, graph: GraphServer) -> None:
    lead = dm_in(ago=timedelta(hours=30))
    assert reply(lead, key="reply:old").block_reason == "outside_window"

    assert deliver(dm("Still interested!", mid="mid.in.2")) == ["processed"]

    assert reply(lead, key="reply:new").status == "queued"


def test_the_window_closes_24_hours_after_the_last_dm(ig_source: Source, graph: GraphServer) -> None:
    lead = dm_in(ago=timedelta(0))
    written = lead.messages.get(direction="in").created_at

    inside = reply(lead, key="r1", now=written + timedelta(hours=23, minutes=59))
    outside = reply(lead, key="r2", now=written + timedelta(hours=24))

    assert (inside.status, outside.status, outside.block_reason) == ("queued", "blocked", "outside_window")


def test_metas_window_refusal_fails_the_dm_with_that_reason(ig_source: Source, graph: GraphServer) -> None:
    message = reply(dm_in())
    graph.plan = ["window"]  # Meta's clock disagrees with ours

    assert message_dispatch(message.pk) == "failed"

    message.refresh_from_db()
    assert (message.status, message.block_reason, message.error_code) == ("failed", "outside_window", "10/2534022")
    receipt = Receipt.objects.get(subject=message.public_id, action="message.failed")
    assert receipt.reason.startswith("outside_window: HTTP 400: This message is sent outside of allowed window.")
    assert not Timer.objects.filter(kind="outbound.retry").exists()
    assert message_dispatch(message.pk) == "skipped"
    assert len(graph.posts()) == 1 and graph.sent == []


def test_another_refusal_fails_the_dm_with_metas_code(ig_source: Source, graph: GraphServer) -> None:
    message = reply(dm_in())
    graph.plan = [400]

    assert message_dispatch(message.pk) == "failed"

    message.refresh_from_db()
    assert (message.error_code, message.block_reason) == ("2", "")
    assert TOKEN not in Receipt.objects.get(subject=message.public_id, action="message.failed").reason


def test_a_rate_limited_dm_is_retried_after_a_backoff(ig_source: Source, graph: GraphServer) -> None:
    message = reply(dm_in())
    graph.plan = ["throttle"]

    assert message_dispatch(message.pk) == "queued"

    message.refresh_from_db()
    assert (message.status, message.error_code, message.attempts) == ("queued", "613", 1)
    assert message.queued_at is not None and message.queued_at > timezone.now()  # ready again at the backoff's end
    assert Timer.objects.get(kind="outbound.retry").payload == {"message": message.pk}
    assert message_dispatch(message.pk) == "sent"  # the timer's task
    assert len(graph.posts()) == 2 and len(graph.sent) == 1


# --- quiet hours and automation ---------------------------------------------------------


def test_quiet_hours_do_not_defer_a_reply_in_an_open_conversation(ig_source: Source, graph: GraphServer) -> None:
    three_am_chicago = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    lead = dm_in(ago=timezone.now() - (three_am_chicago - timedelta(minutes=5)))

    message = reply(lead, now=three_am_chicago)

    assert (message.status, message.deferred_until) == ("queued", None)


def test_automated_dms_keep_the_daily_cap(business: Business, ig_source: Source, graph: GraphServer) -> None:
    business.max_texts_per_day = 1
    business.save()
    lead = dm_in()

    first = reply(lead, key="auto:1", automated=True)
    second = reply(lead, key="auto:2", automated=True)
    by_hand = reply(lead, key="sam:1")

    assert (first.status, second.status, second.block_reason) == ("queued", "blocked", "daily_cap")
    assert by_hand.status == "queued"  # the cap is for automation


def test_dry_run_records_the_dm_and_sends_nothing(ig_source: Source, graph: GraphServer, settings: Any) -> None:
    settings.SEND_MODE = "dry_run"

    message = reply(dm_in())

    assert (message.status, message.to, message.from_number) == ("dry_run", SENDER, ACCOUNT_ID)
    assert message_dispatch(message.pk) == "skipped"
    assert graph.seen == []
    receipt = Receipt.objects.get(subject=message.public_id)
    assert receipt.action == "message.dry_run"


# --- an answer lost: unknown, never sent twice --------------------------------------------


@pytest.mark.parametrize("lost", ["stall", 503], ids=["read-timeout", "server-error"])
def test_a_send_whose_answer_is_lost_is_unknown_and_given_up_for_a_person_never_resent(
    ig_source: Source, graph: GraphServer, manager: Any, lost: int | str
) -> None:
    message = reply(dm_in())
    graph.default = lost

    assert message_dispatch(message.pk) == "unknown"
    graph.recover()
    message.refresh_from_db()
    assert message.error_code == ("ReadTimeout" if lost == "stall" else "HTTP 503")

    assert messages_reconcile(now=timezone.now())["unreachable"] == 0  # a minute's grace for the echo
    for n in range(1, Message.MAX_RECONCILE_ATTEMPTS + 1):
        swept = messages_reconcile(now=later(n + 1))
        message.refresh_from_db()
        if n < Message.MAX_RECONCILE_ATTEMPTS:
            assert (swept["unreachable"], message.status, message.reconcile_attempts) == (1, "unknown", n)

    assert swept["gave_up"] == 1
    assert (message.status, message.error_code) == ("failed", "gave_up")
    item = ExceptionItem.objects.get(kind="send_gave_up", subject=message.public_id, status="open")
    assert item.owner == manager and "look in the Instagram thread" in item.detail
    assert len(graph.posts()) == 1  # never sent again
    assert message_dispatch(message.pk) == "skipped"


def test_the_echo_of_a_dm_whose_answer_was_lost_settles_it_sent(ig_source: Source, graph: GraphServer) -> None:
    message = reply(dm_in())
    graph.default = "stall"  # Meta took it; the answer never came
    assert message_dispatch(message.pk) == "unknown"
    [taken] = graph.sent

    echo = {
        "sender": {"id": ACCOUNT_ID},
        "recipient": {"id": SENDER},
        "timestamp": ms(timezone.now()),
        "message": {"mid": taken["message_id"], "text": REPLY, "is_echo": True},
    }
    assert deliver(echo) == ["processed"]

    message.refresh_from_db()
    assert (message.status, message.provider_sid) == ("sent", taken["message_id"])
    assert actions(message)[-1] == "message.reconciled_sent"
    assert messages_reconcile(now=later(10)) == {
        "stalled": 0,
        "found": 0,
        "requeued": 0,
        "unreachable": 0,
        "reenqueued": 0,
        "gave_up": 0,
    }
    assert len(graph.posts()) == 1
    assert Lead.objects.get().messages.filter(direction="in").count() == 1  # the echo is not the person's


def test_a_worker_that_died_mid_send_is_settled_by_the_echo_and_the_sweep(
    ig_source: Source, graph: GraphServer
) -> None:
    message = reply(dm_in())
    assert message_claim(message.pk)  # ...and the worker dies while Meta sends it
    echo = {
        "sender": {"id": ACCOUNT_ID},
        "recipient": {"id": SENDER},
        "timestamp": ms(timezone.now()),
        "message": {"mid": "aWdfZAG1faXRlbTo-the-echo", "text": REPLY, "is_echo": True},
    }
    assert deliver(echo) == ["processed"]  # the id is kept on the row still sending
    message.refresh_from_db()
    assert (message.status, message.provider_sid) == ("sending", "aWdfZAG1faXRlbTo-the-echo")

    swept = messages_reconcile(now=later(6))

    assert (swept["stalled"], swept["found"]) == (1, 1)
    message.refresh_from_db()
    assert message.status == "sent"
    assert graph.seen == []  # nothing was sent by us again
    assert actions(message) == ["message.queued", "message.stalled", "message.reconciled_sent"]


def test_an_echo_of_a_dm_typed_in_the_instagram_app_changes_nothing(ig_source: Source, graph: GraphServer) -> None:
    dm_in()
    echo = {
        "sender": {"id": ACCOUNT_ID},
        "recipient": {"id": SENDER},
        "timestamp": ms(timezone.now()),
        "message": {"mid": "mid.typed.in.app", "text": "Typed on the phone", "is_echo": True},
    }
    assert deliver(echo) == ["ignored"]
    assert not Message.objects.filter(direction="out").exists()


# --- delivery: what Instagram says afterwards ---------------------------------------------


def test_a_sighting_proves_delivery_of_that_dm_and_the_ones_before_it(ig_source: Source, graph: GraphServer) -> None:
    lead = dm_in()
    first, second = reply(lead, "First", key="r1"), reply(lead, "Second", key="r2")
    assert [message_dispatch(m.pk) for m in (first, second)] == ["sent", "sent"]
    second.refresh_from_db()
    seen = {
        "sender": {"id": SENDER},
        "recipient": {"id": ACCOUNT_ID},
        "timestamp": ms(timezone.now()),
        "read": {"mid": second.provider_sid},
    }

    assert deliver(seen) == ["processed"]
    assert deliver(seen) == []  # Meta's redelivery: the same event, stored once

    for message in (first, second):
        message.refresh_from_db()
        assert message.status == "delivered" and message.delivered_at is not None
        assert actions(message)[-1] == "message.delivered"
    assert InboundEvent.objects.filter(kind="instagram_seen").count() == 1


def test_without_a_sighting_sent_is_the_last_state(ig_source: Source, graph: GraphServer) -> None:
    message = reply(dm_in())
    message_dispatch(message.pk)

    messages_reconcile(now=later(60))

    message.refresh_from_db()
    assert (message.status, message.delivered_at) == ("sent", None)


# --- opt-outs by DM ------------------------------------------------------------------------


def test_stop_by_dm_revokes_dms_sends_nothing_back_and_start_restores_them(
    ig_source: Source, graph: GraphServer
) -> None:
    lead = dm_in()
    assert deliver(dm("STOP", mid="mid.stop")) == ["processed"]

    point = lead.contact.points.get(kind="instagram")
    state = ConsentState.objects.get(contact_point=point)
    assert (state.channel, state.status, state.last_event.basis) == ("instagram", "revoked", "keyword")
    assert not Message.objects.filter(direction="out").exists()  # no confirmation owed by DM
    blocked = reply(lead, key="r1")
    assert (blocked.status, blocked.block_reason) == ("blocked", "revoked")

    assert deliver(dm("start", mid="mid.start")) == ["processed"]
    assert reply(lead, key="r2").status == "queued"


def test_plain_words_asking_to_stop_revoke_dms_at_once_and_nothing_is_sent_back(
    business: Business, ig_source: Source, graph: GraphServer, manager: Any
) -> None:
    lead = dm_in()
    assert deliver(dm("Please stop messaging me", mid="mid.words")) == ["processed"]

    lead.contact.refresh_from_db()
    assert lead.contact.automation_paused
    assert reply(lead, key="auto", automated=True).block_reason == "stopped"
    # A stop in plain words is a stop: the ledger says so at once, for the
    # DM channel, and no confirmation is owed by DM (a carrier rule, for texts).
    point = lead.contact.points.get(kind="instagram")
    state = ConsentState.objects.get(contact_point=point)
    assert (state.channel, state.status, state.last_event.basis) == ("instagram", "revoked", "plain_words")
    assert not ApprovalRequest.objects.filter(kind="opt_out_question").exists()
    assert reply(lead, key="by-hand").block_reason == "revoked"
    assert graph.seen == []


def test_a_setter_answers_a_dm_from_the_threads_composer_and_finds_it_by_the_instagram_filter(
    ig_source: Source, graph: GraphServer
) -> None:
    lead = dm_in("Do you do gutters too?")
    setter = member_create(lead.business, Role.SETTER, username="sam")
    lead_sync.lead_assign(lead, setter, actor="test", reason="test owner")
    client = Client()
    client.force_login(setter.user)
    thread = f"/app/leads/{lead.public_id}/"
    assert 'value="instagram"' in client.get(thread).content.decode()

    form = {"body": "Yes, gutters too. Want a visit?", "channel": "instagram", "form_key": "ig-1"}
    assert client.post(thread + "send/", form).status_code == 302
    sent = Message.objects.get(direction="out")
    assert (sent.channel, sent.status, sent.to) == ("instagram", "queued", SENDER)
    message_dispatch(sent.pk)
    assert [(m["recipient"], m["text"]) for m in graph.sent] == [(SENDER, form["body"])]

    listed = client.get("/app/inbox/", {"channel": "instagram"}).content.decode()
    assert lead.public_id in listed
    assert lead.public_id not in client.get("/app/inbox/", {"channel": "sms"}).content.decode()
