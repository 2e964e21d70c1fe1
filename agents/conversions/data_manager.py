"""Google Ads conversions through Google's Data Manager API (`IngestEvents`),
with its official client `google-ads-datamanager` (the generated gRPC
IngestionService and its proto-plus types). Since 15 June 2026 Google takes
offline click conversions and enhanced conversions for leads from an account
new to uploading only here; the Google Ads API's upload (google.py) is kept
for the accounts that used it. An account's `api` chooses
(crm.services.conversions.google_api).

One event per request, to one destination: the Google Ads account
(`customer_id`) as the operating account, the manager account as the login
account when there is one, and the mapped conversion action's id as the
product destination. The event carries the click id (gclid, else gbraid or
wbraid), the moment's time, won and paid values with their currency, and
`transaction_id`, the upload's key without its platform (the Google Ads
path's order id): Google keeps one conversion per transaction id and action,
so a retry or a replay cannot count twice. With `enhanced_conversions` on,
the contact's emails and phones go too, normalized, SHA-256 and hex
(`encoding: HEX`), only where identifiers_allowed says the person's consent
allows, and then the event says their consent to ad user data is granted.
A refund's restatement is skipped: this client (0.9.4) has no conversion
adjustment, so the paid conversion keeps the value it was sent with.

Google answers in two steps, and both are sorted the way google.py sorts:

- The call fails fast. UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
  INTERNAL, a refused sign-in (UNAUTHENTICATED, PERMISSION_DENIED), any other
  gRPC or OAuth failure, a missing credential: `retry`. INVALID_ARGUMENT,
  FAILED_PRECONDITION, NOT_FOUND, OUT_OF_RANGE, ALREADY_EXISTS refuse the
  conversion itself: `failed`, with Google's message and field violations.
- An accepted call returns a request id, not a verdict: Google processes
  the event later. So it is `not_yet`, the id kept in the answer, and the
  delivery's next try (an hour on, doubling) asks `RetrieveRequestStatus`
  instead of sending again: SUCCESS is `sent`; PROCESSING is `not_yet` again;
  a conversion Google has already (DUPLICATE_TRANSACTION_ID, DUPLICATE_GCLID)
  is `sent`; a click it has not processed yet (CLICK_NOT_FOUND,
  TOO_RECENT_CLICK, CONVERSION_PRECEDES_CLICK) is `not_yet`, and the try
  after sends the event again; its INTERNAL_ERROR is `retry`, sent again
  too; any other processing error is `failed`. A request id Google no longer
  knows is sent again as well (the transaction id keeps it single). The
  click's 90-day window bounds the waiting for a click, as on the Google Ads
  path; an event taken within it is asked about a week longer.

In dry run (CONVERSIONS_MODE=dry_run) an account with its credentials sends
the request with `validate_only`: Google checks it and ingests nothing
(`dry_run`; a refusal is `failed` with Google's message, so a wrong action
shows before going live). Without credentials nothing is sent at all.

The client: in production `IngestionServiceClient` makes its own TLS channel
to Google with the OAuth credentials. With DATA_MANAGER_ENDPOINT set (tests,
development) the same generated client runs on a gRPC channel with local
credentials to that address, as google.py does for GOOGLE_ADS_ENDPOINT:
gRPC applies the OAuth call credentials only on a channel it considers
secure, which local (loopback) credentials are. Sign-in is the Google Ads
path's refresh token, OAuth client and token endpoint (GOOGLE_OAUTH_TOKEN_URL),
without a developer token; the refresh token must carry the
`https://www.googleapis.com/auth/datamanager` scope.
"""

from __future__ import annotations

import time
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

import google.auth.exceptions
import google.auth.transport.grpc
import grpc
from django.conf import settings
from google.ads.datamanager_v1 import (
    AdIdentifiers,
    Consent,
    ConsentStatus,
    Destination,
    Encoding,
    Event,
    IngestEventsRequest,
    IngestionServiceClient,
    ProcessingErrorReason,
    ProductAccount,
    RequestStatusPerDestination,
    RetrieveRequestStatusRequest,
    UserData,
    UserIdentifier,
)
from google.ads.datamanager_v1.services.ingestion_service.transports import IngestionServiceGrpcTransport
from google.api_core.exceptions import GoogleAPICallError
from google.oauth2.credentials import Credentials
from google.rpc import error_details_pb2

from agents.conversions.base import Answer, Built, Skip
from agents.conversions.google import TimedRequest, order_id
from crm.models import ConversionKind, ConversionUpload
from crm.services.conversions import (
    account_secrets,
    identifiers_allowed,
    lead_net_collected,
    lead_won_value,
    normalized_hash,
)

