"""Website forms: server to server (`/hooks/forms/<key>/`) and the hosted
form page (`/f/<key>/`). Both take the documented form fields (docs/capture.md), as JSON or
form-encoded; any other field is kept as an answer.

Answers: 200 accepted (and for repeats), 401 bad bearer secret, 404 unknown
source, 413 too large, 400 a body that is not a form at all (stored failed:
our own API, so the sender is told at once), 429 over a rate limit (nothing
stored: the sender may retry later).

Rate limits are counted in the shared cache (agents.capture.ratelimit): the
hosted form per client address, then per phone number, then per source, each
counted only once the one before passed, so one address cannot spend a
source's budget; the server-to-server form per phone number and per source.
"""

from __future__ import annotations

import hmac
import json
import secrets
from email import policy as email_policy
from email.parser import BytesParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_http_methods, require_POST

from agents.capture.base import Capture, ConsentEvidence, json_object, split_name, truthy, utm_from
from agents.capture.challenge import RESPONSE_FIELDS, challenge_for, challenge_passed
from agents.capture.identity import capture_apply
from agents.capture.intake import client_address, rejection_count
from agents.capture.ratelimit import limit_hit
from agents.capture.webhooks import WebhookError, accept, accepted_response, body_digest, raw_body, reject, source_for
from crm.models import InboundEvent, Provider, Source
from crm.phones import phone_to_e164
from crm.services.inbound_handlers import MalformedPayload, handler_register

KNOWN_FIELDS = {
    "first_name",
    "last_name",
    "name",
    "phone",
    "email",
    "postal_code",
    "address",
    "service",
    "message",
    "consent",
    "consent_text",
    "page_url",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "utm_term",
    "utm_content",
    "gclid",
    "gbraid",
    "wbraid",
    "fbclid",
    "nonce",
    "website_url",
    "csrfmiddlewaretoken",
    *RESPONSE_FIELDS,
}
DEFAULT_CONSENT_TEXT = (
    "By ticking this box you agree that {business} may call and text you about your request at the number "
    "you gave, including automated texts. Consent is not a condition of purchase. Reply STOP to opt out."
)
# (scope, submissions, per seconds). A person retries a few times at most; a
# source's cap bounds what a botnet of addresses can make the business pay for.
HOSTED_RATE_LIMIT = (10, 600)  # per client address (the simulator plans within it)
HOSTED_LIMITS = (("address", *HOSTED_RATE_LIMIT), ("phone", 5, 3600), ("source", 300, 3600))
# A business's own server posts for every visitor: no per-address limit.
SERVER_LIMITS = (("phone", 20, 3600), ("source", 2000, 3600))


