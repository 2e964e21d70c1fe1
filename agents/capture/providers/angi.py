"""Angi (formerly HomeAdvisor) lead pushes: `POST /hooks/angi/<key>/<secret>/`,
one lead per JSON body, as Angi's lead feed sends it to a CRM.

Angi signs nothing, so the URL itself is the credential: it carries the
source's `secret` (the business file's `secret:`), compared in constant time.
Rotating it is changing `secret` in the business file, loading it, and giving
Angi the new URL; the old URL stops working at once.

Answers (JSON, which Angi's feed expects):

* 200 a stored lead, and a repeat of one (deduplicated on Angi's `leadOid`,
  else the service request's `srOid`).
* 404 `unknown_source` both for a key no Angi source has and for a wrong
  secret, with the same body, so the URL cannot be probed for a valid key; a
  wrong secret is counted against its source for the manager.
* 403 a source switched off (said only once the secret matched).
* 429 over the source's rate limit (`rate_limit_per_hour`, default
  RATE_LIMIT_PER_HOUR): nothing stored, counted; a leaked URL cannot flood the
  business with fake leads that each cost a text and a person's time.
* 400 a body that is not a readable lead: stored failed with the reason, for
  inspection and replay once the parser is fixed.
* 413 a body over 1 MiB.

Consent: an Angi lead is a homeowner asking pros to contact them, but the
push carries no record of what they agreed to about texts (no wording, no
checkbox, no time), and that is what the ledger needs as evidence. So none is
recorded unless the source says what Angi showed (`sms_consent_text:` in the
business file, copied from the contractor's Angi agreement): then each lead
grants SMS consent with that text as its evidence. Without it, the lead is
called (the call back is its next action) and texted only once the person
answers or writes.
"""

from __future__ import annotations

import hmac
import logging
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.capture.base import Capture, ConsentEvidence, iso_time, json_object, split_name
from agents.capture.identity import capture_apply
from agents.capture.intake import rejection_count
from agents.capture.ratelimit import limit_hit
from agents.capture.source_cache import SOURCES
from agents.capture.webhooks import WebhookError, accept, accepted_response, body_digest, raw_body, remote_addr
from crm.models import InboundEvent, Provider, Source
from crm.services.inbound_handlers import MalformedPayload, handler_register

log = logging.getLogger(__name__)

KIND = "lead"
# Leads a source may receive per hour unless its `rate_limit_per_hour` says
# otherwise: a busy contractor gets a few an hour; a leaked URL gets no more.
RATE_LIMIT_PER_HOUR = 60
RATE_WINDOW_SECONDS = 3600
# Angi sells in the United States only.
FEE_CURRENCY = "USD"
STREET_KEYS = ("addressFirstLine", "addressSecondLine", "address1", "address2", "street", "line1", "line2")
STATE_KEYS = ("stateProvince", "state", "stateCode")
POSTAL_KEYS = ("postalCode", "zip", "zipCode")
TIME_KEYS = ("createDate", "createdDate", "leadCreatedDate", "dateCreated")


def _text(value: Any) -> str:
    if value is None or isinstance(value, dict | list):
        return ""
    return str(value).strip()


def _first(data: dict[str, Any], keys: tuple[str, ...]) -> str:
    return next((t for t in (_text(data.get(k)) for k in keys) if t), "")


def _address(data: dict[str, Any]) -> tuple[str, str]:
    """(the address as one line, the postal code), from a nested `address`
    object or a plain string, completed by the top-level city, state and ZIP."""
    given = data.get("address")
    if given is not None and not isinstance(given, dict | str):
        raise MalformedPayload("address is neither an object nor text")
    nested = given if isinstance(given, dict) else {}
    street = [_text(nested.get(k)) for k in STREET_KEYS] if nested else [_text(given)]
    city = _text(data.get("city")) or _text(nested.get("city"))
    state = _first(data, STATE_KEYS) or _first(nested, STATE_KEYS)
    postal = _first(data, POSTAL_KEYS) or _first(nested, POSTAL_KEYS)
    line = ", ".join(part for part in (*street, city, f"{state} {postal}".strip()) if part)
    return line[:300], postal[:16]


def _interview(data: dict[str, Any]) -> list[dict[str, str]]:
    given = data.get("interview")
    if given is None:
        return []
    if not isinstance(given, list):
        raise MalformedPayload("interview is not a list")
    asked = []
    for index, item in enumerate(given):
        if not isinstance(item, dict):
            raise MalformedPayload(f"interview[{index}] is not an object")
        answer = item.get("answer")
        if isinstance(answer, list):
            answer = ", ".join(_text(a) for a in answer if _text(a))
        asked.append({"question": _text(item.get("question")), "answer": _text(answer)})
    return asked


def _fee(value: Any) -> dict[str, str]:
    """What the contractor paid Angi for the lead, as exact money."""
    if value is None or value == "" or isinstance(value, bool):
        return {}
    try:
        amount = Decimal(str(value).replace("$", "").replace(",", "").strip()).quantize(Decimal("0.01"))
    except InvalidOperation:
        return {"raw": str(value)[:50]}
    return {"amount": str(amount), "currency": FEE_CURRENCY}


def lead_id(data: dict[str, Any]) -> str:
    """Angi's id of the lead ("" when it has none): `leadOid`, else the
    service request's `srOid` (one request is sold to several pros, each a
    lead of its own, but a source sees each request once)."""
    lead = _text(data.get("leadOid"))
    if lead:
        return lead
    request = _text(data.get("srOid"))
    return f"sr:{request}" if request else ""