K = ConversionKind
INGEST = "IngestionService.IngestEvents"
STATUS = "IngestionService.RetrieveRequestStatus"
CREDENTIALS = ("client_id", "client_secret", "refresh_token")
MAX_IDENTIFIERS = 10  # Google's limit per event
GOOGLE_ADS = ProductAccount.AccountType.GOOGLE_ADS
# A call refused for what it carries: a person looks. Any other failure passes.
REFUSED = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.ALREADY_EXISTS,
    }
)
R = ProcessingErrorReason
# Google has it already (an earlier try whose answer was lost, a replay).
ALREADY = frozenset({R.PROCESSING_ERROR_REASON_DUPLICATE_TRANSACTION_ID, R.PROCESSING_ERROR_REASON_DUPLICATE_GCLID})
# Google has not processed the click yet: the event goes again later.
NOT_YET = frozenset(
    {
        R.PROCESSING_ERROR_REASON_CLICK_NOT_FOUND,
        R.PROCESSING_ERROR_REASON_TOO_RECENT_CLICK,
        R.PROCESSING_ERROR_REASON_CONVERSION_PRECEDES_CLICK,
    }
)
PASSING = frozenset({R.PROCESSING_ERROR_REASON_INTERNAL_ERROR})
REASONS = {
    R.PROCESSING_ERROR_REASON_CLICK_NOT_FOUND: "Google has not found the click in this account (clicks take hours "
    "to reach it, or the click is another account's)",
    R.PROCESSING_ERROR_REASON_TOO_RECENT_CLICK: "the click happened too recently for Google to take the conversion",
    R.PROCESSING_ERROR_REASON_CONVERSION_PRECEDES_CLICK: "the conversion is dated before the click",
    R.PROCESSING_ERROR_REASON_EVENT_TOO_OLD: "the conversion is older than Google takes",
    R.PROCESSING_ERROR_REASON_INVALID_GCLID: "Google could not decode the click id",
    R.PROCESSING_ERROR_REASON_INVALID_CLICK: "the click did not come from a Google Ads campaign",
    R.PROCESSING_ERROR_REASON_INVALID_OPERATING_ACCOUNT_FOR_CLICK: "the click belongs to another Google Ads account",
    R.PROCESSING_ERROR_REASON_DENIED_CONSENT: "consent to ad user data is denied, by the person or the account's "
    "default",
    R.PROCESSING_ERROR_REASON_DESTINATION_ACCOUNT_ENHANCED_CONVERSIONS_TERMS_NOT_SIGNED: "the account has not "
    "accepted the terms for enhanced conversions",
}
RequestStatus = RequestStatusPerDestination.RequestStatus


def action_id(action: str) -> str:
    """The conversion action's id: "111" of customers/123/conversionActions/111."""
    return action.rsplit("/", 1)[-1]


def _digits(value: Any) -> str:
    return "".join(ch for ch in str(value or "") if ch.isdigit())


def _awaited(upload: ConversionUpload) -> str:
    """The request whose processing status the last answer waits for, or ""."""
    answer = upload.response or {}
    return str(answer.get("request_id") or "") if answer.get("awaiting_status") else ""


# --- building ----------------------------------------------------------------------------


