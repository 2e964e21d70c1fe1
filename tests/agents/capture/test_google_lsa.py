"""Google Local Services leads, polled from a real local gRPC stand-in of the
Google Ads API (tests/helpers/google_ads.py, serving GAQL over planted rows)
through Google's own client library: stored raw first, processed by the
intake loop, cursors that survive restarts and concurrent pollers, and the
lead feedback Google is told once."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.utils import timezone

from agents.capture.processing import event_replay
from agents.capture.providers.google_lsa.feedback import TIMER_KIND, feedback_retry
from agents.capture.providers.google_lsa.poll import OVERLAP, source_poll
from agents.capture.providers.google_lsa.run import lsa_run
from agents.capture.source_cache import SOURCES
from agents.tasks import google_lsa
from crm.models import (
    Business,
    InboundEvent,
    Lead,
    LeadException,
    LeadTouch,
    Message,
    PeriodicRun,
    PollCursor,
    Receipt,
    RejectedDelivery,
    Source,
    Stage,
    Timer,
)
from crm.services import lead_sync
from crm.services.conversions import conversion_account_save
from devtools.simulator.lsa import conversation_row
from tests.helpers.capture import run_queued_events
from tests.helpers.google_ads import GoogleAdsServer, google_ads_running
from tests.helpers.races import run_together

pytestmark = pytest.mark.django_db

SAMPLES = Path(__file__).parent / "samples"
LEAD_ROW = json.loads((SAMPLES / "google_lsa_lead.json").read_text())
CONVERSATION_ROW = json.loads((SAMPLES / "google_lsa_conversation.json").read_text())
CUSTOMER = "1234567890"
ZONE = ZoneInfo("America/Chicago")
TIME = "%Y-%m-%d %H:%M:%S"


def local(minutes_ago: float = 0) -> str:
    """A time `minutes_ago` as Google writes it, in the account's zone."""
    return (timezone.now().astimezone(ZONE) - timedelta(minutes=minutes_ago)).strftime(TIME)


def lead(lead_id: int, *, minutes_ago: float = 1, **changes: Any) -> dict[str, Any]:
    """The sample lead (its JSON shape) with its own id and time."""
    row = copy.deepcopy(LEAD_ROW["local_services_lead"])
    row["resource_name"] = f"customers/{CUSTOMER}/localServicesLeads/{lead_id}"
    row["id"] = str(lead_id)
    row["creation_date_time"] = local(minutes_ago)
    contact = changes.pop("contact", {})
    row["contact_details"].update(contact)
    row.update(changes)
    return row


def plant(server: GoogleAdsServer, *rows: dict[str, Any]) -> None:
    with server.lsa.lock:
        server.lsa.leads.extend(rows)


@pytest.fixture
def google(settings: Any) -> Iterator[GoogleAdsServer]:
    settings.GOOGLE_ADS_DEVELOPER_TOKEN = "env-dev-token"
    settings.GOOGLE_ADS_CLIENT_ID = "env-client.apps.googleusercontent.com"
    settings.GOOGLE_ADS_CLIENT_SECRET = "env-client-secret"
    settings.GOOGLE_ADS_REFRESH_TOKEN = "env-refresh-token"
    settings.GOOGLE_ADS_LOGIN_CUSTOMER_ID = ""
    with google_ads_running(settings) as server:
        yield server


@pytest.fixture
def lsa_source(business: Business) -> Source:
    return Source.objects.create(
        business=business, key="lsa", provider="google_lsa", config={"customer_id": "123-456-7890"}
    )


def the_lead_of(resource_name: str) -> Lead:
    return LeadTouch.objects.select_related("lead").get(inbound_event__external_id=resource_name).lead


