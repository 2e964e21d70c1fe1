"""Typeform webhooks (`/hooks/typeform/<key>/`): one form response per POST,
signed `Typeform-Signature: sha256=<base64 HMAC-SHA256(secret, raw body)>`.

Typeform disables a webhook at once when it is answered 404 or 410, and
retries any other failure. So once the source is found nothing is answered
404 or 410:

* 200 a stored response, and a repeat of one (deduplicated on
  `form_response.token`, else `event_id`).
* 200 a signed body we cannot read: it is authentic, so it is stored failed
  with the reason (for inspection and replay once the parser is fixed) and the
  JSON answer says so. A 4xx would only make Typeform retry the same bytes.
* 401 a missing or wrong signature (counted): Typeform retries it and keeps
  the hook enabled, so fixing the secret on either side loses nothing. A
  Typeform source needs a secret; without one every delivery is refused.
* 403 an inactive source (counted): retried a few times, the hook stays
  enabled, and nothing is processed for a source switched off here.
* 413 a body over 1 MiB.
* 404 only when no Typeform source has the key at all: the hook points at a
  URL that was never ours (a typo or a deleted source), and disabling it is
  what should happen anyway.

`form_response_partial` deliveries are stored under their own id (so the
complete response with the same token is not taken for a repeat) and ignored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agents.capture.base import Capture, iso_time, json_object, split_name, utm_from
from agents.capture.identity import capture_apply
from agents.capture.intake import rejection_count
from agents.capture.webhooks import WebhookError, accept, accepted_response, body_digest, raw_body, reject, remote_addr
from crm.models import InboundEvent, Provider, Source
from crm.services.inbound_handlers import MalformedPayload, handler_register

RESPONSE = "form_response"
PARTIAL = "form_response_partial"
FULL_NAME_REFS = {"name", "full_name", "fullname", "your_name", "contact_name"}
FIRST_NAME_REFS = {"first_name", "firstname", "first"}
LAST_NAME_REFS = {"last_name", "lastname", "last", "surname"}
EMAIL_REFS = {"email", "email_address", "e_mail"}
PHONE_REFS = {"phone", "phone_number", "mobile", "cell", "telephone"}
POSTAL_REFS = {"zip", "zip_code", "zipcode", "postal_code", "postcode", "post_code"}
ADDRESS_REFS = {"address", "street_address"}
TEXT_REFS = {"message", "details", "description", "comments", "notes", "request", "project"}
NAME_TITLE = re.compile(r"\bname\b")
NOT_A_PERSON = re.compile(r"\b(company|business|organi[sz]ation|project|pet)\b")


def typeform_signature(secret: str, body: bytes) -> str:
    """The `Typeform-Signature` value Typeform sends for these bytes."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).digest()
    return "sha256=" + base64.b64encode(digest).decode("ascii")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return ", ".join(t for t in (_text(v) for v in value) if t)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _value(answer: dict[str, Any]) -> Any:
    """The answer's value: it sits under a key named after its type."""
    kind = answer.get("type")
    value = answer.get(kind) if isinstance(kind, str) else None
    if kind == "choice" and isinstance(value, dict):
        return value.get("label") or value.get("other") or ""
    if kind == "choices" and isinstance(value, dict):
        labels = [label for label in value.get("labels") or [] if label]
        return [*labels, value["other"]] if value.get("other") else labels
    return value