def data_manager_build(upload: ConversionUpload, *, now: datetime) -> Built:
    """The request for an upload: the event to ingest, or, when an ingested
    one awaits Google's verdict, the status request for it (the payload
    stays what was sent). Skip when there is nothing Google could take."""
    if upload.kind == K.RESTATEMENT:
        raise Skip(
            "the Data Manager API client (google-ads-datamanager 0.9.4) has no conversion adjustment: the paid "
            "conversion keeps the value it was sent with"
        )
    awaited = _awaited(upload)
    if awaited:
        status = RetrieveRequestStatusRequest(request_id=awaited)
        return Built(payload=upload.payload, request=status, value=upload.value_amount, currency=upload.currency)
    account, business = upload.account, upload.business
    customer_id = _digits(account.config.get("customer_id"))
    destination = Destination(
        operating_account=ProductAccount(account_id=customer_id, account_type=GOOGLE_ADS),
        product_destination_id=action_id(upload.action),
    )
    login = _digits(account.config.get("login_customer_id") or settings.GOOGLE_ADS_LOGIN_CUSTOMER_ID)
    if login and login != customer_id:
        destination.login_account = ProductAccount(account_id=login, account_type=GOOGLE_ADS)
    event = Event(transaction_id=order_id(upload), event_timestamp=upload.occurred_at)
    touch = upload.touch
    if touch is not None and touch.gclid:
        event.ad_identifiers = AdIdentifiers(gclid=touch.gclid)
    elif touch is not None and touch.gbraid:
        event.ad_identifiers = AdIdentifiers(gbraid=touch.gbraid)
    elif touch is not None and touch.wbraid:
        event.ad_identifiers = AdIdentifiers(wbraid=touch.wbraid)
    value: Decimal | None = None
    currency = ""
    if upload.kind == K.WON:
        won = lead_won_value(upload.lead)
        if won is not None:
            value, currency = won
    elif upload.kind == K.PAID:
        value, currency = lead_net_collected(upload.lead, business.currency), business.currency
    if value is not None:
        event.conversion_value = float(value)
        event.currency = currency
    identifiers = []
    if account.config.get("enhanced_conversions"):
        for kind, raw in identifiers_allowed(upload.lead)[:MAX_IDENTIFIERS]:
            hashed = normalized_hash(kind, raw)
            identifiers.append(
                UserIdentifier(email_address=hashed) if kind == "email" else UserIdentifier(phone_number=hashed)
            )
    if identifiers:
        event.user_data = UserData(user_identifiers=identifiers)
        # identifiers_allowed let them go: the person's consent covers them.
        # Personalization was never asked, so nothing is said of it.
        event.consent = Consent(ad_user_data=ConsentStatus.CONSENT_GRANTED)
    if not (event.ad_identifiers or identifiers):
        raise Skip(
            "no Google click id (gclid, gbraid, wbraid) on the lead, and no email or phone its consent "
            "allows for enhanced conversions"
        )
    request = IngestEventsRequest(destinations=[destination], events=[event], encoding=Encoding.HEX)
    payload = {"service": INGEST, "request": _as_dict(request)}
    return Built(payload=payload, request=request, value=value, currency=currency)


def _as_dict(message: Any) -> dict[str, Any]:
    return dict(
        type(message).to_dict(message, use_integers_for_enums=False, always_print_fields_with_no_presence=False)
    )


# --- sending -------------------------------------------------------------------------------


@lru_cache(maxsize=32)
def _client(
    endpoint: str, token_url: str, client_id: str, client_secret: str, refresh_token: str
) -> tuple[IngestionServiceClient, Credentials]:
    """The ingestion client and its OAuth credentials for these settings:
    one channel, kept for the process."""
    credentials = Credentials(
        token=None,
        refresh_token=refresh_token,
        client_id=client_id,
        client_secret=client_secret,
        token_uri=token_url,
    )
    if not endpoint:
        return IngestionServiceClient(credentials=credentials), credentials
    call = grpc.metadata_call_credentials(google.auth.transport.grpc.AuthMetadataPlugin(credentials, TimedRequest()))
    local = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
    channel = grpc.secure_channel(endpoint, grpc.composite_channel_credentials(local, call))
    return IngestionServiceClient(transport=IngestionServiceGrpcTransport(channel=channel)), credentials


def data_manager_send(upload: ConversionUpload, built: Built) -> Answer:
    """Ingest the built event, or ask how the ingested one went; Google's
    answer, sorted. Outside any transaction."""
    return _call(upload, built, validate_only=False)


def data_manager_check(upload: ConversionUpload, built: Built) -> Answer:
    """Dry run: Google validates the event and ingests nothing; without
    credentials, nothing is sent at all."""
    if isinstance(built.request, RetrieveRequestStatusRequest):
        # Ingested while live: asking how it went changes nothing at Google.
        return _call(upload, built, validate_only=False)
    missing = _missing(upload)
    if missing:
        return Answer("dry_run", "", f"dry run: nothing sent to Google (not validated: missing {', '.join(missing)})")
    return _call(upload, built, validate_only=True)


def _missing(upload: ConversionUpload) -> list[str]:
    secrets = account_secrets(upload.account)
    return [name for name in CREDENTIALS if not secrets[name]]