def test_a_polled_phone_lead_lands_with_its_source_and_campaign_as_a_call_touch(
    google: GoogleAdsServer, lsa_source: Source
) -> None:
    plant(google, lead(101, lead_type="PHONE_CALL", contact={"consumer_name": ""}))

    run = source_poll(lsa_source)
    assert (run.stored, run.error) == (1, "")
    event = InboundEvent.objects.get(provider="google_lsa")
    assert (event.kind, event.source, event.external_id, event.status) == (
        "lead",
        lsa_source,
        f"customers/{CUSTOMER}/localServicesLeads/101",
        "received",
    )
    # Stored raw: the row exactly as Google's client returned it.
    stored = json.loads(bytes(event.body))
    assert stored["local_services_lead"]["contact_details"]["phone_number"] == "+13125550147"

    assert run_queued_events() == ["processed"]
    touch = LeadTouch.objects.get(inbound_event=event)
    assert (touch.channel, touch.provider, touch.source, touch.campaign_id) == (
        "call",
        "google_lsa",
        lsa_source,
        "20123456789",
    )
    assert touch.answers["category_id"] == "xcat:service_area_business_hvac"
    assert touch.answers["service_id"] == "install_heating"
    assert touch.received_at.astimezone(ZONE).strftime(TIME) == stored["local_services_lead"]["creation_date_time"]
    assert set(touch.lead.contact.points.values_list("value", flat=True)) == {"+13125550147"}
    # What was asked of Google: this account, from the cursor's start.
    search = google.lsa.searches[0]
    assert search["customer_id"] == CUSTOMER
    assert search["metadata"]["developer-token"] == "env-dev-token"


def test_a_message_lead_is_a_form_touch_and_the_persons_messages_become_its_thread(
    google: GoogleAdsServer, lsa_source: Source
) -> None:
    row = lead(202, minutes_ago=2)
    name = row["resource_name"]
    first = copy.deepcopy(CONVERSATION_ROW["local_services_lead_conversation"])
    first.update(
        resource_name=f"customers/{CUSTOMER}/localServicesLeadConversations/301", lead=name, event_date_time=local(1.9)
    )
    ours = conversation_row(CUSTOMER, 302, lead=name, at=local(1.5), text="Thanks Maria, we can come Tuesday.")
    ours["participant_type"] = "ADVERTISER"
    again = conversation_row(CUSTOMER, 303, lead=name, at=local(1), text="Tuesday morning works, thank you!")
    plant(google, row)
    with google.lsa.lock:
        google.lsa.conversations.extend([first, ours, again])

    run = source_poll(lsa_source)

    assert (run.stored, run.error) == (4, "")
    assert run_queued_events() == ["processed", "processed", "ignored", "processed"]
    found = the_lead_of(name)
    touch = found.touches.get()
    assert (touch.channel, found.contact.first_name, found.contact.last_name) == ("form", "Maria", "Garcia")
    thread = list(Message.objects.filter(lead=found).order_by("created_at", "pk"))
    assert [(m.direction, m.channel, m.body) for m in thread if m.direction == "in"] == [
        ("in", "google_lsa", first["message_details"]["text"]),
        ("in", "google_lsa", "Tuesday morning works, thank you!"),
    ]
    inbound = [m for m in thread if m.direction == "in"]
    assert {m.from_number for m in inbound} == {"+13125550147"}
    assert inbound[0].created_at.astimezone(ZONE).strftime(TIME) == first["event_date_time"]
    # A replay records nothing twice.
    assert len(run_queued_events()) == 0
    assert source_poll(lsa_source).duplicates == 4


def test_a_message_whose_lead_is_not_recorded_yet_waits_for_it(google: GoogleAdsServer, lsa_source: Source) -> None:
    orphan = conversation_row(
        CUSTOMER, 401, lead=f"customers/{CUSTOMER}/localServicesLeads/999", at=local(1), text="Hi"
    )
    with google.lsa.lock:
        google.lsa.conversations.append(orphan)

    source_poll(lsa_source)

    assert run_queued_events() == ["received"]  # waiting for a retry, not failed
    event = InboundEvent.objects.get(kind="conversation")
    assert event.retry_at is not None and "is not recorded yet" in event.error