def _object(container: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = container.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedPayload(f"{where}{key} is not an object")
    return value


def _definitions(form: dict[str, Any]) -> dict[str, dict[str, Any]]:
    fields = _object(form, "definition", "form_response.").get("fields") or []
    if not isinstance(fields, list):
        raise MalformedPayload("form_response.definition.fields is not a list")
    known: dict[str, dict[str, Any]] = {}
    for field in fields:
        if isinstance(field, dict):
            for key in (field.get("id"), field.get("ref")):
                if isinstance(key, str) and key:
                    known.setdefault(key, field)
    return known


def parse_response(data: dict[str, Any], *, received_at: datetime) -> Capture:
    """One form response as a Capture. Pure: `received_at` stands in for
    `submitted_at` when that is missing. Answers are read by the question's
    ref (set in the form builder), then by its title."""
    form = data.get("form_response")
    if not isinstance(form, dict):
        raise MalformedPayload("no form_response object")
    given = form.get("answers") or []
    if not isinstance(given, list):
        raise MalformedPayload("form_response.answers is not a list")
    definitions = _definitions(form)
    hidden = _object(form, "hidden", "form_response.")
    by_ref: dict[str, str] = {}
    by_title: list[tuple[str, str]] = []
    phones: list[str] = []
    emails: list[str] = []
    texts: list[str] = []
    service = ""
    answers: dict[str, Any] = {}
    for index, answer in enumerate(given):
        if not isinstance(answer, dict) or not isinstance(answer.get("field"), dict):
            raise MalformedPayload(f"form_response.answers[{index}] has no field")
        field = answer["field"]
        ref = _text(field.get("ref")) or _text(field.get("id")) or f"answer_{index + 1}"
        definition = definitions.get(_text(field.get("id"))) or definitions.get(ref) or {}
        title = _text(definition.get("title"))
        field_type = _text(field.get("type")) or _text(definition.get("type")) or _text(answer.get("type"))
        value = _value(answer)
        answers[ref] = {"title": title, "type": field_type, "value": value}
        text = _text(value)
        if not text:
            continue
        key = ref.lower()
        by_ref.setdefault(key, text)
        by_title.append((title.lower(), text))
        if answer.get("type") == "phone_number" or key in PHONE_REFS:
            phones.append(text)
        elif answer.get("type") == "email" or key in EMAIL_REFS:
            emails.append(text)
        elif not service and "service" in key:
            service = text
        elif key in TEXT_REFS or field_type == "long_text":
            texts.append(text)
    first = next((by_ref[r] for r in FIRST_NAME_REFS if r in by_ref), "")
    last = next((by_ref[r] for r in LAST_NAME_REFS if r in by_ref), "")
    full = next((by_ref[r] for r in FULL_NAME_REFS if r in by_ref), "")
    if not (first or last or full):
        # Questions without readable refs: go by what the person was asked.
        first = next((t for title, t in by_title if "first name" in title), "")
        last = next((t for title, t in by_title if "last name" in title or "surname" in title), "")
        full = next((t for title, t in by_title if NAME_TITLE.search(title) and not NOT_A_PERSON.search(title)), "")
    if not (first or last) and full:
        first, last = split_name(full)
    hidden_values = {str(k): _text(v) for k, v in hidden.items() if _text(v)}
    if hidden_values:
        answers["_hidden"] = hidden_values
    return Capture(
        channel="form",
        occurred_at=iso_time(form.get("submitted_at"), received_at),
        first_name=first,
        last_name=last,
        phones=phones,
        emails=emails,
        postal_code=next((by_ref[r] for r in POSTAL_REFS if r in by_ref), ""),
        address=next((by_ref[r] for r in ADDRESS_REFS if r in by_ref), ""),
        request_text="\n\n".join(texts),
        service_hint=service,
        answers=answers,
        touch={
            "provider": Provider.TYPEFORM.value,
            "form_id": _text(form.get("form_id")) or _text(_object(form, "definition", "").get("id")),
            "utm": utm_from(hidden_values),
            "gclid": hidden_values.get("gclid", ""),
            "fbclid": hidden_values.get("fbclid", ""),
        },
    )


def _process(event: InboundEvent) -> str:
    capture = parse_response(json_object(bytes(event.body)), received_at=event.received_at)
    assert event.business is not None
    capture_apply(business=event.business, capture=capture, source=event.source, event=event)
    return InboundEvent.Status.PROCESSED


def _ignore(event: InboundEvent) -> str:
    # A partial response is followed by the complete one when the person
    # finishes; a lead from each would double the person's need.
    return InboundEvent.Status.IGNORED


handler_register(Provider.TYPEFORM, RESPONSE, _process)
handler_register(Provider.TYPEFORM, PARTIAL, _ignore)


def _delivery_id(data: dict[str, Any], body: bytes) -> tuple[str, str]:
    """(kind, external id) of a delivery, whatever state its body is in."""
    kind = _text(data.get("event_type"))[:64] or RESPONSE
    form = data.get("form_response")
    token = _text(form.get("token")) if isinstance(form, dict) else ""
    external_id = token or _text(data.get("event_id")) or body_digest(body)
    return kind, external_id if kind == RESPONSE else f"{kind}:{external_id}"


def _source(key: str) -> Source:
    # Not `source_for`: an inactive source must not be answered 404, which
    # would disable the hook for good.
    source = Source.objects.select_related("business").filter(key=key, provider=Provider.TYPEFORM).first()
    if source is None:
        raise WebhookError(404, "unknown_source", f"no Typeform source {key!r}")
    return source


@csrf_exempt
@require_POST
def typeform_response(request: HttpRequest, source_key: str) -> HttpResponse:
    try:
        source = _source(source_key)
        body = raw_body(request)
        signature = request.META.get("HTTP_TYPEFORM_SIGNATURE", "")
        if not source.secret or not hmac.compare_digest(
            signature.encode(), typeform_signature(source.secret, body).encode()
        ):
            raise reject(request, provider=Provider.TYPEFORM, source=source, reason="bad or missing Typeform-Signature")
        if not source.is_active:
            rejection_count(
                provider=Provider.TYPEFORM,
                source=source,
                reason="source is inactive",
                remote_addr=remote_addr(request) or None,
            )
            raise WebhookError(403, "source_inactive", f"source {source.key!r} is switched off")
        malformed, data = "", {}
        try:
            data = json_object(body)
            parse_response(data, received_at=timezone.now())
        except MalformedPayload as exc:
            malformed = str(exc)
        kind, external_id = _delivery_id(data, body)
        accepted = accept(
            request,
            provider=Provider.TYPEFORM,
            external_id=external_id,
            body=body,
            source=source,
            kind=kind,
            malformed=malformed,
        )
    except WebhookError as exc:
        return exc.response()
    if malformed and not accepted.duplicate:
        return JsonResponse(
            {
                "id": accepted.event.public_id,
                "status": accepted.event.status,
                "duplicate": accepted.duplicate,
                "detail": f"stored as failed, not processed: {malformed}",
            }
        )
    return accepted_response(accepted)


urlpatterns = [
    path("hooks/typeform/<slug:source_key>/", typeform_response, name="hook-typeform"),
]
