"""Meta: the Conversions API for CRM ("conversion leads"), straight over the
Graph API at META_GRAPH_URL: `POST {graph}/{dataset_id}/events`, the token in
the Authorization header (never in a URL).

Each event names the lead by Meta's own lead id (the leadgen id its Lead Ads
webhook gave us), the stage as the business file maps it (`event_name`), when
it happened (`event_time`), `action_source=system_generated` and
`custom_data: {event_source: crm, lead_event_source: LeadOps}`; won and paid
add their value and currency. `event_id` is the upload's key, so a repeated
try is one event to Meta.

Meta takes an event up to seven days after it happened: an older one is
`skipped` with the reason, never sent. Meta has no restatement of a value
sent: a refund's restatement is skipped, saying so. A 5xx, a timeout or an
error Meta marks transient (or a rate limit) is `retry`; any other 4xx is
`failed` with Meta's message.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import requests
from django.conf import settings

from agents.conversions.base import Answer, Built, Skip
from agents.meta_graph import TRANSIENT, USER_AGENT, graph_error_text, graph_timeout, redact
from crm.models import ConversionKind, ConversionUpload
from crm.services.conversions import account_secrets, lead_net_collected, lead_won_value

K = ConversionKind
MAX_AGE = timedelta(days=7)
LEAD_EVENT_SOURCE = "LeadOps"
# Meta's codes for a passing condition: unknown/temporary, throttling.
TRANSIENT_CODES = frozenset({1, 2, 4, 17, 32, 341, 613, 80004})


def meta_build(upload: ConversionUpload, *, now: datetime) -> Built:
    if upload.kind == K.RESTATEMENT:
        raise Skip("Meta's Conversions API takes no restatement of a value sent: the paid event keeps its value")
    age = now - upload.occurred_at
    if age > MAX_AGE:
        raise Skip(
            f"Meta takes events up to {MAX_AGE.days} days old; this one happened {age.days} days ago "
            f"({upload.occurred_at:%Y-%m-%d %H:%M} UTC)"
        )
    touch = upload.touch
    lead_id = touch.meta_lead_id if touch is not None else ""
    if not lead_id:
        raise Skip("the lead has no Meta lead id (it did not come from a Meta lead form)")
    custom: dict[str, Any] = {"event_source": "crm", "lead_event_source": LEAD_EVENT_SOURCE}
    value: Decimal | None = None
    currency = ""
    if upload.kind == K.WON:
        won = lead_won_value(upload.lead)
        if won is not None:
            value, currency = won
    elif upload.kind == K.PAID:
        currency = upload.business.currency
        value = lead_net_collected(upload.lead, currency)
    if value is not None:
        custom.update(value=float(value), currency=currency)
    event = {
        "event_name": upload.action,
        # Meta discards a stage dated before the lead itself.
        "event_time": int(max(upload.occurred_at, touch.received_at if touch else upload.occurred_at).timestamp()),
        "action_source": "system_generated",
        "event_id": upload.key.split(":", 1)[1],
        "user_data": {"lead_id": int(lead_id) if lead_id.isdigit() else lead_id},
        "custom_data": custom,
    }
    dataset = str(upload.account.config.get("dataset_id") or "")
    payload = {"endpoint": f"/{dataset}/events", "body": {"data": [event]}}
    return Built(payload=payload, request=payload, value=value, currency=currency)


def meta_send(upload: ConversionUpload, built: Built) -> Answer:
    token = account_secrets(upload.account)["access_token"]
    if not token:
        return Answer("retry", "credentials", "missing access_token: set it in the business file or the environment")
    url = settings.META_GRAPH_URL.rstrip("/") + "/" + quote(built.payload["endpoint"].strip("/"), safe="/")
    started = time.monotonic()
    try:
        response = requests.post(
            url,
            json=built.payload["body"],
            headers={"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT},
            timeout=graph_timeout(),
        )
    except TRANSIENT as exc:
        return Answer("retry", type(exc).__name__, redact(str(exc), token)[:500], {}, _ms(started))
    try:
        body = response.json()
    except ValueError:
        body = {"text": response.text[:500]}
    body = body if isinstance(body, dict) else {"answer": body}
    if response.status_code < 300:
        return Answer("sent", "", "", body, _ms(started))
    found = body.get("error")
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    code = error.get("code")
    message = f"HTTP {response.status_code}: {redact(graph_error_text(response), token)}"
    transient = response.status_code >= 500 or bool(error.get("is_transient")) or code in TRANSIENT_CODES
    label = f"meta.{code}" + (f".{error['error_subcode']}" if "error_subcode" in error else "") if code else "http"
    return Answer("retry" if transient else "failed", label, message[:500], body, _ms(started))


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
