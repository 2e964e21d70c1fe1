"""Google Ads: click conversions and their restatements, through Google's
official `google-ads` client (its generated gRPC services, proto-plus
types), one conversion per request with partial failure on. For the
accounts that already uploaded through the Google Ads API (`api:
google_ads`); a new one goes through the Data Manager API (data_manager.py).

A conversion carries its click id (gclid, else gbraid or wbraid), the
mapped conversion action, the conversion time in the account's zone
("yyyy-mm-dd hh:mm:ss+hh:mm"), won and paid values with their currency, and
an order id made from the upload's key (Google refuses a second conversion
with the same order id for an action: a replay cannot count twice). With
`enhanced_conversions` on, the contact's email and phone go too, SHA-256
hashed, only where crm.services.conversions.identifiers_allowed says the
person's consent allows. A refund, or another payment, restates the paid
conversion's value (ConversionAdjustmentUploadService; a retraction when
nothing is left).

Google's answers, sorted for the delivery: a click or conversion it has
not processed yet (CLICK_NOT_FOUND, TOO_RECENT_…, CONVERSION_PRECEDES_EVENT,
an adjustment's CONVERSION_NOT_FOUND) is `not_yet`, tried again within the
click's window; one it has already is `sent`; any other refusal of the
conversion is `failed` with Google's message; a refused request (bad
credentials, quota) or a transport failure is `retry`.

The clients, and how they reach Google (or GOOGLE_ADS_ENDPOINT in tests and
development), are agents.google_ads_api's.
"""

from __future__ import annotations

import time
from datetime import datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import google.auth.exceptions
import grpc
from django.conf import settings
from google.ads.googleads.errors import GoogleAdsException
from google.ads.googleads.v26.common.types.offline_user_data import UserIdentifier
from google.ads.googleads.v26.enums.types.conversion_adjustment_type import ConversionAdjustmentTypeEnum
from google.ads.googleads.v26.enums.types.user_identifier_source import UserIdentifierSourceEnum
from google.ads.googleads.v26.errors.types.errors import GoogleAdsFailure
from google.ads.googleads.v26.services.types.conversion_adjustment_upload_service import (
    ConversionAdjustment,
    RestatementValue,
    UploadConversionAdjustmentsRequest,
)
from google.ads.googleads.v26.services.types.conversion_upload_service import (
    ClickConversion,
    UploadClickConversionsRequest,
)

from agents.conversions.base import Answer, Built, Skip
from agents.google_ads_api import (  # noqa: F401 - API_VERSION, TimedRequest: importable from here too
    API_VERSION,
    Access,
    TimedRequest,
    failure_text,
    google_ads_services,
    google_ads_services_reset,
)
from crm.models import ConversionKind, ConversionUpload
from crm.services.conversions import (
    account_secrets,
    identifiers_allowed,
    lead_net_collected,
    lead_won_value,
    normalized_hash,
)

K = ConversionKind
UPLOAD = "ConversionUploadService.UploadClickConversions"
ADJUST = "ConversionAdjustmentUploadService.UploadConversionAdjustments"
# Google has not processed the click (or the conversion an adjustment names) yet.
NOT_YET = frozenset(
    {
        "conversion_upload_error.CLICK_NOT_FOUND",
        "conversion_upload_error.EVENT_NOT_FOUND",
        "conversion_upload_error.TOO_RECENT_EVENT",
        "conversion_upload_error.TOO_RECENT_CONVERSION_ACTION",
        "conversion_upload_error.CONVERSION_PRECEDES_EVENT",
        "conversion_adjustment_upload_error.CONVERSION_NOT_FOUND",
        "conversion_adjustment_upload_error.TOO_RECENT_CONVERSION",
        "conversion_adjustment_upload_error.TOO_RECENT_CONVERSION_ACTION",
    }
)
# Google has it already (an earlier try whose answer was lost, a replay).
ALREADY = frozenset(
    {
        "conversion_upload_error.CLICK_CONVERSION_ALREADY_EXISTS",
        "conversion_upload_error.ORDER_ID_ALREADY_IN_USE",
        "conversion_adjustment_upload_error.RESTATEMENT_ALREADY_EXISTS",
        "conversion_adjustment_upload_error.CONVERSION_ALREADY_RETRACTED",
    }
)
MAX_IDENTIFIERS = 5  # Google's limit per conversion


