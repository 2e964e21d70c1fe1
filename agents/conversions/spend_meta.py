"""Meta spend: each campaign's spend, clicks and impressions per day, from
the Marketing API's insights of the ad account, straight over the Graph API
at META_GRAPH_URL (whose path carries the API version):

    GET {graph}/act_{ad_account_id}/insights?level=campaign&time_increment=1
        &time_range={"since": "YYYY-MM-DD", "until": "YYYY-MM-DD"}
        &fields=campaign_id,campaign_name,spend,clicks,impressions,account_currency

`time_increment=1` gives one row per campaign and day (`date_start`), in the
ad account's time zone; `spend` is a decimal string in `account_currency`.
Pages are followed by their `paging.next` link, only on META_GRAPH_URL's own
host (the token goes with it), the token in the Authorization header and
never in a URL (a `next` link that carries one loses it). Every page is read
before anything is written.

An HTTP 401 or Meta's OAuthException code 190 (an expired or revoked token)
is `SpendRefused("token")`; a timeout, a 5xx or an error Meta marks
transient is retried with backoff (agents.meta_graph's), and after the last
try, or for any other refusal, is `SpendRefused("")`.
"""

from __future__ import annotations

import json
import time
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import requests
from django.conf import settings

from agents.conversions.spend_base import TOKEN, SpendRefused
from agents.meta_graph import (
    ATTEMPTS,
    RETRY_DELAY,
    TRANSIENT,
    USER_AGENT,
    backoff_delays,
    graph_error_text,
    graph_timeout,
    redact,
)
from crm.models import ConversionAccount
from crm.services.conversions import account_secrets
from crm.services.spend import SpendRow

FIELDS = "campaign_id,campaign_name,spend,clicks,impressions,account_currency"
PAGE_LIMIT = 500
# A guard against a `next` that never ends: 500 rows a page is 250,000 campaign days.
MAX_PAGES = 500
# Meta's codes for an expired, revoked or invalid access token.
TOKEN_CODES = frozenset({190})
TRANSIENT_CODES = frozenset({1, 2, 4, 17, 32, 341, 613, 80000, 80004})


def meta_ad_account_id(account: ConversionAccount) -> str:
    return str(account.config.get("ad_account_id") or "").removeprefix("act_")


def _without_token(url: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "access_token"]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))


def _get(session: requests.Session, url: str, params: dict[str, str] | None, token: str) -> dict[str, Any]:
    attempts = int(getattr(settings, "META_GRAPH_ATTEMPTS", ATTEMPTS))
    delay = float(getattr(settings, "META_GRAPH_RETRY_DELAY", RETRY_DELAY))
    waits = backoff_delays(attempts, delay)
    last = ""
    for attempt in range(attempts):
        if attempt:
            time.sleep(waits[attempt - 1])
        try:
            response = session.get(url, params=params, timeout=graph_timeout())
        except TRANSIENT as exc:
            last = redact(f"{type(exc).__name__}: {exc}", token)
            continue
        try:
            body = response.json()
        except ValueError:
            body = {}
        error = body.get("error") if isinstance(body, dict) else None
        error = error if isinstance(error, dict) else {}
        if response.status_code < 300 and isinstance(body, dict) and not error:
            return body
        text = f"HTTP {response.status_code}: {redact(graph_error_text(response), token)}"
        if response.status_code == 401 or error.get("code") in TOKEN_CODES:
            raise SpendRefused(TOKEN, f"Meta refused the access token: {text}")
        if response.status_code >= 500 or error.get("is_transient") or error.get("code") in TRANSIENT_CODES:
            last = text
            continue
        raise SpendRefused("", f"Meta refused the insights request: {text}")
    raise SpendRefused("", f"Meta insights unavailable after {attempts} attempts: {last}")


def _row(found: dict[str, Any]) -> SpendRow:
    try:
        return SpendRow(
            campaign_id=str(found["campaign_id"]),
            name=str(found.get("campaign_name") or ""),
            day=date.fromisoformat(str(found["date_start"])),
            cost=Decimal(str(found.get("spend") or "0")),
            clicks=int(found.get("clicks") or 0),
            impressions=int(found.get("impressions") or 0),
            currency=str(found.get("account_currency") or "").upper(),
        )
    except (KeyError, ValueError, InvalidOperation) as exc:
        raise SpendRefused("", f"Meta answered an insights row we cannot read ({exc!r}): {found!r}"[:500]) from exc


def meta_spend_read(account: ConversionAccount, since: date, until: date) -> list[SpendRow]:
    """Every campaign day of the ad account from since to until (inclusive),
    as Meta reports it. Outside any transaction; writes nothing."""
    ad_account = meta_ad_account_id(account)
    if not ad_account:
        raise SpendRefused("", "the Meta account names no ad_account_id (conversions.meta.ad_account_id)")
    token = account_secrets(account)["access_token"]
    if not token:
        raise SpendRefused("", "missing access_token: set it in the business file or the environment")
    base = settings.META_GRAPH_URL.rstrip("/")
    home = urlsplit(base)
    url: str | None = f"{base}/act_{ad_account}/insights"
    params: dict[str, str] | None = {
        "level": "campaign",
        "time_increment": "1",
        "time_range": json.dumps({"since": since.isoformat(), "until": until.isoformat()}),
        "fields": FIELDS,
        "limit": str(PAGE_LIMIT),
    }
    rows: list[SpendRow] = []
    with requests.Session() as session:
        session.headers["User-Agent"] = USER_AGENT
        session.headers["Authorization"] = f"Bearer {token}"
        for _ in range(MAX_PAGES):
            assert url is not None
            body = _get(session, url, params, token)
            data = body.get("data")
            if not isinstance(data, list):
                raise SpendRefused("", "Meta answered insights without a data list")
            rows.extend(_row(found) for found in data if isinstance(found, dict))
            paging = body.get("paging")
            following = paging.get("next") if isinstance(paging, dict) else None
            if not following:
                return rows
            target = urlsplit(str(following))
            if (target.scheme, target.netloc) != (home.scheme, home.netloc):
                raise SpendRefused("", f"Meta's next page is on another host ({target.netloc}): not followed")
            # The link carries the query (cursor included) whole.
            url, params = _without_token(str(following)), None
    raise SpendRefused("", f"Meta's insights ran past {MAX_PAGES} pages: stopped")
