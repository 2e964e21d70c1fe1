"""Google Ads lead form webhooks (`/hooks/google-ads/<key>/`): one lead per
POST, authenticated by the `google_key` Google echoes inside the JSON body.

Answers:

* 200 a stored lead, and a repeat of one (deduplicated on `lead_id`, which
  Google says is unique across forms and meant for deduplication).
* 400 `rejected`: the body is not a JSON object. The key travels inside the
  body, so an unreadable body cannot be authenticated: it is counted as a
  refused delivery and not stored.
* 400 `malformed_payload`: the key matches but the lead cannot be read (no
  `lead_id`, `user_column_data` not a list…). Google's guidance is a 4xx for a
  bad request; the event is stored failed with the reason, for inspection and
  replay once the parser knows the new shape, and "SEND TEST DATA" in the
  Google Ads UI shows the advertiser the error at once.
* 401 a missing or wrong `google_key` (counted); 404 an unknown or inactive
  source; 413 a body over 1 MiB.

Leads sent with "SEND TEST DATA" (`is_test: true`) are stored and processed
but flagged `test_lead` and kept out of operations. Google keeps adding fields,
so unknown fields are ignored and unknown questions kept as answers.
"""

from __future__ import annotations

import hmac
import json
from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.capture.base import Capture, iso_time, json_object, split_name, truthy
from agents.capture.identity import capture_apply
from agents.capture.webhooks import WebhookError, accept, accepted_response, body_digest, raw_body, reject, source_for
from crm.models import InboundEvent, Provider
from crm.services.inbound_handlers import MalformedPayload, handler_register

KIND = "lead"
PHONE_COLUMNS = {"PHONE_NUMBER", "WORK_PHONE"}
EMAIL_COLUMNS = {"EMAIL", "WORK_EMAIL"}
POSTAL_COLUMNS = {"POSTAL_CODE", "ZIP_CODE"}
ADDRESS_COLUMNS = ("STREET_ADDRESS", "CITY", "REGION")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, sort_keys=True)


def _id(data: dict[str, Any], key: str) -> str:
    # int64 ids arrive as JSON numbers, or as strings from proto3 JSON encoders.
    value = data.get(key)
    if value is None or isinstance(value, bool):
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str | int):
        return str(value).strip()
    raise MalformedPayload(f"{key} is not an id: {value!r}")


def lead_columns(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(column_id, column_name, answer) for every entry of `user_column_data`."""
    columns = data.get("user_column_data")
    if columns is None:
        return []
    if not isinstance(columns, list):
        raise MalformedPayload("user_column_data is not a list")
    read = []
    for index, column in enumerate(columns):
        if not isinstance(column, dict):
            raise MalformedPayload(f"user_column_data[{index}] is not an object")
        name = _text(column.get("column_name"))
        # column_id is documented as always present; a nameless, id-less
        # answer is still kept under its position.
        column_id = _text(column.get("column_id")) or name or f"column_{index + 1}"
        read.append((column_id, name, _text(column.get("string_value"))))
    return read


def parse_lead(data: dict[str, Any], *, received_at: datetime) -> Capture:
    """One lead as a Capture. Pure: `received_at` stands in for the submit
    time when Google does not send `lead_submit_time`."""
    lead_id = data.get("lead_id")
    if not isinstance(lead_id, str | int) or isinstance(lead_id, bool) or not str(lead_id).strip():
        raise MalformedPayload("no lead_id")
    first = last = full = postal = service = ""
    phones: list[str] = []
    emails: list[str] = []
    address: dict[str, str] = {}
    answers: dict[str, dict[str, str]] = {}
    for column_id, name, value in lead_columns(data):
        key, n = column_id, 1
        while key in answers:  # a repeated id must not hide an answer
            n += 1
            key = f"{column_id}#{n}"
        answers[key] = {"column_name": name, "value": value}
        if not value:
            continue
        upper = column_id.upper()
        if upper == "FULL_NAME":
            full = full or value
        elif upper == "FIRST_NAME":
            first = first or value
        elif upper == "LAST_NAME":
            last = last or value
        elif upper in PHONE_COLUMNS:
            phones.append(value)
        elif upper in EMAIL_COLUMNS:
            emails.append(value)
        elif upper in POSTAL_COLUMNS:
            postal = postal or value
        elif upper in ADDRESS_COLUMNS:
            address.setdefault(upper, value)
        elif not service and ("SERVICE" in upper or "service" in name.lower()):
            service = value
    if not (first or last) and full:
        first, last = split_name(full)
    return Capture(
        channel="form",
        occurred_at=iso_time(data.get("lead_submit_time"), received_at),
        first_name=first,
        last_name=last,
        phones=phones,
        emails=emails,
        postal_code=postal,
        address=", ".join(address[c] for c in ADDRESS_COLUMNS if c in address),
        service_hint=service,
        answers=answers,
        touch={
            "provider": Provider.GOOGLE_ADS.value,
            "campaign_id": _id(data, "campaign_id"),
            "adgroup_id": _id(data, "adgroup_id"),
            "ad_id": _id(data, "creative_id"),
            "form_id": _id(data, "form_id"),
            "gclid": _text(data.get("gcl_id")),
        },
        is_test=truthy(data.get("is_test", False)),
    )


def _process(event: InboundEvent) -> str:
    capture = parse_lead(json_object(bytes(event.body)), received_at=event.received_at)
    assert event.business is not None
    capture_apply(business=event.business, capture=capture, source=event.source, event=event)
    return InboundEvent.Status.PROCESSED


handler_register(Provider.GOOGLE_ADS, KIND, _process)


def _external_id(source_key: str, data: dict[str, Any], body: bytes) -> str:
    # Scoped by source: Google's "SEND TEST DATA" always sends the same
    # lead_id, and each form's test must be stored, not taken for a repeat
    # of another business's test. Real lead_ids are unique anyway.
    lead_id = data.get("lead_id")
    if isinstance(lead_id, str | int) and not isinstance(lead_id, bool) and str(lead_id).strip():
        return f"{source_key}:{str(lead_id).strip()}"
    return f"{source_key}:{body_digest(body)}"


@csrf_exempt
@require_POST
def google_ads_lead(request: HttpRequest, source_key: str) -> HttpResponse:
    try:
        source = source_for(source_key, Provider.GOOGLE_ADS)
        body = raw_body(request)
        try:
            data = json_object(body)
        except MalformedPayload as exc:
            raise reject(
                request, provider=Provider.GOOGLE_ADS, source=source, reason=f"unauthenticated: {exc}", status=400
            ) from exc
        key = data.get("google_key")
        if (
            not source.secret
            or not isinstance(key, str)
            or not hmac.compare_digest(key.encode(), source.secret.encode())
        ):
            raise reject(request, provider=Provider.GOOGLE_ADS, source=source, reason="bad or missing google_key")
        malformed = ""
        try:
            parse_lead(data, received_at=timezone.now())
        except MalformedPayload as exc:
            malformed = str(exc)
        accepted = accept(
            request,
            provider=Provider.GOOGLE_ADS,
            external_id=_external_id(source.key, data, body),
            body=body,
            source=source,
            kind=KIND,
            is_test=truthy(data.get("is_test", False)),
            malformed=malformed,
        )
    except WebhookError as exc:
        return exc.response()
    if malformed:
        return WebhookError(400, "malformed_payload", malformed).response()
    return accepted_response(accepted)


urlpatterns = [
    path("hooks/google-ads/<slug:source_key>/", google_ads_lead, name="hook-google-ads"),
]
