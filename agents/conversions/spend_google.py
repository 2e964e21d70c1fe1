"""Google Ads spend: each campaign's cost, clicks and impressions per day,
read with GoogleAdsService.Search through Google's official `google-ads`
client (the same services, credentials and endpoint as the conversion
uploads: agents.google_ads_api).

The query segments the `campaign` resource by `segments.date`, which Google
counts in the ad account's own time zone; `metrics.cost_micros` is in the
account's currency (`customer.currency_code`), a millionth of a unit. The
client's pager follows `next_page_token` itself; every page is read before
anything is written.

Google's answers, sorted: UNAUTHENTICATED (a revoked or expired refresh
token, the developer token refused) or an OAuth refresh the token endpoint
refuses is `SpendRefused("token")`; anything else Google or the network
says is `SpendRefused("")`, a passing failure the next run tries again.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import google.auth.exceptions
import grpc
from django.conf import settings
from google.ads.googleads.errors import GoogleAdsException
from google.ads.googleads.v26.services.types.google_ads_service import SearchGoogleAdsRequest

from agents.conversions.spend_base import SpendRefused
from agents.google_ads_api import Access, failure_text, google_ads_services
from crm.models import ConversionAccount
from crm.services.conversions import account_secrets
from crm.services.spend import SpendRow

QUERY = (
    "SELECT campaign.id, campaign.name, segments.date, metrics.cost_micros, metrics.clicks, "
    "metrics.impressions, customer.currency_code FROM campaign "
    "WHERE segments.date BETWEEN '{since}' AND '{until}'"
)
MICROS = Decimal(1_000_000)


def _digits(value: object) -> str:
    return "".join(ch for ch in str(value or "") if ch.isdigit())


def google_customer_id(account: ConversionAccount) -> str:
    return _digits(account.config.get("customer_id"))


def google_spend_read(account: ConversionAccount, since: date, until: date) -> list[SpendRow]:
    """Every campaign day of the account's customer from since to until
    (inclusive), as Google reports it. Outside any transaction; writes nothing."""
    customer_id = google_customer_id(account)
    if not customer_id:
        raise SpendRefused("", "the Google Ads account has no customer_id")
    secrets = account_secrets(account)
    missing = [name for name, value in secrets.items() if not value]
    if missing:
        # Reporting goes through the Google Ads API, which needs a developer
        # token even for an account that uploads through the Data Manager API.
        raise SpendRefused("", f"missing {', '.join(missing)}: set them in the business file or the environment")
    login = _digits(account.config.get("login_customer_id") or settings.GOOGLE_ADS_LOGIN_CUSTOMER_ID)
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
    request = SearchGoogleAdsRequest(
        customer_id=customer_id, query=QUERY.format(since=since.isoformat(), until=until.isoformat())
    )
    rows: list[SpendRow] = []
    try:
        services.token_refresh()
        for found in services.get("GoogleAdsService").search(request=request, timeout=settings.GOOGLE_ADS_TIMEOUT):
            rows.append(
                SpendRow(
                    campaign_id=str(found.campaign.id),
                    name=found.campaign.name,
                    day=date.fromisoformat(found.segments.date),
                    cost=Decimal(found.metrics.cost_micros) / MICROS,
                    clicks=int(found.metrics.clicks),
                    impressions=int(found.metrics.impressions),
                    currency=found.customer.currency_code.upper(),
                )
            )
    except GoogleAdsException as exc:
        code, message = failure_text(exc.failure)
        status = exc.error.code()
        refused = status == grpc.StatusCode.UNAUTHENTICATED or code.startswith("authentication_error.")
        raise SpendRefused(
            "token" if refused else "", f"Google Ads refused the spend query ({status.name}, {code}): {message}"
        ) from exc
    except grpc.RpcError as exc:
        status = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        refused = status == grpc.StatusCode.UNAUTHENTICATED
        raise SpendRefused(
            "token" if refused else "", f"Google Ads: {getattr(status, 'name', 'UNKNOWN')}: {details}"[:500]
        ) from exc
    except google.auth.exceptions.RefreshError as exc:
        # A refused grant (invalid_grant: revoked, expired) is final; the token
        # endpoint's own trouble is marked retryable.
        kind = "" if getattr(exc, "retryable", False) else "token"
        raise SpendRefused(kind, f"Google refused the OAuth refresh token: {exc}"[:500]) from exc
    except google.auth.exceptions.GoogleAuthError as exc:
        raise SpendRefused("", f"Google OAuth: {type(exc).__name__}: {exc}"[:500]) from exc
    return rows
