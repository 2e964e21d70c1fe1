"""How the poller and the lead feedback reach a google_lsa source's Google
Ads account: its customer id, its credentials, GAQL searches and Google's
refusals sorted into the ones a person must fix and the passing ones."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import google.api_core.exceptions
import google.auth.exceptions
import grpc
from django.conf import settings

from agents.google_ads_api import Access, Services, failure_text, google_ads_services
from crm.models import ConversionAccount, ConversionPlatform, Source
from crm.services.conversions import SECRET_NAMES, account_secrets

T = TypeVar("T")
# A poll runs every minute for every source: one slow answer must not take
# the job's whole timeout.
CALL_TIMEOUT = 15.0
# Google's refusals that no retry cures: the credentials, or the account's access.
REFUSED_ACCESS = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class AccountNotReady(Exception):
    """The source cannot call Google: no customer id, or credentials missing."""


@dataclass
class Refused(Exception):
    """Google (or its OAuth endpoint) refused a call, or it never got there.
    `access`: the credentials or the account's access were refused — a
    person must fix them; anything else passes (UNAVAILABLE, a timeout)."""

    code: str
    message: str
    access: bool = False

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def _digits(value: Any) -> str:
    return re.sub(r"\D", "", str(value or ""))


def customer_id(source: Source) -> str:
    """The Google Ads account (customer id, digits) the source reads."""
    found = _digits(source.config.get("customer_id"))
    if not found:
        raise AccountNotReady(f"source {source.key!r} has no customer_id: set the Google Ads account's id")
    return found


def access_for(source: Source) -> Access:
    """The credentials a source calls Google with.

    The business's Google conversion account, when it has one: the same
    developer token and OAuth grant its conversion uploads use, each one it
    leaves out read from the GOOGLE_ADS_* settings, as the uploads do
    (crm.services.conversions.account_secrets). Without one, the GOOGLE_ADS_*
    settings alone. One Google Ads API access covers both: Local Services
    leads live in a Google Ads account like any campaign's."""
    account = (
        ConversionAccount.objects.filter(
            business_id=source.business_id, platform=ConversionPlatform.GOOGLE, is_active=True
        )
        .order_by("pk")
        .first()
    )
    if account is not None:
        secrets = account_secrets(account)
        login = source.config.get("login_customer_id") or account.config.get("login_customer_id")
    else:
        names = SECRET_NAMES[ConversionPlatform.GOOGLE]
        secrets = {name: str(getattr(settings, setting, "") or "") for name, setting in names.items()}
        login = source.config.get("login_customer_id")
    missing = sorted(name for name, value in secrets.items() if not value)
    if missing:
        raise AccountNotReady(
            f"missing {', '.join(missing)}: set them on the business's Google conversion account or in the environment"
        )
    return Access(
        developer_token=secrets["developer_token"],
        client_id=secrets["client_id"],
        client_secret=secrets["client_secret"],
        refresh_token=secrets["refresh_token"],
        login_customer_id=_digits(login or settings.GOOGLE_ADS_LOGIN_CUSTOMER_ID),
    )


def services_for(source: Source) -> Services:
    return google_ads_services(settings.GOOGLE_ADS_ENDPOINT, settings.GOOGLE_OAUTH_TOKEN_URL, access_for(source))


def timeout() -> float:
    return min(float(settings.GOOGLE_ADS_TIMEOUT), CALL_TIMEOUT)


def google_call(services: Services, call: Callable[[], T]) -> T:
    """`call()` with a fresh token, Google's refusals raised as `Refused`."""
    # The Google Ads library is imported where it is used: its types take
    # seconds to load, and every process registers this provider at startup.
    from google.ads.googleads.errors import GoogleAdsException

    try:
        services.token_refresh()
        return call()
    except GoogleAdsException as exc:
        code, message = failure_text(exc.failure)
        status = exc.error.code()
        access = status in REFUSED_ACCESS or code.startswith(("authentication_error", "authorization_error"))
        raise Refused(code, message, access=access) from exc
    except google.api_core.exceptions.GoogleAPICallError as exc:
        # A status with no Google Ads failure in it (UNAVAILABLE, a deadline):
        # the generated client raises it as api_core's.
        status = exc.grpc_status_code
        name = getattr(status, "name", "UNKNOWN")
        raise Refused(f"grpc.{name}", str(exc.message)[:500], access=status in REFUSED_ACCESS) from exc
    except grpc.RpcError as exc:
        status = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        name = getattr(status, "name", "UNKNOWN")
        raise Refused(f"grpc.{name}", str(details)[:500], access=status in REFUSED_ACCESS) from exc
    except google.auth.exceptions.RefreshError as exc:
        # Google's token endpoint refused the refresh token (revoked, expired).
        raise Refused("oauth", f"{type(exc).__name__}: {exc}"[:500], access=True) from exc
    except google.auth.exceptions.GoogleAuthError as exc:
        raise Refused("oauth", f"{type(exc).__name__}: {exc}"[:500]) from exc


def search(source: Source, query: str) -> list[dict[str, Any]]:
    """Every row GAQL `query` returns for the source's account, each as the
    GoogleAdsRow's JSON object (snake_case fields, enums by name)."""
    from google.ads.googleads.v26.services.types.google_ads_service import SearchGoogleAdsRequest

    services = services_for(source)
    request = SearchGoogleAdsRequest(customer_id=customer_id(source), query=query)

    def rows() -> list[dict[str, Any]]:
        # The pager reads later pages while it is iterated: inside the call.
        pager = services.get("GoogleAdsService").search(request=request, timeout=timeout())
        return [type(row).to_dict(row, use_integers_for_enums=False) for row in pager]

    return google_call(services, rows)
