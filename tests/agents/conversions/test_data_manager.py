"""Google conversions through the Data Manager API, against a real local
gRPC stand-in of its IngestionService in the official library's shapes
(tests/helpers/data_manager.py); the Google Ads API's stand-in answers for
the accounts that stay on it. The clock moves by passing `now` to the
upload runs, never by sleeping."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from crm.models import Business, ConversionAccount, ConversionAttempt, ConversionUpload, ExceptionItem, Receipt, Stage
from crm.services import lead_sync
from crm.services.business_file import BusinessFileError, business_file_load
from crm.services.consent import consent_record
from crm.services.conversions import (
    account_secret_sources,
    conversion_account_save,
    conversion_upload_replay,
    normalized_hash,
)
from crm.services.records import refund_record
from tests.helpers.conversions import ACTIONS, CUSTOMER, GOOGLE_SECRETS, lead_from, upload, walk_to_paid
from tests.helpers.data_manager import DataManagerServer, data_manager_running
from tests.helpers.google_ads import GoogleAdsServer

pytestmark = pytest.mark.django_db(transaction=True)

LATER = timedelta(hours=1, minutes=10)  # past the first "not yet" wait: the status is asked for


@pytest.fixture
def data_manager(settings: Any) -> Iterator[DataManagerServer]:
    with data_manager_running(settings) as server:
        yield server


@pytest.fixture
def live(settings: Any, data_manager: DataManagerServer) -> None:
    settings.CONVERSIONS_MODE = "live"


def account(
    business: Business, *, api: str = "data_manager", enhanced: bool = False, **config: Any
) -> ConversionAccount:
    saved, _ = conversion_account_save(
        business=business,
        platform="google",
        config={"customer_id": CUSTOMER, "actions": ACTIONS, "enhanced_conversions": enhanced, "api": api, **config},
        secrets={k: v for k, v in GOOGLE_SECRETS.items() if k != "developer_token"},
        actor="test",
    )
    return saved


def qualify(lead: Any) -> None:
    lead_sync.lead_transition(lead, Stage.CONTACTED, actor="sam", reason="called")
    lead_sync.lead_transition(lead, Stage.QUALIFIED, actor="sam", reason="fits")


def test_a_click_conversion_lands_with_its_value_currency_and_action_then_reads_sent_once_google_processed_it(
    business, live: None, data_manager: DataManagerServer
) -> None:
    account(business, login_customer_id="1112223333")
    lead = lead_from(business, gclid="EAIaIQobChMI-dm-1")
    walk_to_paid(lead)
    start = timezone.now()

    upload(now=start)
    taken = {t["destination"]["product_destination_id"]: t for t in data_manager.taken}
    assert set(taken) == {action.rsplit("/", 1)[1] for action in ACTIONS.values()}
    paid = taken[ACTIONS["paid"].rsplit("/", 1)[1]]
    assert paid["destination"]["operating_account"] == {"account_id": CUSTOMER, "account_type": "GOOGLE_ADS"}
    assert paid["destination"]["login_account"] == {"account_id": "1112223333", "account_type": "GOOGLE_ADS"}
    event = paid["event"]
    assert (event["conversion_value"], event["currency"]) == (4800.0, "USD")
    assert event["transaction_id"] == f"{lead.public_id}:paid"
    assert event["ad_identifiers"] == {"gclid": "EAIaIQobChMI-dm-1"}
    assert "user_data" not in event and "consent" not in event
    row = ConversionUpload.objects.get(lead=lead, kind="paid")
    assert datetime.fromisoformat(event["event_timestamp"]) == row.occurred_at
    # Signed in with OAuth, without a developer token.
    metadata = data_manager.ingests()[0]["metadata"]
    assert metadata["authorization"] == "Bearer ya29.local-test-token" and "developer-token" not in metadata
    # Taken is not yet counted: Google judges the event later.
    assert (row.status, row.last_code, row.response["awaiting_status"]) == ("pending", "accepted", True)
    assert not Receipt.objects.filter(action="conversion.sent").exists()

    upload(now=start + LATER)
    rows = ConversionUpload.objects.filter(lead=lead)
    assert set(rows.values_list("status", flat=True)) == {ConversionUpload.Status.SENT}
    assert [a.outcome for a in ConversionAttempt.objects.filter(upload=row)] == ["not_yet", "sent"]
    assert rows.get(kind="paid").payload["request"]["events"][0]["conversion_value"] == 4800.0
    assert len(data_manager.taken) == 5 and len(data_manager.ingests()) == 5
    assert Receipt.objects.filter(action="conversion.sent").count() == 5


def test_enhanced_conversions_carry_hashed_identifiers_only_where_consent_allows(
    business, live: None, data_manager: DataManagerServer
) -> None:
    account(business, enhanced=True, actions={"qualified": ACTIONS["qualified"]})
    allowed = lead_from(business, gclid="EAIaIQobChMI-dm-ec", email="Rosa.Diaz@Gmail.com", phone="+12125550147")
    email = allowed.contact.points.get(kind="email")
    phone = allowed.contact.points.get(kind="phone")
    consent_record(contact_point=email, channel="email", granted=True, basis="form_disclosure", actor="test")
    consent_record(contact_point=phone, channel="sms", granted=True, basis="form_disclosure", actor="test")
    consent_record(contact_point=phone, channel="voice", granted=False, basis="keyword", actor="test")
    unknown = lead_from(business, gclid="EAIaIQobChMI-dm-none", email="ana@example.com", phone="+12125550148")
    # A Google lead form's lead without a click: matched on its identifiers alone.
    form_only = lead_from(business, email="lee@example.com", phone="+12125550149")
    consent_record(
        contact_point=form_only.contact.points.get(kind="email"),
        channel="email",
        granted=True,
        basis="form_disclosure",
        actor="test",
    )
    for lead in (allowed, unknown, form_only):
        qualify(lead)
    upload()

    requests = [s["request"] for s in data_manager.ingests()]
    [by_identifiers] = [r for r in requests if "ad_identifiers" not in r["events"][0]]
    assert by_identifiers["events"][0]["user_data"] == {
        "user_identifiers": [{"email_address": normalized_hash("email", "lee@example.com")}]
    }
    ingests = {r["events"][0]["ad_identifiers"]["gclid"]: r for r in requests if r is not by_identifiers}
    with_consent = ingests["EAIaIQobChMI-dm-ec"]
    # The email, normalized as Google asks; the phone's voice consent is
    # revoked, so the phone does not go.
    assert with_consent["encoding"] == "HEX"
    assert with_consent["events"][0]["user_data"] == {
        "user_identifiers": [{"email_address": normalized_hash("email", "rosadiaz@gmail.com")}]
    }
    assert with_consent["events"][0]["consent"] == {"ad_user_data": "CONSENT_GRANTED"}
    # Unknown consent is no consent: the click alone goes.
    without = ingests["EAIaIQobChMI-dm-none"]["events"][0]
    assert "user_data" not in without and "consent" not in without


def test_a_transient_failure_is_retried_with_backoff(business, live: None, data_manager: DataManagerServer) -> None:
    account(business)
    lead = lead_from(business, gclid="EAIaIQobChMI-dm-busy")
    data_manager.plan = ["UNAVAILABLE"]
    qualify(lead)
    start = timezone.now()
    upload(now=start)

    row = ConversionUpload.objects.get()
    assert (row.status, row.errors, row.last_code) == (ConversionUpload.Status.PENDING, 1, "grpc.UNAVAILABLE")
    assert row.last_error == "The service is currently unavailable."
    assert timedelta(seconds=50) < row.next_attempt_at - start < timedelta(seconds=70)
    assert data_manager.taken == []  # one try per run: the library's own retry is off

    upload(now=start + timedelta(minutes=2))
    upload(now=start + timedelta(minutes=2) + LATER)
    row.refresh_from_db()
    assert row.status == ConversionUpload.Status.SENT
    assert [a.outcome for a in row.attempt_log.all()] == ["retry", "not_yet", "sent"]


def test_an_invalid_argument_fails_at_once_with_googles_message(
    business, live: None, data_manager: DataManagerServer
) -> None:
    account(business)
    lead = lead_from(business, gclid="EAIaIQobChMI-dm-wrong")
    data_manager.plan = ["INVALID_CONVERSION_ACTION_ID"]
    qualify(lead)
    upload()

    row = ConversionUpload.objects.get()
    assert (row.status, row.attempts, row.last_code) == (
        ConversionUpload.Status.FAILED,
        1,
        "datamanager.INVALID_CONVERSION_ACTION_ID",
    )
    assert row.last_error == (
        "There was a problem with the request. "
        "destinations[0].product_destination_id: Conversion action ID is not valid."
    )
    assert row.response["status"] == "INVALID_ARGUMENT" and row.response["request_id"].startswith("req-refused")
    item = ExceptionItem.objects.get(kind="conversion_failed", subject=row.public_id, status="open")
    assert item.detail.startswith("Google Ads (Data Manager API) did not take qualified")
    assert data_manager.taken == []


def test_a_replay_does_not_count_twice(business, live: None, data_manager: DataManagerServer) -> None:
    account(business, actions={"qualified": ACTIONS["qualified"]})
    lead = lead_from(business, gclid="EAIaIQobChMI-dm-replay")
    qualify(lead)
    start = timezone.now()
    upload(now=start)
    upload(now=start + LATER)
    row = ConversionUpload.objects.get()
    assert row.status == ConversionUpload.Status.SENT

    assert conversion_upload_replay(row, actor="mia", now=start + LATER)
    upload(now=start + LATER)
    upload(now=start + LATER + timedelta(hours=5))  # its third try: four hours' wait

    row.refresh_from_db()
    ingests = data_manager.ingests()
    assert [i["request"]["events"][0]["transaction_id"] for i in ingests] == [f"{lead.public_id}:qualified"] * 2
    assert len(data_manager.taken) == 1  # Google kept one conversion for the transaction id
    assert (row.status, row.last_code) == (ConversionUpload.Status.SENT, "processing.DUPLICATE_TRANSACTION_ID")
    assert Receipt.objects.filter(subject=row.public_id, action="conversion.sent").count() == 2


def test_a_click_google_has_not_processed_is_sent_again_later(
    business, live: None, data_manager: DataManagerServer
) -> None:
    account(business, actions={"qualified": ACTIONS["qualified"]})
    lead = lead_from(business, gclid="EAIaIQobChMI-dm-fresh")
    data_manager.verdicts = ["TOO_RECENT_CLICK", "PROCESSING"]
    qualify(lead)
    start = timezone.now()

    upload(now=start)  # taken
    upload(now=start + LATER)  # judged: the click is too recent
    row = ConversionUpload.objects.get()
    assert (row.status, row.last_code) == (ConversionUpload.Status.PENDING, "processing.TOO_RECENT_CLICK")
    assert row.errors == 0 and "too recently" in row.last_error
    upload(now=start + 4 * LATER)  # sent again, and taken
    upload(now=start + 10 * LATER)  # still processing
    row.refresh_from_db()
    assert (row.status, row.last_code) == (ConversionUpload.Status.PENDING, "request_status.PROCESSING")
    upload(now=start + 20 * LATER)

    row.refresh_from_db()
    assert row.status == ConversionUpload.Status.SENT
    assert [a.outcome for a in row.attempt_log.all()] == ["not_yet", "not_yet", "not_yet", "not_yet", "sent"]
    assert [s["method"] for s in data_manager.seen] == [
        "IngestEvents",
        "RetrieveRequestStatus",
        "IngestEvents",
        "RetrieveRequestStatus",
        "RetrieveRequestStatus",
    ]
    assert len(data_manager.taken) == 1


def test_an_event_taken_just_before_the_clicks_window_ends_is_still_asked_about(
    business, live: None, data_manager: DataManagerServer
) -> None:
    account(business, actions={"qualified": ACTIONS["qualified"]})
    lead = lead_from(
        business, gclid="EAIaIQobChMI-dm-late", at=timezone.now() - timedelta(days=89, hours=23, minutes=30)
    )
    qualify(lead)
    start = timezone.now()
    upload(now=start)
    row = ConversionUpload.objects.get()
    assert row.window_ends_at is not None and row.next_attempt_at > row.window_ends_at
    assert row.status == ConversionUpload.Status.PENDING

    upload(now=start + LATER)
    row.refresh_from_db()
    assert row.status == ConversionUpload.Status.SENT


def test_a_refund_is_not_restated_through_the_data_manager_api(
    business, live: None, data_manager: DataManagerServer
) -> None:
    account(business)
    lead = lead_from(business, gclid="EAIaIQobChMI-dm-refund")
    payment = walk_to_paid(lead)
    start = timezone.now()
    upload(now=start)
    upload(now=start + LATER)
    refund_record(payment=payment, amount=Decimal("300.00"), actor="mia", refunded_at=timezone.now())
    upload(now=start + LATER)

    row = ConversionUpload.objects.get(kind="restatement")
    assert row.status == ConversionUpload.Status.SKIPPED and "no conversion adjustment" in row.last_error
    assert len(data_manager.ingests()) == 5


def test_dry_run_has_google_validate_the_request_and_ingests_nothing(
    business, settings: Any, data_manager: DataManagerServer
) -> None:
    settings.CONVERSIONS_MODE = "dry_run"
    account(business, actions={"qualified": ACTIONS["qualified"], "booked": ACTIONS["booked"]})
    lead = lead_from(business, gclid="EAIaIQobChMI-dm-dry")
    data_manager.plan = ["ok", "INVALID_CONVERSION_ACTION_ID"]
    qualify(lead)
    lead_sync.lead_transition(lead, Stage.BOOKED, actor="sam", reason="booked")
    upload()

    assert data_manager.taken == [] and len(data_manager.validated) == 1
    assert all(s["request"]["validate_only"] for s in data_manager.ingests())
    qualified = ConversionUpload.objects.get(kind="qualified")
    assert qualified.status == ConversionUpload.Status.DRY_RUN
    assert qualified.payload["service"] == "IngestionService.IngestEvents"
    booked = ConversionUpload.objects.get(kind="booked")
    assert (booked.status, booked.last_code) == ("failed", "datamanager.INVALID_CONVERSION_ACTION_ID")


def test_dry_run_without_credentials_sends_nothing(business, settings: Any, data_manager: DataManagerServer) -> None:
    settings.CONVERSIONS_MODE = "dry_run"
    conversion_account_save(
        business=business,
        platform="google",
        config={"customer_id": CUSTOMER, "actions": {"qualified": ACTIONS["qualified"]}, "api": "data_manager"},
        actor="test",
    )
    qualify(lead_from(business, gclid="EAIaIQobChMI-dm-nocreds"))
    upload()

    row = ConversionUpload.objects.get()
    assert row.status == ConversionUpload.Status.DRY_RUN and data_manager.seen == []
    assert row.attempt_log.get().message.startswith("dry run: nothing sent to Google (not validated: missing client_id")


@pytest.mark.parametrize("api", ["google_ads", None])
def test_an_account_on_the_google_ads_api_still_uploads_there(
    business, settings: Any, google_ads: GoogleAdsServer, data_manager: DataManagerServer, api: str | None
) -> None:
    settings.CONVERSIONS_MODE = "live"
    config: dict[str, Any] = {"customer_id": CUSTOMER, "actions": {"qualified": ACTIONS["qualified"]}}
    if api:
        config["api"] = api  # else saved before there was a choice
    conversion_account_save(business=business, platform="google", config=config, secrets=GOOGLE_SECRETS, actor="t")
    qualify(lead_from(business, gclid="EAIaIQobChMI-dm-legacy"))
    upload()

    assert [c["gclid"] for c in google_ads.taken] == ["EAIaIQobChMI-dm-legacy"]
    assert data_manager.seen == []
    row = ConversionUpload.objects.get()
    assert row.status == ConversionUpload.Status.SENT
    assert row.payload["service"] == "ConversionUploadService.UploadClickConversions"


# --- the business file's `api` --------------------------------------------------------------

FILE = """\
business: {slug: dm-client, name: DM Client, timezone: America/Chicago}
conversions:
  google:
    customer_id: "123-456-7890"
    actions:
      booked: "customers/1234567890/conversionActions/222"
