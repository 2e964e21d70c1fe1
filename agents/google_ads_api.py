"""The Google Ads API through Google's official `google-ads` client: its
generated gRPC service clients (proto-plus types) for one set of
credentials, shared by conversion uploads (agents.conversions.google) and the
Local Services lead poller (agents.capture.providers.google_lsa).

In production `GoogleAdsClient.get_service` builds each service on its own
TLS channel to Google. With GOOGLE_ADS_ENDPOINT set (tests, development) the
same generated service clients, with the library's own metadata and
exception interceptors, run on one gRPC channel with local credentials to
that address instead: `get_service` only ever makes TLS channels with the
public roots, and gRPC applies the OAuth call credentials only on a channel
it considers secure, which local (loopback) credentials are. Everything past
the channel — the OAuth refresh at GOOGLE_OAUTH_TOKEN_URL, the
developer-token and login-customer-id headers, the request and response
types, GoogleAdsException — is the library's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from importlib import import_module
from typing import Any

import google.auth.transport.grpc
import google.auth.transport.requests
import grpc
from google.ads.googleads.client import GoogleAdsClient
from google.ads.googleads.interceptors import ExceptionInterceptor, MetadataInterceptor
from google.ads.googleads.util import convert_upper_case_to_snake_case
from google.oauth2.credentials import Credentials

API_VERSION = "v26"
OAUTH_TIMEOUT = 10.0


class TimedRequest(google.auth.transport.requests.Request):
    """The OAuth refresh's HTTP, with a timeout of ours (the library's
    default waits two minutes)."""

    def __call__(
        self, url: Any, method: Any = "GET", body: Any = None, headers: Any = None, timeout: Any = None, **kwargs: Any
    ) -> Any:
        timeout = min(float(timeout or OAUTH_TIMEOUT), OAUTH_TIMEOUT)
        return super().__call__(url, method=method, body=body, headers=headers, timeout=timeout, **kwargs)


@dataclass(frozen=True)
class Access:
    """Who calls: the developer token, the OAuth client and refresh token,
    and the manager account the call goes through (digits, or "")."""

    developer_token: str
    client_id: str
    client_secret: str
    refresh_token: str
    login_customer_id: str = ""


class Services:
    """The service clients of one endpoint and one `Access`, made on first
    use and kept: in production each on the library's own channel, with an
    endpoint all on one local channel."""

    def __init__(self, endpoint: str, token_url: str, access: Access) -> None:
        self.credentials = Credentials(
            token=None,
            refresh_token=access.refresh_token,
            client_id=access.client_id,
            client_secret=access.client_secret,
            token_uri=token_url,
        )
        self._lock = threading.Lock()
        self._made: dict[str, Any] = {}
        self._client: GoogleAdsClient | None = None
        self._channel: grpc.Channel | None = None
        if not endpoint:
            self._client = GoogleAdsClient(
                credentials=self.credentials,
                developer_token=access.developer_token,
                login_customer_id=access.login_customer_id or None,
                version=API_VERSION,
                use_proto_plus=True,
            )
            return
        call = grpc.metadata_call_credentials(
            google.auth.transport.grpc.AuthMetadataPlugin(self.credentials, TimedRequest())
        )
        local = grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)
        self._channel = grpc.intercept_channel(
            grpc.secure_channel(endpoint, grpc.composite_channel_credentials(local, call)),
            MetadataInterceptor(access.developer_token, access.login_customer_id or None),
            ExceptionInterceptor(API_VERSION, use_proto_plus=True),
        )

    def get(self, name: str) -> Any:
        """The generated client of the service `name` ("GoogleAdsService")."""
        with self._lock:
            if name not in self._made:
                self._made[name] = self._make(name)
            return self._made[name]

    def _make(self, name: str) -> Any:
        if self._client is not None:
            return self._client.get_service(name)
        module = import_module(
            f"google.ads.googleads.{API_VERSION}.services.services.{convert_upper_case_to_snake_case(name)}"
        )
        client_class = getattr(module, f"{name}Client")
        return client_class(transport=client_class.get_transport_class("grpc")(channel=self._channel))

    def token_refresh(self) -> None:
        """Refresh the OAuth token now, with our timeout, when it is not
        valid: the channel's own refresh (the library's) then finds one that
        is. Raises google.auth's errors (a refused refresh token)."""
        if not self.credentials.valid:
            self.credentials.refresh(TimedRequest())


@lru_cache(maxsize=32)
def google_ads_services(endpoint: str, token_url: str, access: Access) -> Services:
    """The services for these settings: one channel, kept for the process."""
    return Services(endpoint, token_url, access)


def google_ads_services_reset() -> None:
    """Drop the kept channels (a test's server went away)."""
    google_ads_services.cache_clear()


def error_code(error: Any) -> str:
    """ "conversion_upload_error.CLICK_NOT_FOUND" for a GoogleAdsError."""
    code = error.error_code
    which = type(code).pb(code).WhichOneof("error_code")
    if not which:
        return "unknown"
    value = getattr(code, which)
    return f"{which}.{getattr(value, 'name', value)}"


def failure_text(failure: Any) -> tuple[str, str]:
    """(the first error's code, every error's message) of a GoogleAdsFailure."""
    errors = list(getattr(failure, "errors", []) or [])
    if not errors:
        return "unknown", "Google refused the request without saying why"
    return error_code(errors[0]), "; ".join(e.message for e in errors)[:500]
