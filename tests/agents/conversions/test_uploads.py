"""Conversion uploads against real local stand-ins of Google Ads (gRPC, the
library's own service definitions) and Meta's Graph API; the clock moves by
passing `now` to the upload runs, never by sleeping."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.conversions.delivery import conversions_sweep
from crm.models import (
    ConsentState,
    ConversionAttempt,
    ConversionUpload,
    ExceptionItem,
    Receipt,
    Stage,
)
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.conversions import conversion_upload_replay, normalized_hash
from crm.services.forget import contact_forget
from crm.services.records import refund_record
from tests.helpers.conversions import ACTIONS, CUSTOMER, DATASET, EVENTS, accounts, lead_from, upload, walk_to_paid
from tests.helpers.google_ads import GoogleAdsServer
from tests.helpers.graph import GraphServer
from tests.helpers.races import run_together

pytestmark = pytest.mark.django_db(transaction=True)

KINDS = ["qualified", "booked", "appointment_held", "won", "paid"]


def test_a_won_and_paid_lead_is_uploaded_once_per_kind_to_each_platform(
    business, live: None, google_ads: GoogleAdsServer, graph: GraphServer
) -> None:
    accounts(business)
    google_lead = lead_from(business, gclid="EAIaIQobChMI-click-1", phone="+12125550147")
    meta_lead = lead_from(business, meta_lead_id="1234567890123456", phone="+12125550148")
    walk_to_paid(google_lead)
    walk_to_paid(meta_lead, amount=Decimal("950.00"))

    upload()
    upload()  # nothing left: a second run sends nothing again

    taken = google_ads.taken
    assert Counter(c["conversion_action"] for c in taken) == Counter(ACTIONS.values())
    assert {c["gclid"] for c in taken} == {"EAIaIQobChMI-click-1"}
    by_action = {c["conversion_action"]: c for c in taken}
    won, paid = by_action[ACTIONS["won"]], by_action[ACTIONS["paid"]]
    assert (won["conversion_value"], won["currency_code"]) == (4800.0, "USD")
    assert (paid["conversion_value"], paid["currency_code"], paid["order_id"]) == (
        4800.0,
        "USD",
        f"{google_lead.public_id}:paid",
    )
    # In the account's zone (the business's: America/Chicago here), with its offset.
    assert paid["conversion_date_time"][19:] in ("-06:00", "-05:00") and len(paid["conversion_date_time"]) == 25
    request = google_ads.seen[0]
    assert request["request"]["customer_id"] == CUSTOMER and request["request"]["partial_failure"] is True
    assert request["metadata"]["developer-token"] == "dev-token-local"
    assert google_ads.authorizations() == {"Bearer ya29.local-test-token"}  # the OAuth refresh, done by the library

    assert Counter(e["event_name"] for e in graph.events) == Counter(EVENTS.values())
    for event in graph.events:
        assert event["dataset"] == DATASET
        assert event["action_source"] == "system_generated"
        assert event["user_data"] == {"lead_id": 1234567890123456}
        assert event["custom_data"]["event_source"] == "crm"
        assert event["custom_data"]["lead_event_source"] == "LeadOps"
    purchase = next(e for e in graph.events if e["event_name"] == "Purchase")
    assert (purchase["custom_data"]["value"], purchase["custom_data"]["currency"]) == (950.0, "USD")
    assert {r["authorization"] for r in graph.posts()} == {"Bearer EAAtestconversionstoken0000000001"}

    assert set(ConversionUpload.objects.values_list("status", flat=True)) == {ConversionUpload.Status.SENT}
    assert ConversionUpload.objects.filter(lead=google_lead).count() == 5  # Google only: no Meta lead id
    assert ConversionUpload.objects.filter(lead=meta_lead).count() == 5  # Meta only: no Google click
    assert Receipt.objects.filter(action="conversion.sent").count() == 10


def test_a_refund_restates_the_paid_value_on_google_and_meta_says_it_cannot(
    business, live: None, google_ads: GoogleAdsServer, graph: GraphServer
) -> None:
    accounts(business)
    lead = lead_from(business, gclid="EAIaIQobChMI-click-2", meta_lead_id="1234567890123457")
    payment = walk_to_paid(lead)
    upload()
    refund_record(payment=payment, amount=Decimal("300.00"), actor="mia", refunded_at=timezone.now())
    upload()

    [adjustment] = google_ads.adjusted
    assert adjustment["order_id"] == f"{lead.public_id}:paid"
    assert adjustment["conversion_action"] == ACTIONS["paid"]
    assert adjustment["adjustment_type"] == "RESTATEMENT"
    assert adjustment["restatement_value"] == {"adjusted_value": 4500.0, "currency_code": "USD"}
    google = ConversionUpload.objects.get(platform="google", kind="restatement")
    assert (google.status, google.value_amount, google.restates.kind) == (
        ConversionUpload.Status.SENT,
        Decimal("4500.00"),
        "paid",
    )
    meta = ConversionUpload.objects.get(platform="meta", kind="restatement")
    assert meta.status == ConversionUpload.Status.SKIPPED and "no restatement" in meta.last_error
    # One event per kind on each platform, the refund included.
    assert len([c for c in google_ads.taken if c["conversion_action"] == ACTIONS["paid"]]) == 1
    assert [e["event_name"] for e in graph.events].count("Purchase") == 1

    # Everything refunded: the conversion is retracted.
    refund_record(payment=payment, amount=Decimal("4500.00"), actor="mia", refunded_at=timezone.now())
    upload()
    assert [a["adjustment_type"] for a in google_ads.adjusted] == ["RESTATEMENT", "RETRACTION"]


def test_click_not_found_is_tried_again_later_then_goes(business, live: None, google_ads: GoogleAdsServer) -> None:
    google, _ = accounts(business)
    google.config = {**google.config, "actions": {"qualified": ACTIONS["qualified"]}}
    google.save()
    lead = lead_from(business, gclid="EAIaIQobChMI-fresh")
    google_ads.plan = ["CLICK_NOT_FOUND", "TOO_RECENT_EVENT"]
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(lead, Stage.QUALIFIED, actor="sam", reason="fits")
    start = timezone.now()

    upload(now=start)
    row = ConversionUpload.objects.get()
    assert row.status == ConversionUpload.Status.PENDING and row.last_code == "conversion_upload_error.CLICK_NOT_FOUND"
    assert "was not found" in row.last_error and row.errors == 0
    assert timedelta(minutes=50) < row.next_attempt_at - start < timedelta(minutes=70)
    upload(now=start + timedelta(minutes=30))  # not due yet: nothing goes
    assert len(google_ads.seen) == 1

    upload(now=start + timedelta(hours=1, minutes=10))  # too recent, Google says: a longer wait
    row.refresh_from_db()
    assert row.status == ConversionUpload.Status.PENDING and row.last_code == "conversion_upload_error.TOO_RECENT_EVENT"
    upload(now=start + timedelta(hours=4))

    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_error) == (ConversionUpload.Status.SENT, 3, "")
    assert [a.outcome for a in ConversionAttempt.objects.filter(upload=row)] == ["not_yet", "not_yet", "sent"]
    assert len(google_ads.taken) == 1


def test_a_click_still_not_found_when_its_window_ends_fails_for_a_person(
    business, live: None, google_ads: GoogleAdsServer
) -> None:
    accounts(business)
    lead = lead_from(business, gclid="EAIaIQobChMI-never", at=timezone.now() - timedelta(days=89, hours=23, minutes=30))
    google_ads.default = "CLICK_NOT_FOUND"
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(lead, Stage.QUALIFIED, actor="sam", reason="fits")
    upload()

    row = ConversionUpload.objects.get(platform="google")
    assert row.status == ConversionUpload.Status.FAILED and "90-day window ended" in row.last_error
    item = ExceptionItem.objects.get(kind="conversion_failed", subject=row.public_id)
    assert "was not found" in item.detail


def test_other_google_refusals_fail_at_once_with_googles_message_and_a_replay_sends_again(
    business, live: None, google_ads: GoogleAdsServer
) -> None:
    accounts(business)
    lead = lead_from(business, gclid="EAIaIQobChMI-wrong-action")
    google_ads.plan = ["INVALID_CONVERSION_ACTION_TYPE"]
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(lead, Stage.QUALIFIED, actor="sam", reason="fits")
    upload()

    row = ConversionUpload.objects.get()
    assert row.status == ConversionUpload.Status.FAILED and row.attempts == 1
    assert row.last_code == "conversion_upload_error.INVALID_CONVERSION_ACTION_TYPE"
    assert row.last_error == "The conversion action's type does not allow this upload."
    assert row.response["partial_failure_error"]["errors"] == row.last_error
    item = ExceptionItem.objects.get(kind="conversion_failed", subject=row.public_id, status="open")

    assert conversion_upload_replay(row, actor="mia")
    upload()
    row.refresh_from_db()
    item.refresh_from_db()
    assert row.status == ConversionUpload.Status.SENT and item.status == "resolved"
    assert Receipt.objects.filter(subject=row.public_id, action="conversion.replayed").exists()


def test_a_refused_request_is_tried_again_with_backoff(business, live: None, google_ads: GoogleAdsServer) -> None:
    accounts(business)
    lead = lead_from(business, gclid="EAIaIQobChMI-auth")
    google_ads.plan = ["auth"]
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(lead, Stage.QUALIFIED, actor="sam", reason="fits")
    start = timezone.now()
    upload(now=start)

    row = ConversionUpload.objects.get()
    assert (row.status, row.errors, row.last_code) == (
        ConversionUpload.Status.PENDING,
        1,
        "authentication_error.OAUTH_TOKEN_INVALID",
    )
    assert row.last_error == "Oauth token in the header is not valid."
    assert timedelta(seconds=50) < row.next_attempt_at - start < timedelta(seconds=70)
    upload(now=start + timedelta(minutes=2))
    row.refresh_from_db()
    assert row.status == ConversionUpload.Status.SENT


def test_a_meta_event_older_than_meta_takes_is_skipped_with_the_reason(
    business, live: None, graph: GraphServer
) -> None:
    accounts(business)
    lead = lead_from(business, meta_lead_id="1234567890123458")
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(lead, Stage.QUALIFIED, actor="sam", reason="fits")
    # The uploads sat unsent (the cluster was down) for eight days.
    upload(now=timezone.now() + timedelta(days=8))

    row = ConversionUpload.objects.get(platform="meta")
    assert row.status == ConversionUpload.Status.SKIPPED
    assert row.last_error.startswith("Meta takes events up to 7 days old; this one happened 8 days ago")
    assert graph.events == []
    assert Receipt.objects.filter(subject=row.public_id, action="conversion.skipped").exists()


def test_a_meta_refusal_fails_with_metas_message_and_a_throttle_is_retried(
    business, live: None, graph: GraphServer
) -> None:
    accounts(business)
    lead = lead_from(business, meta_lead_id="1234567890123459")
    graph.plan = ["throttle", "invalid"]
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(lead, Stage.QUALIFIED, actor="sam", reason="fits")
    start = timezone.now()
    upload(now=start)
    row = ConversionUpload.objects.get(platform="meta")
    assert (row.status, row.errors, row.last_code) == (ConversionUpload.Status.PENDING, 1, "meta.613")
    upload(now=start + timedelta(minutes=2))
    row.refresh_from_db()
    assert row.status == ConversionUpload.Status.FAILED and row.last_code == "meta.100"
    assert row.last_error == "HTTP 400: Invalid parameter, code 100"


def test_enhanced_conversions_carry_hashed_identifiers_only_where_consent_allows(
    business, live: None, google_ads: GoogleAdsServer
) -> None:
    accounts(business, enhanced=True)
    lead = lead_from(business, gclid="EAIaIQobChMI-ec", email="Rosa.Diaz@Gmail.com")
    email = lead.contact.points.get(kind="email")
    phone = lead.contact.points.get(kind="phone")
    consent_record(contact_point=email, channel="email", granted=True, basis="form_disclosure", actor="test")
    consent_record(contact_point=phone, channel="sms", granted=True, basis="form_disclosure", actor="test")
    consent_record(contact_point=phone, channel="voice", granted=False, basis="keyword", actor="test")
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(lead, Stage.QUALIFIED, actor="sam", reason="fits")
    upload()

    [conversion] = google_ads.taken
    identifiers = conversion["user_identifiers"]
    # The email, normalized as Google asks (gmail: no dots, lower case); the
    # phone's voice consent is revoked, so the phone does not go.
    assert [i.get("hashed_email") for i in identifiers] == [normalized_hash("email", "rosadiaz@gmail.com")]
    assert identifiers[0]["user_identifier_source"] == "FIRST_PARTY"
    assert ConsentState.objects.filter(contact_point=phone, channel="voice", status="revoked").exists()


def test_dry_run_sends_nothing_and_records_what_would_be_sent(
    business, settings, google_ads: GoogleAdsServer, graph: GraphServer
) -> None:
    settings.CONVERSIONS_MODE = "dry_run"
    accounts(business)
    lead = lead_from(business, gclid="EAIaIQobChMI-dry", meta_lead_id="1234567890123460")
    walk_to_paid(lead)
    upload()

    assert google_ads.seen == [] and graph.seen == []
    rows = ConversionUpload.objects.filter(lead=lead)
    assert rows.count() == 10 and set(rows.values_list("status", flat=True)) == {ConversionUpload.Status.DRY_RUN}
    paid = rows.get(platform="google", kind="paid")
    assert paid.payload["service"] == "ConversionUploadService.UploadClickConversions"
    assert paid.payload["request"]["conversions"][0]["conversion_value"] == 4800.0
    meta = rows.get(platform="meta", kind="paid")
    assert meta.payload["body"]["data"][0]["custom_data"]["value"] == 4800.0
    assert {a.outcome for a in ConversionAttempt.objects.filter(upload__lead=lead)} == {"dry_run"}


def test_concurrent_sweeps_and_pumps_upload_each_conversion_once(
    business, live: None, google_ads: GoogleAdsServer, graph: GraphServer
) -> None:
    accounts(business)
    leads = [
        lead_from(business, gclid=f"EAIaIQobChMI-{n}", meta_lead_id=f"12345678901234{n:02d}", phone=f"+1212555{n:04d}")
        for n in range(6)
    ]
    for lead in leads:
        walk_to_paid(lead)
    run_together([upload, upload, conversions_sweep, conversions_sweep], timeout=120)

    assert len(google_ads.taken) == 30
    assert Counter(c["order_id"] for c in google_ads.taken).most_common(1)[0][1] == 1
    assert len(graph.events) == 30
    assert Counter(e["event_id"] for e in graph.events).most_common(1)[0][1] == 1
    assert set(ConversionUpload.objects.values_list("status", "attempts")) == {(ConversionUpload.Status.SENT, 1)}


def test_forgetting_the_person_erases_their_identifiers_from_the_uploads(
    business, live: None, google_ads: GoogleAdsServer
) -> None:
    accounts(business, enhanced=True)
    lead = lead_from(business, gclid="EAIaIQobChMI-forget", email="rosa@example.com")
    email = lead.contact.points.get(kind="email")
    consent_record(contact_point=email, channel="email", granted=True, basis="form_disclosure", actor="test")
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(lead, Stage.QUALIFIED, actor="sam", reason="fits")
    upload()
    row = ConversionUpload.objects.get()
    assert row.status == ConversionUpload.Status.SENT and "EAIaIQobChMI-forget" in str(row.payload)

    contact_forget(lead.contact, actor="olivia", reason="asked to be forgotten")

    row.refresh_from_db()
    text = str([row.payload, row.response, list(row.attempt_log.values_list("response", flat=True))])
    assert "EAIaIQobChMI-forget" not in text and normalized_hash("email", "rosa@example.com") not in text
    assert row.payload["request"]["conversions"][0]["conversion_action"] == ACTIONS["qualified"]
    assert (row.status, row.kind) == (ConversionUpload.Status.SENT, "qualified")
