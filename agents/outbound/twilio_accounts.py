"""Which Twilio account a business's traffic goes through.

A business may bring its own Twilio account (or a subaccount of the
operator's): `account_sid` and, if it uses one, `messaging_service_sid` in a
twilio source's config, the auth token in that source's encrypted `secret`.
Everything about that business then uses that account: texts, calls,
reconciliation, and the check of the signature on every request Twilio makes
about it. A business with no such source uses the operator's shared account
(TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN, TWILIO_MESSAGING_SERVICE_SID). One
business's message is never sent through, nor a request about it accepted
under, another business's account.

A source counts only with both the SID and the token: half a credential
would send with the shared token under a tenant's SID. Switched-off sources
keep their credentials (switching a source off stops its intake, not the
business's account); switched-on ones are preferred.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from twilio.http import HttpClient
from twilio.http.http_client import TwilioHttpClient
from twilio.rest import Client

from crm.models import Provider, Source

HTTP_TIMEOUT = 10.0


@dataclass(frozen=True)
class TwilioAccount:
    sid: str
    auth_token: str = field(repr=False)
    # None: the operator's shared account from the settings.
    business_id: int | None = None
    messaging_service_sid: str = ""

    @property
    def shared(self) -> bool:
        return self.business_id is None


def shared_account() -> TwilioAccount:
    return TwilioAccount(
        sid=settings.TWILIO_ACCOUNT_SID,
        auth_token=settings.TWILIO_AUTH_TOKEN,
        messaging_service_sid=settings.TWILIO_MESSAGING_SERVICE_SID,
    )


def twilio_sources(business_id: int) -> list[Source]:
    """The business's twilio sources, switched-on ones first: one query that
    the sender choice and the account choice can share."""
    return list(Source.objects.filter(business_id=business_id, provider=Provider.TWILIO).order_by("-is_active", "pk"))


def _own_account(source: Source) -> TwilioAccount | None:
    config = source.config or {}
    sid = str(config.get("account_sid") or "")
    if not sid or not source.secret:
        return None
    return TwilioAccount(
        sid=sid,
        auth_token=source.secret,
        business_id=source.business_id,
        messaging_service_sid=str(config.get("messaging_service_sid") or ""),
    )


def _owns(source: Source, number: str) -> bool:
    config = source.config or {}
    return bool(number) and number in (config.get("phone_number"), config.get("messaging_service_sid"))


def business_account(business_id: int, *, number: str = "", sources: list[Source] | None = None) -> TwilioAccount:
    """The account for the business's traffic on `number` (a phone number or
    a Messaging Service SID): that of the source owning the number, else of
    the business's first source with credentials, else the shared one.
    `sources`: the business's `twilio_sources`, when the caller has them."""
    sources = twilio_sources(business_id) if sources is None else sources
    owning = [source for source in sources if _owns(source, number)]
    for source in owning + sources:
        account = _own_account(source)
        if account is not None:
            return account
    return shared_account()


def account_by_sid(account_sid: str) -> TwilioAccount | None:
    """The business account whose SID this is (Twilio names it in every
    request as `AccountSid`), or None when no business has it."""
    if not account_sid:
        return None
    for source in Source.objects.filter(provider=Provider.TWILIO, config__account_sid=account_sid).order_by("pk"):
        account = _own_account(source)
        if account is not None:
            return account
    return None


def messaging_service_for(business_id: int, *, sources: list[Source] | None = None) -> str:
    """The Messaging Service the business texts through: one named on its
    sources, else the shared one only while it uses the shared account (a
    service of the operator's account cannot send under a tenant's)."""
    sources = twilio_sources(business_id) if sources is None else sources
    for source in sources:
        service = str((source.config or {}).get("messaging_service_sid") or "")
        if service:
            return service
    account = business_account(business_id, sources=sources)
    return account.messaging_service_sid if account.shared else ""


def twilio_client(account: TwilioAccount, http_client: HttpClient | None = None) -> Client:
    """The real twilio client for `account`, with an explicit timeout;
    TWILIO_API_BASE_URL points it at a Twilio-compatible server (tests,
    staging)."""
    client = Client(account.sid, account.auth_token, http_client=http_client or TwilioHttpClient(timeout=HTTP_TIMEOUT))
    if settings.TWILIO_API_BASE_URL:
        client.api.base_url = settings.TWILIO_API_BASE_URL.rstrip("/")
    # Lookup lives on its own host at Twilio; a stand-in may serve both.
    if lookup := settings.TWILIO_LOOKUP_URL or settings.TWILIO_API_BASE_URL.rstrip("/"):
        client.lookups.base_url = lookup
    return client