def conversion_time(moment: datetime, zone: ZoneInfo) -> str:
    """ "yyyy-mm-dd hh:mm:ss+hh:mm" in the account's zone, as Google asks."""
    local = moment.astimezone(zone)
    offset = local.strftime("%z")
    return f"{local:%Y-%m-%d %H:%M:%S}{offset[:3]}:{offset[3:]}"


def _digits(value: Any) -> str:
    return "".join(ch for ch in str(value or "") if ch.isdigit())


def order_id(upload: ConversionUpload) -> str:
    """The upload's key without its platform: the lead and the kind."""
    return upload.key.split(":", 1)[1]


# --- building ----------------------------------------------------------------------------


def google_build(upload: ConversionUpload, *, now: datetime) -> Built:
    """The request for an upload, or Skip when there is nothing Google could
    take. Reads the lead's money as it is now: a paid conversion goes with
    the payments net of refunds at the time it is sent."""
    account, business = upload.account, upload.business
    zone = ZoneInfo(account.config.get("timezone") or business.timezone)
    customer_id = _digits(account.config.get("customer_id"))
    if upload.kind == K.RESTATEMENT:
        return _restatement(upload, customer_id, zone)
    conversion = ClickConversion(
        conversion_action=upload.action,
        conversion_date_time=conversion_time(upload.occurred_at, zone),
        order_id=order_id(upload),
    )
    touch = upload.touch
    if touch is not None and touch.gclid:
        conversion.gclid = touch.gclid
    elif touch is not None and touch.gbraid:
        conversion.gbraid = touch.gbraid
    elif touch is not None and touch.wbraid:
        conversion.wbraid = touch.wbraid
    value: Decimal | None = None
    currency = ""
    if upload.kind == K.WON:
        won = lead_won_value(upload.lead)
        if won is not None:
            value, currency = won
    elif upload.kind == K.PAID:
        value, currency = lead_net_collected(upload.lead, business.currency), business.currency
    if value is not None:
        conversion.conversion_value = float(value)
        conversion.currency_code = currency
    if account.config.get("enhanced_conversions"):
        for kind, raw in identifiers_allowed(upload.lead)[:MAX_IDENTIFIERS]:
            identifier = UserIdentifier(
                user_identifier_source=UserIdentifierSourceEnum.UserIdentifierSource.FIRST_PARTY
            )
            if kind == "email":
                identifier.hashed_email = normalized_hash(kind, raw)
            else:
                identifier.hashed_phone_number = normalized_hash(kind, raw)
            conversion.user_identifiers.append(identifier)
    if not (conversion.gclid or conversion.gbraid or conversion.wbraid or conversion.user_identifiers):
        raise Skip(
            "no Google click id (gclid, gbraid, wbraid) on the lead, and no email or phone its consent "
            "allows for enhanced conversions"
        )
    request = UploadClickConversionsRequest(customer_id=customer_id, conversions=[conversion], partial_failure=True)
    payload = {
        "service": UPLOAD,
        "request": UploadClickConversionsRequest.to_dict(request, use_integers_for_enums=False),
    }
    return Built(payload=payload, request=request, value=value, currency=currency)