"""


def load(tmp_path: Path, text: str) -> ConversionAccount:
    path = tmp_path / "business.yaml"
    path.write_text(text)
    business_file_load(path)
    return ConversionAccount.objects.get(business__slug="dm-client", platform="google")


def test_a_new_google_account_gets_the_data_manager_api_and_keeps_it(tmp_path: Path) -> None:
    google = load(tmp_path, FILE)
    assert google.config["api"] == "data_manager"
    assert account_secret_sources(google)["developer_token"] == "not needed"

    load(tmp_path, FILE)
    assert Receipt.objects.filter(action="conversion.account_saved").count() == 1  # nothing changed


def test_an_existing_account_without_an_api_stays_on_the_google_ads_api(tmp_path: Path) -> None:
    google = load(tmp_path, FILE)
    # An account saved before there was a choice.
    ConversionAccount.objects.filter(pk=google.pk).update(config={k: v for k, v in google.config.items() if k != "api"})

    google = load(tmp_path, FILE)
    assert "api" not in google.config
    assert Receipt.objects.filter(action="conversion.account_saved").count() == 1
    # Moved only when the file says so.
    google = load(tmp_path, FILE.replace("    customer_id:", "    api: data_manager\n    customer_id:"))
    assert google.config["api"] == "data_manager"
    google = load(tmp_path, FILE.replace("    customer_id:", "    api: google_ads\n    customer_id:"))
    assert google.config["api"] == "google_ads"


def test_an_unknown_api_is_refused_with_its_line(tmp_path: Path) -> None:
    with pytest.raises(BusinessFileError) as refused:
        load(tmp_path, FILE.replace("    customer_id:", "    api: ads_api\n    customer_id:"))
    assert refused.value.line == 4
    assert "'api' in conversions.google is one of data_manager, google_ads, not 'ads_api'" in refused.value.reason
