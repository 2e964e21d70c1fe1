"""The message sweep against a local HTTP server playing Twilio (the real SDK,
its real transport): a text whose worker died is settled by what Twilio
holds, never blindly resent; a lost enqueue is enqueued again; past the
attempt caps a message fails for a person, with an exception item."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone
from django_q.models import OrmQ

from agents.outbound.dispatch import message_account, message_claim, message_dispatch, message_sid_save
from agents.outbound.gate import message_send
from agents.outbound.reconcile import messages_reconcile, provider_body_key
from agents.outbound.twilio_accounts import twilio_client
from agents.reporting.pipeline_qa import pipeline_qa_run
from crm.models import Business, ExceptionItem, Message, Receipt, Role
from crm.services.consent import consent_record
from scripts.fake_twilio import FakeTwilio
from tests.factories import lead_create, member_create
from tests.helpers.database import test_database_url

ROOT = Path(__file__).resolve().parents[3]
SHARED_SID, SHARED_TOKEN, SERVICE = "AC" + "0" * 32, "operator-shared-token", "MG" + "0" * 32
CUSTOMER = "+12125550147"
# What Twilio's Smart Encoding and trimming turn into something else.
BODY = "We\u2019ve got your request \u2014 we\u2019ll call you today.  "


def later(minutes: int = 6) -> Any:
    return timezone.now() + timedelta(minutes=minutes)


@pytest.fixture
def twilio(settings: Any) -> Iterator[FakeTwilio]:
    fake = FakeTwilio({SHARED_SID: SHARED_TOKEN})
    fake.start()
    settings.SEND_MODE = "live"
    settings.PUBLIC_BASE_URL = "https://backoffice.example.com"
    settings.TWILIO_ACCOUNT_SID, settings.TWILIO_AUTH_TOKEN = SHARED_SID, SHARED_TOKEN
    settings.TWILIO_MESSAGING_SERVICE_SID = SERVICE
    settings.TWILIO_API_BASE_URL = fake.url
    yield fake
    fake.stop()


def queue(business: Business, *, body: str = BODY, key: str = "ack:1", channel: str = "sms") -> Message:
    lead = lead_create(business, phone=CUSTOMER, email="pat@example.com")
    for point in lead.contact.points.all():
        consent_record(contact_point=point, channel=channel, granted=True, basis="form_disclosure", actor="t")
    message = message_send(
        lead=lead,
        channel=channel,
        body=body,
        actor="agent:ack",
        idempotency_key=key,
        automated=True,
        now=timezone.now().replace(hour=17),  # noon in New York: no quiet hours
    )
    assert message.status == "queued", message.block_reason
    return message


def posts(fake: FakeTwilio) -> list[Any]:
    return [s for s in fake.seen if s.method == "POST"]


def gave_up(message: Message) -> ExceptionItem:
    message.refresh_from_db()
    assert (message.status, message.error_code) == ("failed", "gave_up")
    assert Receipt.objects.filter(subject=message.public_id, action="message.gave_up").exists()
    return ExceptionItem.objects.get(kind="send_gave_up", subject=message.public_id, status="open")


# --- the body as Twilio keeps it -----------------------------------------------------------


def test_provider_body_key_folds_what_twilio_rewrites_and_nothing_else() -> None:
    assert provider_body_key(BODY) == provider_body_key("We've got your request - we'll call you today.")
    assert provider_body_key("Line one\r\nline two ") == provider_body_key("Line one\nline two")
    assert provider_body_key("Sent from your Twilio trial account - Hi") == provider_body_key("Hi")
    assert provider_body_key("See you at 9") != provider_body_key("See you at 10")


def test_an_ambiguous_send_twilio_stored_smart_encoded_is_found_not_sent_again(business, twilio):
    twilio.storm(["5xx-taken"])  # taken, answered 503: an ambiguous outcome
    message = queue(business)
    assert message_dispatch(message.pk) == "unknown"
    [stored] = twilio.sent[SHARED_SID]
    assert stored["body"] != message.body and stored["date_sent"] is None  # rewritten, and still queued there

    swept = messages_reconcile(now=later(2))

    assert (swept["found"], swept["requeued"]) == (1, 0)
    message.refresh_from_db()
    assert (message.status, message.provider_sid) == ("sent", stored["sid"])
    assert len(posts(twilio)) == 1


# --- a worker that died mid-send -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_while_twilio_takes_the_text_leaves_it_sending_and_the_sweep_settles_it(business, twilio):
    message = queue(business)
    twilio.behave("hold")  # Twilio takes the text, the answer never reaches the worker
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "SEND_MODE": "live",
        "TWILIO_API_BASE_URL": twilio.url,
        "TWILIO_ACCOUNT_SID": SHARED_SID,
        "TWILIO_AUTH_TOKEN": SHARED_TOKEN,
        "TWILIO_MESSAGING_SERVICE_SID": SERVICE,
    }
    code = f"import django; django.setup(); from agents.tasks import message_dispatch; message_dispatch({message.pk})"
    worker = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "leadops.settings"},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert twilio.held.wait(60), worker.communicate(timeout=5)[0].decode()[-2000:] if worker.poll() else ""
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
    message.refresh_from_db()
    assert (message.status, message.provider_sid, message.attempts) == ("sending", None, 1)
    twilio.behave("ok")

    assert messages_reconcile(now=later(2))["stalled"] == 0  # within the bound: maybe only slow
    swept = messages_reconcile(now=later(6))

    assert (swept["stalled"], swept["found"], swept["requeued"]) == (1, 1, 0)
    message.refresh_from_db()
    assert (message.status, message.provider_sid) == ("sent", twilio.sent[SHARED_SID][0]["sid"])
    assert len(posts(twilio)) == 1  # never sent twice
    assert list(
        Receipt.objects.filter(subject=message.public_id, action__startswith="message.").values_list(
            "action", flat=True
        )
    ) == ["message.queued", "message.stalled", "message.reconciled_sent"]


def test_a_sending_text_whose_id_was_saved_is_fetched_by_that_id(business, twilio):
    message = queue(business)
    # As the worker leaves it when it dies after Twilio answered and it saved the id.
    assert message_claim(message.pk)
    created = twilio_client(message_account(message)).messages.create(
        to=message.to, messaging_service_sid=SERVICE, body=message.body
    )
    message_sid_save(message, created.sid)
    twilio.sent[SHARED_SID][0]["status"] = "delivered"

    swept = messages_reconcile(now=later())

    assert (swept["stalled"], swept["found"]) == (1, 1)
    assert [s.path for s in twilio.seen if s.method == "GET"] == [
        f"/2010-04-01/Accounts/{SHARED_SID}/Messages/{created.sid}.json"
    ]
    message.refresh_from_db()
    assert (message.status, message.provider_sid) == ("delivered", created.sid)


def test_a_text_twilio_never_got_is_sent_once_more_then_given_up_after_the_attempt_cap(business, manager, twilio):
    message = queue(business)
    for attempt in range(1, Message.MAX_DISPATCH_ATTEMPTS + 1):
        assert message_claim(message.pk)  # ...and the worker dies before it calls Twilio
        swept = messages_reconcile(now=later(6 * attempt))
        message.refresh_from_db()
        if attempt < Message.MAX_DISPATCH_ATTEMPTS:
            assert (swept["requeued"], message.status, message.attempts) == (1, "queued", attempt)

    assert swept["gave_up"] == 1
    item = gave_up(message)
    assert item.owner == manager and item.lead == message.lead
    assert f"after all {Message.MAX_DISPATCH_ATTEMPTS} dispatch attempts" in item.detail
    assert not message_claim(message.pk)
    assert posts(twilio) == []
    # Pipeline QA leaves it to that item (a person resolves it, not the next run).
    pipeline_qa_run(now=later(60))
    assert not ExceptionItem.objects.filter(subject=message.public_id).exclude(kind="send_gave_up").exists()
    assert ExceptionItem.objects.get(subject=message.public_id).status == "open"


def test_the_database_refuses_a_dispatch_attempt_past_the_cap(business, twilio):
    message = queue(business)
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.filter(pk=message.pk).update(attempts=Message.MAX_DISPATCH_ATTEMPTS + 1)


def test_while_twilio_cannot_be_asked_nothing_is_resent_and_the_message_is_given_up_after_the_cap(
    business, manager, twilio
):
    twilio.storm(["5xx-taken"])  # taken, answered 503: an ambiguous outcome
    message = queue(business)
    assert message_dispatch(message.pk) == "unknown"
    twilio.behave("down")

    for n in range(1, Message.MAX_RECONCILE_ATTEMPTS + 1):
        swept = messages_reconcile(now=later(n))
    message.refresh_from_db()

    assert swept["gave_up"] == 1
    item = gave_up(message)
    assert "could not be settled" in item.detail
    assert len(posts(twilio)) == 1


def test_an_email_whose_worker_died_is_given_up_for_a_person_not_resent(business, manager, twilio, mailoutbox):
    message = queue(business, channel="email", body="Your request is in.", key="ack:mail")
    assert message_claim(message.pk)

    swept = messages_reconcile(now=later())

    assert (swept["stalled"], swept["gave_up"]) == (1, 1)
    assert "no mail server can be asked" in gave_up(message).detail
    assert mailoutbox == []


# --- a lost enqueue ----------------------------------------------------------------------


def dispatch_tasks() -> list[int]:
    return [q.task["args"][0] for q in OrmQ.objects.all() if q.task.get("func") == "agents.tasks.message_dispatch"]


def test_a_queued_text_whose_enqueue_was_lost_is_enqueued_again_once(
    business, twilio, django_capture_on_commit_callbacks
):
    message = queue(business)  # the test's transaction never commits: its on-commit enqueue never ran
    assert dispatch_tasks() == []

    def sweep(minutes: int) -> int:
        # The sweep's own enqueue runs after its commit, as in a worker.
        with django_capture_on_commit_callbacks(execute=True):
            return messages_reconcile(now=later(minutes))["reenqueued"]

    assert sweep(2) == 0  # within the bound
    assert sweep(6) == 1
    assert sweep(12) == 0  # its task is waiting

    assert dispatch_tasks() == [message.pk]
    assert message_dispatch(message.pk) == "sent"
    assert len(posts(twilio)) == 1


def test_a_queued_text_behind_a_backlog_is_left_to_its_task(business, twilio, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        message = queue(business)
    assert dispatch_tasks() == [message.pk]

    assert messages_reconcile(now=later(30))["reenqueued"] == 0
    assert dispatch_tasks() == [message.pk]


def test_a_throttled_text_waits_for_its_backoff_not_for_the_sweep(business, twilio):
    from tests.agents.outbound.fake_twilio import ScriptedTwilio, error

    message = queue(business)
    assert message_dispatch(message.pk, http_client=ScriptedTwilio([error(429, 20429, "Too Many Requests")])) == (
        "queued"
    )
    message.refresh_from_db()
    assert message.queued_at is not None and message.queued_at > timezone.now()  # at the backoff's end

    # Five minutes after the throttled attempt, but not five after the backoff's end.
    assert messages_reconcile(now=later(5) + timedelta(seconds=10))["reenqueued"] == 0


@pytest.fixture
def manager(business: Business) -> Any:
    return member_create(business, Role.MANAGER, username="mia")