def form_fields(body: bytes, content_type: str) -> dict[str, str]:
    """The submitted fields as strings, from JSON or form-encoded bytes."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedPayload(f"body is not UTF-8: {exc}") from exc
    if content_type.startswith("multipart/form-data"):
        return _multipart_fields(body, content_type)
    if "json" in content_type:
        data = json_object(body)
        return {
            str(k): v if isinstance(v, str) else json.dumps(v) if isinstance(v, dict | list) else str(v)
            for k, v in data.items()
            if v is not None
        }
    parsed = parse_qs(text, keep_blank_values=True)
    if not parsed and text.strip():
        raise MalformedPayload("neither JSON nor form-encoded")
    return {k: v[-1] for k, v in parsed.items()}


def _multipart_fields(body: bytes, content_type: str) -> dict[str, str]:
    message = BytesParser(policy=email_policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    )
    if not message.is_multipart():
        raise MalformedPayload("multipart body without parts")
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name and not part.get_filename():
            payload = part.get_payload(decode=True)
            raw = payload if isinstance(payload, bytes) else b""
            fields[str(name)] = raw.decode(part.get_content_charset() or "utf-8", errors="replace")
    return fields


def parse_form(
    fields: dict[str, str],
    *,
    occurred_at: Any,
    consent_text_shown: str | None = None,
    ip: str = "",
    user_agent: str = "",
) -> Capture:
    first, last = fields.get("first_name", ""), fields.get("last_name", "")
    if not (first or last) and fields.get("name"):
        first, last = split_name(fields["name"])
    consent_value = fields.get("consent", "")
    consent = None
    if "consent" in fields:
        consent = ConsentEvidence(
            granted=truthy(consent_value),
            # The hosted page knows what it showed; a server-to-server form
            # tells us what its page showed.
            text=consent_text_shown if consent_text_shown is not None else fields.get("consent_text", ""),
            checkbox_value=consent_value,
            page_url=fields.get("page_url", ""),
            ip=ip,
            user_agent=user_agent,
            channels=("sms", "voice"),
        )
    return Capture(
        channel="form",
        occurred_at=occurred_at,
        first_name=first.strip(),
        last_name=last.strip(),
        phones=[fields["phone"]] if fields.get("phone") else [],
        emails=[fields["email"]] if fields.get("email") else [],
        postal_code=fields.get("postal_code", "").strip(),
        address=fields.get("address", "").strip(),
        request_text=fields.get("message", "").strip(),
        service_hint=fields.get("service", "").strip(),
        answers={k: v for k, v in fields.items() if k not in KNOWN_FIELDS},
        touch={
            "utm": utm_from(fields),
            "gclid": fields.get("gclid", ""),
            "gbraid": fields.get("gbraid", ""),
            "wbraid": fields.get("wbraid", ""),
            "fbclid": fields.get("fbclid", ""),
            "landing_page": fields.get("page_url", ""),
        },
        consent=consent,
    )


def _process(event: InboundEvent) -> str:
    body = bytes(event.body)
    fields = form_fields(body, event.headers.get("Content-Type", ""))
    capture = parse_form(
        fields,
        occurred_at=event.received_at,
        consent_text_shown=event.headers.get("X-LeadOps-Consent-Text-Shown"),
        ip=event.headers.get("Remote-Addr", ""),
        user_agent=event.headers.get("User-Agent", ""),
    )
    assert event.business is not None
    capture_apply(business=event.business, capture=capture, source=event.source, event=event)
    return InboundEvent.Status.PROCESSED


handler_register(Provider.WEBSITE, "form", _process)
handler_register(Provider.HOSTED_FORM, "form", _process)


@csrf_exempt
@require_POST
def website_form(request: HttpRequest, source_key: str) -> HttpResponse:
    try:
        source = source_for(source_key, Provider.WEBSITE)
        body = raw_body(request)
        token = request.META.get("HTTP_AUTHORIZATION", "").removeprefix("Bearer ").strip()
        if not source.secret or not hmac.compare_digest(token.encode(), source.secret.encode()):
            raise reject(request, provider=Provider.WEBSITE, source=source, reason="bad or missing bearer secret")
        malformed = ""
        try:
            fields = form_fields(body, request.content_type or "")
        except MalformedPayload as exc:
            malformed, fields = str(exc), {}
        over = _over_limit(request, source, fields.get("phone", ""), SERVER_LIMITS, provider=Provider.WEBSITE)
        if over:
            raise WebhookError(429, "rate_limited", f"too many submissions for this {over}; retry later")
        external_id = request.META.get("HTTP_IDEMPOTENCY_KEY") or fields.get("nonce") or body_digest(body)
        accepted = accept(
            request,
            provider=Provider.WEBSITE,
            external_id=f"{source.key}:{external_id}",
            body=body,
            source=source,
            kind="form",
            malformed=malformed,
        )
    except WebhookError as exc:
        return exc.response()
    if malformed:
        return WebhookError(400, "malformed_payload", malformed).response()
    return accepted_response(accepted)


def _consent_text(source: Any) -> str:
    return str(source.config.get("consent_text") or DEFAULT_CONSENT_TEXT.format(business=source.business.name))


def _over_limit(
    request: HttpRequest, source: Source, phone: str, limits: tuple[tuple[str, int, int], ...], *, provider: str
) -> str:
    """The first limit this submission is over ("" when none), counting each
    scope only after the ones before it passed; a refusal is counted for the
    manager like any refused delivery."""
    values = {
        "address": client_address(request),
        "phone": phone_to_e164(phone, source.business.region) or phone.strip().lower(),
        "source": source.key,
    }
    for scope, limit, window in limits:
        if scope == "phone" and not values["phone"]:
            continue
        # Per source as well, so one busy form never spends another's budget.
        if limit_hit(f"form:{scope}:{source.pk}", values[scope], limit=limit, window=window):
            rejection_count(
                provider=provider, source=source, reason=f"rate limited per {scope}", remote_addr=values["address"]
            )
            return scope
    return ""


def _frame_headers(response: HttpResponse, source: Source) -> HttpResponse:
    """Only the business's own sites may frame its form (clickjacking a
    consent box is consent nobody gave)."""
    origins = source.business.embed_origins
    # The site-wide policy (django-csp, leadops.settings) with this form's
    # own frame-ancestors in place of its 'none'.
    if origins:
        response._csp_replace = {"frame-ancestors": ["'self'", *origins]}  # type: ignore[attr-defined]
        response.xframe_options_exempt = True
    return response


def _embedded_post(request: HttpRequest, source: Source) -> bool:
    """A browser's POST from the form framed on one of the business's sites
    (Origin: our own), or from a page of those sites (Origin: theirs).

    Framed on another site, the form's CSRF cookie is a third-party cookie
    the browser neither stores nor sends, so the CSRF check would refuse
    every embedded visitor. A browser always names the posting document's
    origin and a page cannot forge it, and frame-ancestors lets only the
    business's sites frame ours: that is the protection the cookie gives
    (for an anonymous form, nothing more is at stake)."""
    origins = source.business.embed_origins
    origin = request.META.get("HTTP_ORIGIN", "")
    if request.method != "POST" or not origin or not origins:
        return False
    own = {request.build_absolute_uri("/").rstrip("/"), _origin_of(settings.PUBLIC_BASE_URL)}
    if origin in own or origin in origins:
        return True
    scheme, _, host = origin.partition("://")
    for allowed in origins:
        wanted_scheme, _, wanted_host = allowed.partition("://")
        if wanted_host.startswith("*.") and scheme == wanted_scheme and host.endswith(wanted_host[1:]):
            return True
    return False


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


# CSRF is checked here rather than by the middleware: a post from the
# business's own embedding page is accepted on its Origin instead.
@csrf_exempt
@require_http_methods(["GET", "POST"])
def hosted_form(request: HttpRequest, source_key: str) -> HttpResponse:
    try:
        source = source_for(source_key, Provider.HOSTED_FORM)
    except WebhookError as exc:
        return exc.response()
    view = _hosted_form if _embedded_post(request, source) else csrf_protect(_hosted_form)
    return _frame_headers(view(request, source), source)


def _hosted_form(request: HttpRequest, source: Source) -> HttpResponse:
    """A form a contractor links or embeds. CSRF-protected, with a honeypot,
    rate limits per address, phone and source, and an optional challenge;
    the consent text shown is stored as evidence from the server's own copy,
    never from what the browser sends back."""
    challenge = challenge_for(source.business)
    context: dict[str, Any] = {
        "source": source,
        "business": source.business,
        "consent_text": _consent_text(source),
        "challenge": challenge,
        "challenge_site_key": settings.CAPTCHA_SITE_KEY if challenge else "",
    }
    if request.method == "GET":
        context["nonce"] = secrets.token_urlsafe(16)
        return render(request, "capture/hosted_form.html", context)
    # The raw bytes first: once request.POST has parsed a multipart stream,
    # the body can no longer be read.
    body = request.body
    over = _over_limit(request, source, request.POST.get("phone", ""), HOSTED_LIMITS, provider=Provider.HOSTED_FORM)
    if over:
        return render(
            request,
            "capture/hosted_form.html",
            {**context, "error": "Too many submissions; try again later."},
            status=429,
        )
    if request.POST.get("website_url"):  # the honeypot: people never see it
        return render(request, "capture/hosted_form_thanks.html", context)
    if challenge is not None and not challenge_passed(
        challenge, request.POST.get(challenge.response_field, ""), client_address(request)
    ):
        context.update(
            nonce=request.POST.get("nonce") or secrets.token_urlsafe(16),
            error="Please complete the check that you are a person, then send again.",
            values=request.POST,
        )
        return render(request, "capture/hosted_form.html", context, status=400)
    if not (request.POST.get("phone") or request.POST.get("email")):
        context.update(
            nonce=request.POST.get("nonce") or secrets.token_urlsafe(16),
            error="Please give a phone number or an email.",
            values=request.POST,
        )
        return render(request, "capture/hosted_form.html", context, status=400)
    nonce = request.POST.get("nonce") or body_digest(body)
    accept(
        request,
        provider=Provider.HOSTED_FORM,
        external_id=f"{source.key}:{nonce}",
        body=body,
        source=source,
        kind="form",
        extra_headers={
            "X-LeadOps-Consent-Text-Shown": context["consent_text"],
            "X-LeadOps-Shown-At": timezone.now().isoformat(),
        },
    )
    return render(request, "capture/hosted_form_thanks.html", context)


urlpatterns = [
    path("hooks/forms/<slug:source_key>/", website_form, name="hook-website-form"),
    path("f/<slug:source_key>/", hosted_form, name="hosted-form"),
]