def test_a_tracking_number_with_an_extension_is_kept_as_an_answer_never_as_the_persons_phone(
    google: GoogleAdsServer, lsa_source: Source
) -> None:
    plant(
        google,
        lead(505, lead_type="PHONE_CALL", contact={"phone_number": "+18885550100", "phone_number_extension": "013"}),
    )

    source_poll(lsa_source)
    run_queued_events()

    found = the_lead_of(f"customers/{CUSTOMER}/localServicesLeads/505")
    assert not found.contact.points.filter(kind="phone").exists()
    assert found.touches.get().answers["tracking_number"] == "+18885550100 ext. 013"


@pytest.mark.django_db(transaction=True)  # committed, as a poller's work is; then a new connection
def test_the_cursor_survives_a_restart_and_each_lead_is_stored_once(
    google: GoogleAdsServer, lsa_source: Source
) -> None:
    newest = lead(602, minutes_ago=2)
    plant(google, lead(601, minutes_ago=3), newest)
    assert source_poll(lsa_source).stored == 2
    cursor = PollCursor.objects.get(source=lsa_source, name="leads")
    assert cursor.value == newest["creation_date_time"]  # the newest read, as Google wrote it

    # A new poller process: nothing kept in memory (channels, sources, connection).
    from agents.conversions.google import google_services_reset

    google_services_reset()
    SOURCES.drop()
    connection.close()
    plant(google, lead(603, minutes_ago=1))

    run = source_poll(Source.objects.get(pk=lsa_source.pk))

    assert (run.stored, run.duplicates) == (1, 2)  # the overlap re-reads two, stores one
    assert InboundEvent.objects.filter(provider="google_lsa").count() == 3
    since = (datetime.strptime(cursor.value, TIME).replace(tzinfo=ZONE) - OVERLAP).strftime(TIME)
    assert f">= '{since}'" in google.lsa.searches[-2]["query"]  # leads: resumed at the stored cursor


def test_a_lead_google_shows_late_within_the_overlap_is_still_captured(
    google: GoogleAdsServer, lsa_source: Source
) -> None:
    plant(google, lead(701, minutes_ago=1))
    source_poll(lsa_source)
    # Older than the newest lead read, made visible by Google only now.
    plant(google, lead(702, minutes_ago=3))

    assert source_poll(lsa_source).stored == 1
    assert set(InboundEvent.objects.values_list("external_id", flat=True)) == {
        f"customers/{CUSTOMER}/localServicesLeads/701",
        f"customers/{CUSTOMER}/localServicesLeads/702",
    }


def test_google_refusing_the_credentials_leaves_the_cursor_unmoved_and_is_counted(
    google: GoogleAdsServer, lsa_source: Source
) -> None:
    PollCursor.objects.create(source=lsa_source, name="leads", value=local(10))
    before = PollCursor.objects.get(source=lsa_source, name="leads").value
    plant(google, lead(801))
    google.lsa.search_default = "auth"

    run = source_poll(lsa_source)

    assert run.error.startswith("authentication_error.OAUTH_TOKEN_INVALID")
    assert not InboundEvent.objects.exists()
    assert PollCursor.objects.get(source=lsa_source, name="leads").value == before
    rejected = RejectedDelivery.objects.get(provider="google_lsa", source=lsa_source)
    assert rejected.count == 1 and "OAUTH_TOKEN_INVALID" in rejected.last_reason

    google.lsa.search_default = "ok"  # fixed: the next poll reads from where it stood
    assert source_poll(lsa_source).stored == 1


def test_a_passing_outage_is_not_counted_as_a_refusal(google: GoogleAdsServer, lsa_source: Source) -> None:
    google.lsa.search_default = "unavailable"

    run = source_poll(lsa_source)

    assert run.error.startswith("grpc.UNAVAILABLE")
    assert not RejectedDelivery.objects.exists()