def lead_capture(data: dict[str, Any], *, received_at: datetime, sms_consent_text: str = "") -> Capture:
    """One Angi lead as a Capture. Pure. The category (`taskName`) is the
    touch's campaign: it is what the contractor buys leads by."""
    first, last = _text(data.get("firstName")), _text(data.get("lastName"))
    if not (first or last):
        first, last = split_name(_text(data.get("name")))
    address, postal = _address(data)
    task = _text(data.get("taskName")) or _text(data.get("categoryName")) or _text(data.get("category"))
    phones = [p for p in (_text(data.get("primaryPhone")), _text(data.get("secondaryPhone"))) if p]
    email = _text(data.get("email"))
    angi = {
        "lead_id": _text(data.get("leadOid")),
        "service_request_id": _text(data.get("srOid")),
        "lead_type": _text(data.get("leadType")),
        "match_type": _text(data.get("matchType")),
        "lead_description": _text(data.get("leadDescription")),
        "task_id": _text(data.get("taskOid")),
        "fee": _fee(data.get("fee")),
        "company": _text(data.get("spCompanyName")),
    }
    consent = None
    if sms_consent_text and phones:
        consent = ConsentEvidence(granted=True, text=sms_consent_text, checkbox_value="angi lead", channels=("sms",))
    return Capture(
        channel="form",
        occurred_at=next(
            (iso_time(data[k], received_at) for k in TIME_KEYS if isinstance(data.get(k), str)), received_at
        ),
        first_name=first,
        last_name=last,
        phones=phones,
        emails=[email] if email else [],
        postal_code=postal,
        address=address,
        request_text=_text(data.get("comments")),
        service_hint=task,
        answers={"interview": _interview(data), "angi": {k: v for k, v in angi.items() if v}},
        touch={"provider": Provider.ANGI, "campaign_id": task},
        consent=consent,
    )


def _sms_consent_text(source: Source | None) -> str:
    config = (source.config if source is not None else None) or {}
    return str(config.get("sms_consent_text") or "").strip()


def _process(event: InboundEvent) -> str:
    capture = lead_capture(
        json_object(bytes(event.body)),
        received_at=event.received_at,
        sms_consent_text=_sms_consent_text(event.source),
    )
    assert event.business is not None
    capture_apply(business=event.business, capture=capture, source=event.source, event=event)
    return InboundEvent.Status.PROCESSED


handler_register(Provider.ANGI, KIND, _process)


def _source(key: str) -> Source | None:
    # The key is unique: no ORDER BY (the model's orders by business name).
    found = SOURCES.get(key, lambda: Source.objects.filter(key=key).select_related("business").order_by().first())
    return found if found is not None and found.provider == Provider.ANGI else None


def _authenticated(request: HttpRequest, key: str, given: str) -> Source:
    """The source whose secret the URL carries; anything else is answered
    exactly as an unknown key is."""
    source = _source(key)
    expected = source.secret if source is not None else ""
    # Compared even without a source, so both refusals take the same time.
    matches = hmac.compare_digest(given.encode(), (expected or "\0").encode())
    if source is None or not expected or not matches:
        rejection_count(
            provider=Provider.ANGI,
            source=source,
            reason="no Angi source has this key" if source is None else "wrong secret in the URL",
            remote_addr=remote_addr(request) or None,
        )
        raise WebhookError(404, "unknown_source", f"no source {key!r}")
    if not source.is_active:
        rejection_count(
            provider=Provider.ANGI, source=source, reason="source is inactive", remote_addr=remote_addr(request) or None
        )
        raise WebhookError(403, "source_inactive", f"source {key!r} is switched off")
    return source


def _hourly_limit(source: Source) -> int:
    value = (source.config or {}).get("rate_limit_per_hour")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else RATE_LIMIT_PER_HOUR


def _unlogged(response: HttpResponse, source_key: str) -> HttpResponse:
    """Django logs every 4xx with its path, and this path holds the secret:
    logged here with the key only, and marked as logged."""
    if response.status_code >= 400:
        log.warning("Angi hook %s/<secret>/ answered %s", source_key, response.status_code)
        response._has_been_logged = True  # type: ignore[attr-defined]  # Django's own flag (django.utils.log)
    return response


@csrf_exempt
@require_POST
def angi_lead(request: HttpRequest, source_key: str, path_secret: str) -> HttpResponse:
    try:
        source = _authenticated(request, source_key, path_secret)
        body = raw_body(request)
        if limit_hit(f"angi:{source.pk}", source.key, limit=_hourly_limit(source), window=RATE_WINDOW_SECONDS):
            rejection_count(
                provider=Provider.ANGI, source=source, reason="rate limited", remote_addr=remote_addr(request) or None
            )
            raise WebhookError(
                429, "rate_limited", f"more than {_hourly_limit(source)} leads this hour for this source; retry later"
            )
        malformed, data = "", {}
        try:
            data = json_object(body)
            lead_capture(data, received_at=timezone.now())
        except MalformedPayload as exc:
            malformed = str(exc)
        accepted = accept(
            request,
            provider=Provider.ANGI,
            external_id=lead_id(data) or body_digest(body),
            body=body,
            source=source,
            kind=KIND,
            malformed=malformed,
        )
    except WebhookError as exc:
        return _unlogged(exc.response(), source_key)
    if malformed:
        response: HttpResponse = JsonResponse(
            {
                "error": "malformed_payload",
                "detail": f"stored as failed, not processed: {malformed}",
                "id": accepted.event.public_id,
            },
            status=400,
        )
        return _unlogged(response, source_key)
    return accepted_response(accepted)


urlpatterns = [
    path("hooks/angi/<slug:source_key>/<str:path_secret>/", angi_lead, name="hook-angi"),
]