def _restatement(upload: ConversionUpload, customer_id: str, zone: ZoneInfo) -> Built:
    paid = upload.restates
    assert paid is not None
    if paid.status not in (ConversionUpload.Status.SENT, ConversionUpload.Status.DRY_RUN):
        raise Skip(f"the paid conversion it restates ({paid.public_id}) is {paid.status}: there is nothing to adjust")
    currency = upload.business.currency
    value = lead_net_collected(upload.lead, currency)
    last = (
        ConversionUpload.objects.filter(pk__in=[paid.pk, *paid.restatements.values_list("pk", flat=True)])
        .filter(status__in=[ConversionUpload.Status.SENT, ConversionUpload.Status.DRY_RUN])
        .exclude(pk=upload.pk)
        .order_by("-sent_at", "-id")
        .values_list("value_amount", flat=True)
        .first()
    )
    if last is not None and last == value:
        raise Skip(f"the paid conversion already carries {value} {currency}: nothing to restate")
    types = ConversionAdjustmentTypeEnum.ConversionAdjustmentType
    adjustment = ConversionAdjustment(
        conversion_action=paid.action,
        order_id=order_id(paid),
        adjustment_date_time=conversion_time(upload.occurred_at, zone),
        adjustment_type=types.RETRACTION if value <= 0 else types.RESTATEMENT,
    )
    if value > 0:
        adjustment.restatement_value = RestatementValue(adjusted_value=float(value), currency_code=currency)
    request = UploadConversionAdjustmentsRequest(
        customer_id=customer_id, conversion_adjustments=[adjustment], partial_failure=True
    )
    payload = {
        "service": ADJUST,
        "request": UploadConversionAdjustmentsRequest.to_dict(request, use_integers_for_enums=False),
    }
    return Built(payload=payload, request=request, value=max(value, Decimal("0.00")), currency=currency)


# --- sending -------------------------------------------------------------------------------


def google_send(upload: ConversionUpload, built: Built) -> Answer:
    """Send the built request; Google's answer, sorted. Outside any transaction."""
    secrets = account_secrets(upload.account)
    missing = [name for name, value in secrets.items() if not value]
    if missing:
        return Answer(
            "retry", "credentials", f"missing {', '.join(missing)}: set them in the business file or the environment"
        )
    login = _digits(upload.account.config.get("login_customer_id") or settings.GOOGLE_ADS_LOGIN_CUSTOMER_ID)
    services = google_ads_services(
        settings.GOOGLE_ADS_ENDPOINT,
        settings.GOOGLE_OAUTH_TOKEN_URL,
        Access(
            developer_token=secrets["developer_token"],
            client_id=secrets["client_id"],
            client_secret=secrets["client_secret"],
            refresh_token=secrets["refresh_token"],
            login_customer_id=login,
        ),
    )
    started = time.monotonic()
    try:
        services.token_refresh()
        if isinstance(built.request, UploadConversionAdjustmentsRequest):
            response = services.get("ConversionAdjustmentUploadService").upload_conversion_adjustments(
                request=built.request, timeout=settings.GOOGLE_ADS_TIMEOUT
            )
        else:
            response = services.get("ConversionUploadService").upload_click_conversions(
                request=built.request, timeout=settings.GOOGLE_ADS_TIMEOUT
            )
    except GoogleAdsException as exc:
        code, message = failure_text(exc.failure)
        return Answer(
            "retry", code, message, {"request_id": exc.request_id, "status": exc.error.code().name}, _ms(started)
        )
    except grpc.RpcError as exc:
        status = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        return Answer("retry", f"grpc.{getattr(status, 'name', 'UNKNOWN')}", str(details)[:500], {}, _ms(started))
    except google.auth.exceptions.GoogleAuthError as exc:
        return Answer("retry", "oauth", f"{type(exc).__name__}: {exc}"[:500], {}, _ms(started))
    answer = type(response).to_dict(response, use_integers_for_enums=False)
    answer.pop("partial_failure_error", None)
    partial = response.partial_failure_error
    if partial is not None and (partial.code or partial.details):
        failures = [GoogleAdsFailure.deserialize(detail.value) for detail in partial.details]
        errors = [error for failure in failures for error in failure.errors]
        code, message = failure_text(GoogleAdsFailure(errors=errors))
        answer["partial_failure_error"] = {"code": partial.code, "message": partial.message, "errors": message}
        outcome = "not_yet" if code in NOT_YET else "sent" if code in ALREADY else "failed"
        return Answer(outcome, code, message or partial.message, answer, _ms(started))
    return Answer("sent", "", "", answer, _ms(started))


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def google_services_reset() -> None:
    """Drop the cached channels (a test's server went away)."""
    google_ads_services_reset()