def test_a_source_without_a_customer_id_or_credentials_is_counted_and_not_polled(
    google: GoogleAdsServer, business: Business, settings: Any
) -> None:
    no_account = Source.objects.create(business=business, key="lsa-x", provider="google_lsa", config={})
    assert "has no customer_id" in source_poll(no_account).error
    settings.GOOGLE_ADS_REFRESH_TOKEN = ""
    no_token = Source.objects.create(
        business=business, key="lsa-y", provider="google_lsa", config={"customer_id": "999"}
    )
    assert "missing refresh_token" in source_poll(no_token).error

    assert RejectedDelivery.objects.filter(provider="google_lsa").count() == 2
    assert google.lsa.searches == []


def test_credentials_come_from_the_business_google_conversion_account(
    google: GoogleAdsServer, lsa_source: Source, business: Business
) -> None:
    conversion_account_save(
        business=business,
        platform="google",
        config={"customer_id": "111-222-3333", "login_customer_id": "999-888-7777"},
        secrets={"developer_token": "account-dev-token"},
        actor="test",
    )

    source_poll(lsa_source)

    metadata = google.lsa.searches[0]["metadata"]
    assert (metadata["developer-token"], metadata["login-customer-id"]) == ("account-dev-token", "9998887777")


def test_a_row_we_cannot_read_is_stored_failed_and_replayable(google: GoogleAdsServer, lsa_source: Source) -> None:
    # A time not in Google's documented form: stored (nothing read is lost), never processed.
    odd = lead(901, minutes_ago=1)
    odd["creation_date_time"] = timezone.now().astimezone(ZONE).strftime("%Y-%m-%dT%H:%M:%S-05:00")
    plant(google, odd, lead(902, minutes_ago=1))

    run = source_poll(lsa_source)

    assert (run.stored, run.failed) == (1, 1)
    event = InboundEvent.objects.get(external_id=f"customers/{CUSTOMER}/localServicesLeads/901")
    assert event.status == "failed"
    assert event.error.startswith("malformed payload: local_services_lead.creation_date_time")
    assert run_queued_events() == ["processed"]  # only the readable one
    assert event_replay(event) == "failed"  # still unreadable, still there to replay once the parser reads it
    event.refresh_from_db()
    assert event.attempts == 1 and event.attempt_limit > event.attempts