def _call(upload: ConversionUpload, built: Built, *, validate_only: bool) -> Answer:
    missing = _missing(upload)
    if missing:
        return Answer(
            "retry", "credentials", f"missing {', '.join(missing)}: set them in the business file or the environment"
        )
    secrets = account_secrets(upload.account)
    client, credentials = _client(
        settings.DATA_MANAGER_ENDPOINT,
        settings.GOOGLE_OAUTH_TOKEN_URL,
        *(secrets[name] for name in CREDENTIALS),
    )
    awaited = built.request.request_id if isinstance(built.request, RetrieveRequestStatusRequest) else ""
    started = time.monotonic()
    try:
        if not credentials.valid:
            # Refreshed here, with our timeout, before the call: the channel's
            # own refresh (the library's) then finds a token that is valid.
            credentials.refresh(TimedRequest())
        # retry=None: the delivery retries, with its own backoff; the
        # library's would hold the claim for two minutes.
        if awaited:
            status = client.retrieve_request_status(
                request=built.request, retry=None, timeout=settings.GOOGLE_ADS_TIMEOUT
            )
            return _verdict(awaited, status, _ms(started))
        request = IngestEventsRequest()
        IngestEventsRequest.copy_from(request, built.request)
        request.validate_only = validate_only
        response = client.ingest_events(request=request, retry=None, timeout=settings.GOOGLE_ADS_TIMEOUT)
    except GoogleAPICallError as exc:
        return _refused(exc, awaited, _ms(started))
    except google.auth.exceptions.GoogleAuthError as exc:
        kept = {"request_id": awaited, "awaiting_status": True} if awaited else {}
        return Answer("retry", "oauth", f"{type(exc).__name__}: {exc}"[:500], kept, _ms(started))
    answer = _as_dict(response)
    if validate_only:
        return Answer("dry_run", "", "dry run: Google validated the request and ingested nothing", answer, _ms(started))
    answer["awaiting_status"] = True
    message = f"Google took the event (request {response.request_id}): asked for its processing status next"
    return Answer("not_yet", "accepted", message, answer, _ms(started), processing=True)


def _refused(exc: GoogleAPICallError, awaited: str, ms: int) -> Answer:
    """A failed call, sorted: the event refused for what it carries is
    `failed`, anything else `retry` (a status request keeps waiting)."""
    status = exc.grpc_status_code
    name = status.name if status is not None else "UNKNOWN"
    violations, request_id = [], ""
    for detail in exc.details or ():
        if isinstance(detail, error_details_pb2.BadRequest):
            violations.extend(detail.field_violations)
        elif isinstance(detail, error_details_pb2.RequestInfo):
            request_id = detail.request_id
    reason = next((v.reason for v in violations if v.reason), "") or exc.reason or ""
    code = f"datamanager.{reason}" if reason else f"grpc.{name}"
    message = str(exc.message or name)
    if violations:
        message += " " + "; ".join(f"{v.field}: {v.description}" for v in violations)
    response: dict[str, Any] = {
        "status": name,
        "reason": exc.reason or "",
        "message": str(exc.message or ""),
        "field_violations": [{"field": v.field, "description": v.description, "reason": v.reason} for v in violations],
        "request_id": request_id,
    }
    if awaited:
        if reason == "INVALID_REQUEST_ID" or status == grpc.StatusCode.NOT_FOUND:
            # Google no longer knows the request: the event goes again.
            message = f"Google no longer knows request {awaited}: the conversion goes again ({message})"
            return Answer("not_yet", code, message[:500], response, ms)
        response.update(request_id=awaited, awaiting_status=True)
        return Answer("retry", code, message[:500], response, ms)
    return Answer("failed" if status in REFUSED else "retry", code, message[:500], response, ms)


def _verdict(request_id: str, response: Any, ms: int) -> Answer:
    """What Google made of an ingested event (RetrieveRequestStatus)."""
    answer = {"request_id": request_id, **_as_dict(response)}
    found = list(response.request_status_per_destination)
    state = RequestStatus(found[0].request_status if found else RequestStatus.REQUEST_STATUS_UNKNOWN)
    if state == RequestStatus.SUCCESS:
        return Answer("sent", "", "", answer, ms)
    if state not in (RequestStatus.FAILED, RequestStatus.PARTIAL_SUCCESS):
        answer["awaiting_status"] = True
        message = f"Google is still processing the event (request {request_id})"
        return Answer("not_yet", f"request_status.{state.name}", message, answer, ms, processing=True)
    reasons = [count.reason for count in found[0].error_info.error_counts]
    if not reasons:
        return Answer("failed", "request_status.FAILED", "Google did not take the event and gave no reason", answer, ms)
    names = ", ".join(_short(r) for r in reasons)
    code = f"processing.{_short(reasons[0])}"
    message = "; ".join(REASONS.get(r, _short(r).replace("_", " ").lower()) for r in reasons)
    if all(r in ALREADY for r in reasons):
        return Answer("sent", code, f"Google has it already ({names})", answer, ms)
    if any(r not in ALREADY | NOT_YET | PASSING for r in reasons):
        return Answer("failed", code, message[:500], answer, ms)
    if any(r in PASSING for r in reasons):
        return Answer("retry", code, f"{message}: the conversion goes again"[:500], answer, ms)
    return Answer("not_yet", code, message[:500], answer, ms)


def _short(reason: Any) -> str:
    name = getattr(reason, "name", str(reason))
    for prefix in ("PROCESSING_ERROR_REASON_", "PROCESSING_ERROR_"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def data_manager_clients_reset() -> None:
    """Drop the cached channels (a test's server went away)."""
    _client.cache_clear()
