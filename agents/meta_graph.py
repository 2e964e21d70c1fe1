"""Graph API client: read one Lead Ads lead by its leadgen id; the helpers
(timeouts, backoff, redaction, Meta's error shape) the Instagram Send API
client (agents/outbound/instagram.py) and the Conversions API client
(agents/conversions/meta.py) share. It sits below the roles that use it:
capture, outbound and conversions each import it, it imports none of them.

A leadgen webhook carries only ids, so processing fetches the lead. Network
trouble (timeouts, dropped connections, 5xx) is retried with exponential
backoff; a 4xx is Meta's final word (bad token, missing permission, a lead
older than 90 days…) and is not. After the last attempt `GraphError` is
raised, and the inbound event is left failed with that message, to replay.

Tuning, read from settings when present (tests shrink them):
`META_GRAPH_TIMEOUT` = (connect, read) seconds, `META_GRAPH_ATTEMPTS`,
`META_GRAPH_RETRY_DELAY` = the first backoff wait in seconds, doubled after
each retry. The defaults keep a worst case (3 × 13 s + 1.5 s) inside the
task cluster's 60 s timeout.
"""

from __future__ import annotations

import hashlib
import re
import time
from typing import Any
from urllib.parse import quote

import requests
from django.conf import settings

LEAD_FIELDS = (
    "id,created_time,ad_id,ad_name,adset_id,adset_name,campaign_id,campaign_name,form_id,platform,is_organic,field_data"
)
CONNECT_TIMEOUT = 3.05
READ_TIMEOUT = 10.0
ATTEMPTS = 3
RETRY_DELAY = 0.5
USER_AGENT = "LeadOps/1 (+lead capture)"
# Message.provider_sid holds 255 characters; Instagram message ids run past 100.
SID_MAX = 255
# Worth another try: the request may not have reached Meta, or Meta hiccuped.
TRANSIENT = (requests.Timeout, requests.ConnectionError, requests.exceptions.ChunkedEncodingError)


class GraphError(Exception):
    """The Graph API did not give us the lead. The message never holds the
    access token (it ends up in the event's error, visible to staff)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(redact(message))
        self.status = status


def message_sid(mid: str) -> str:
    """A Meta message id (an inbound DM's mid, the Send API's message_id, an
    echo's mid) as Message.provider_sid: the id when it fits, else a stable
    digest of it, so the same id always finds the same row."""
    return mid if len(mid) <= SID_MAX else "ig:" + hashlib.sha256(mid.encode()).hexdigest()


def graph_timeout() -> tuple[float, float]:
    """(connect, read) seconds for a Graph request: META_GRAPH_TIMEOUT, else the defaults."""
    connect, read = getattr(settings, "META_GRAPH_TIMEOUT", None) or (CONNECT_TIMEOUT, READ_TIMEOUT)
    return float(connect), float(read)


def backoff_delays(attempts: int, first_delay: float) -> list[float]:
    """The waits between attempts: first_delay, then doubled each time."""
    return [first_delay * 2**n for n in range(max(attempts - 1, 0))]


# Whatever looks like a credential in a URL or message: a query parameter or
# a header value named like one, and Meta's own token shape (EAA…).
_CREDENTIAL_PATTERNS = (
    re.compile(r"(?i)((?:access_token|input_token|appsecret_proof|client_secret)=)[^&\s'\"]+"),
    re.compile(r"(?i)(bearer\s+)[^\s'\",]+"),
    re.compile(r"()\bEAA[A-Za-z0-9]{16,}"),
)


def redact(text: str, token: str = "") -> str:
    """The text with this token (raw or URL-encoded) and anything shaped like
    a credential replaced by "[redacted]": Graph errors end up in the event's
    error, which staff read."""
    for secret in {token, quote(token, safe="")}:
        if secret:
            text = text.replace(secret, "[redacted]")
    for pattern in _CREDENTIAL_PATTERNS:
        text = pattern.sub(r"\1[redacted]", text)
    return text


def graph_error_text(response: requests.Response) -> str:
    try:
        error = response.json().get("error", {})
    except (ValueError, AttributeError):
        return response.text[:200]
    if not isinstance(error, dict):
        return str(error)[:200]
    parts = [str(error.get("message", "")), f"code {error.get('code')}" if "code" in error else ""]
    if "error_subcode" in error:
        parts.append(f"subcode {error['error_subcode']}")
    return ", ".join(p for p in parts if p)[:300]


def lead_fetch(
    leadgen_id: str,
    *,
    access_token: str,
    base_url: str | None = None,
    timeout: tuple[float, float] | None = None,
    attempts: int | None = None,
    retry_delay: float | None = None,
) -> dict[str, Any]:
    """The lead as the Graph API returns it (`field_data`, ad ids…).

    Raises GraphError on a 4xx at once, or after `attempts` transient
    failures. Makes no database writes; safe to call again."""
    base = (base_url or settings.META_GRAPH_URL).rstrip("/")
    connect, read = timeout or graph_timeout()
    attempts = attempts or int(getattr(settings, "META_GRAPH_ATTEMPTS", ATTEMPTS))
    delay = retry_delay if retry_delay is not None else float(getattr(settings, "META_GRAPH_RETRY_DELAY", RETRY_DELAY))
    url = f"{base}/{quote(str(leadgen_id), safe='')}"
    # The token travels in a header, never in the URL: URLs end up in proxy
    # logs, and requests quotes them in its exceptions.
    params = {"fields": LEAD_FIELDS}
    waits = backoff_delays(attempts, delay)
    last = ""
    with requests.Session() as session:
        session.headers["User-Agent"] = USER_AGENT
        session.headers["Authorization"] = f"Bearer {access_token}"
        for attempt in range(attempts):
            if attempt:
                # A short backoff (0.5 s, then 1 s) inside the prepare step,
                # outside any transaction; a longer outage is not waited out
                # here: the event fails and the replay/sweeper retries it.
                time.sleep(waits[attempt - 1])
            try:
                response = session.get(url, params=params, timeout=(float(connect), float(read)))
            except TRANSIENT as exc:
                last = redact(f"{type(exc).__name__}: {exc}", access_token)
                continue
            if response.status_code >= 500:
                last = f"HTTP {response.status_code}: {redact(graph_error_text(response), access_token)}"
                continue
            if response.status_code >= 400:
                detail = redact(graph_error_text(response), access_token)
                raise GraphError(
                    f"Graph API refused lead {leadgen_id}: HTTP {response.status_code}: {detail}",
                    status=response.status_code,
                )
            try:
                lead = response.json()
            except ValueError as exc:
                raise GraphError(f"Graph API answered lead {leadgen_id} with non-JSON: {exc}") from exc
            if not isinstance(lead, dict):
                raise GraphError(f"Graph API answered lead {leadgen_id} with a JSON {type(lead).__name__}")
            return lead
    raise GraphError(f"Graph API unavailable for lead {leadgen_id} after {attempts} attempts: {last}")