def test_feedback_is_sent_once_when_the_lead_is_booked(google: GoogleAdsServer, lsa_source: Source) -> None:
    plant(google, lead(1001))
    source_poll(lsa_source)
    run_queued_events()
    name = f"customers/{CUSTOMER}/localServicesLeads/1001"
    found = the_lead_of(name)

    lsa_run()  # not booked yet: nothing to say
    assert google.lsa.feedback == []

    if found.stage == Stage.NEW:
        found = lead_sync.lead_transition(found, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(found, Stage.BOOKED, actor="sam", reason="booked a visit")
    first = lsa_run()
    second = lsa_run()

    assert google.lsa.feedback == [
        {
            "resource_name": name,
            "survey_answer": "SATISFIED",
            "survey_satisfied": {"survey_satisfied_reason": "BOOKED_CUSTOMER", "other_reason_comment": ""},
        }
    ]
    assert (first["feedback_done"], second["feedback_scheduled"], second["feedback_done"]) == (1, 0, 0)
    timer = Timer.objects.get(kind=TIMER_KIND)
    assert (timer.status, timer.payload["outcome"]) == ("done", "sent")
    assert Receipt.objects.filter(action="lead.lsa_feedback_sent", subject=timer.public_id).count() == 1
    # Won later: still once.
    lead_sync.lead_transition(found, Stage.APPOINTMENT_HELD, actor="sam", reason="visited")
    lsa_run()
    assert len(google.lsa.feedback) == 1


def test_a_lead_closed_as_out_of_area_is_reported_as_a_geo_mismatch(
    google: GoogleAdsServer, lsa_source: Source
) -> None:
    plant(google, lead(1101))
    source_poll(lsa_source)
    run_queued_events()
    found = the_lead_of(f"customers/{CUSTOMER}/localServicesLeads/1101")
    found = lead_sync.lead_flag_exception(found, LeadException.OUT_OF_AREA, actor="sam", reason="zip 99501")
    lead_sync.lead_transition(found, Stage.DISQUALIFIED, actor="sam", reason="outside our area")

    lsa_run()

    (sent,) = google.lsa.feedback
    assert sent["survey_answer"] == "DISSATISFIED"
    assert sent["survey_dissatisfied"]["survey_dissatisfied_reason"] == "GEO_MISMATCH"
    assert Timer.objects.get(kind=TIMER_KIND).payload["credit_issuance_decision"] == "SUCCESS_NOT_REACHED_THRESHOLD"


def test_feedback_whose_answer_was_lost_is_not_given_twice(google: GoogleAdsServer, lsa_source: Source) -> None:
    plant(google, lead(1201))
    source_poll(lsa_source)
    run_queued_events()
    found = the_lead_of(f"customers/{CUSTOMER}/localServicesLeads/1201")
    if found.stage == Stage.NEW:
        found = lead_sync.lead_transition(found, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(found, Stage.BOOKED, actor="sam", reason="booked")
    google.lsa.feedback_plan = ["lost"]  # Google takes it; its answer never arrives

    assert lsa_run()["feedback_failed"] == 1
    timer = Timer.objects.get(kind=TIMER_KIND)
    assert timer.status == "failed" and "UNAVAILABLE" in timer.error

    assert feedback_retry(now=timezone.now() + timedelta(days=1)) == 1
    Timer.objects.filter(pk=timer.pk).update(due_at=timezone.now())  # its wait is over
    lsa_run()

    timer.refresh_from_db()
    assert (timer.status, timer.payload["outcome"]) == ("done", "already_given")
    assert len(google.lsa.feedback) == 1


def test_the_job_polls_every_active_source_and_records_its_run(
    google: GoogleAdsServer, lsa_source: Source, other_business: Business
) -> None:
    Source.objects.create(
        business=other_business, key="lsa-off", provider="google_lsa", config={"customer_id": "555"}, is_active=False
    )
    plant(google, lead(1301))

    result = google_lsa()

    assert (result["sources_polled"], result["stored"]) == (1, 1)
    assert PeriodicRun.objects.get(name="leadops.google_lsa").result["stored"] == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_pollers_never_store_a_lead_twice(business: Business, settings: Any) -> None:
    source = Source.objects.create(
        business=business, key="lsa-race", provider="google_lsa", config={"customer_id": CUSTOMER}
    )
    settings.GOOGLE_ADS_DEVELOPER_TOKEN = "t"
    settings.GOOGLE_ADS_CLIENT_ID = "c"
    settings.GOOGLE_ADS_CLIENT_SECRET = "s"
    settings.GOOGLE_ADS_REFRESH_TOKEN = "r"
    with google_ads_running(settings) as google:
        plant(google, *(lead(1400 + n, minutes_ago=4 - n * 0.1) for n in range(20)))

        runs = run_together([lambda: source_poll(source) for _ in range(4)])

    assert [r.error for r in runs] == [""] * 4
    assert sum(r.stored for r in runs) == 20
    assert sum(r.duplicates for r in runs) == 60  # each later poller found the first one's rows stored
    names = list(InboundEvent.objects.filter(provider="google_lsa").values_list("external_id", flat=True))
    assert len(names) == len(set(names)) == 20
    newest = max(r["creation_date_time"] for r in google.lsa.leads)
    assert PollCursor.objects.get(source=source, name="leads").value == newest
