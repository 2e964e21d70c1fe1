"""Realistic, correctly signed webhook traffic for a running server: the logic
behind `manage.py simulate`, the webhook benchmark and their tests.

- `context_load` reads one business's sources and the provider secrets the
  server uses (the simulator runs with the server's settings).
- `plan_build` invents people and turns them into deliveries, one builder per
  provider (`BUILDERS`; `only=` selects some). A person may reach the business
  on two or three channels minutes apart (same phone, the email's case
  differs), reply by SMS, or call and hang up; some deliveries are repeated
  byte for byte; a few bodies are signed but malformed, a few badly signed.
  The same seed gives the same people, ids and bytes (only payload timestamps
  follow the clock), so a second run with a seed is answered as duplicates.
- `plan_run` posts the plan over real HTTP, phase by phase (a call before its
  status, a form before the reply), each phase on a small thread pool.
- `GraphServer` stands in for Meta's Graph API on 127.0.0.1 and serves the
  leads the Meta notifications announce.
- `summary_lines` reports posts by source and status, what was meant to fail,
  and every unexpected status.
- Every delivery is signed by the provider module's own signer (the one its
  verifier checks against), and Twilio's by twilio's RequestValidator.

Phone numbers are valid fictional US numbers: real area codes with 555-01xx
subscriber numbers (100 per area code, so area codes vary to reach N people).
"""

from __future__ import annotations

import json
import random
import string
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import requests
from django.conf import settings
from django.utils import timezone
from twilio.request_validator import RequestValidator

from agents.capture.providers.meta import meta_signature
from agents.capture.providers.typeform import typeform_signature
from agents.capture.providers.website import DEFAULT_CONSENT_TEXT, HOSTED_RATE_LIMIT
from agents.outbound.twilio_accounts import business_account
from devtools.simulator.base import (  # noqa: F401 - re-exported: the simulator's vocabulary, for its callers
    AREA_CODES,
    BAD_SIGNATURE,
    CALL_STATUS,
    DUPLICATE,
    HONEYPOT,
    HOSTED_RATE_LIMITED,
    LEAD,
    MALFORMED,
    OK,
    REFUSED,
    REPLY,
    STORES_FAILED,
    STORES_NEW,
    STORES_NONE,
    STORES_SAME,
    UNREADABLE,
    Builder,
    Ids,
    Job,
    Person,
    Plan,
    Post,
    PostNotReady,
    SimContext,
    SourceInfo,
    compact,
    counts_text,
    iso,
)
from devtools.simulator.bookings import booking_jobs, signing_key
from devtools.simulator.calls import AngiBuilder, CallRailBuilder
from devtools.simulator.estimates import WAIT_SECONDS, estimate_jobs, summary
from devtools.simulator.marketplaces import ThumbtackBuilder, YelpBuilder
from devtools.simulator.payments import payment_jobs

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
GRAPH_DEFAULT_PORT = 8765
DEFAULT_TIMEOUT = (5.0, 30.0)  # connect, read (seconds)


# --- what the simulator knows about the business -----------------------------


class SimulationError(Exception):
    """Something the operator must fix before simulating (unknown business…)."""


def context_load(
    business_slug: str | None = None, *, public_base_url: str | None = None, api_token: str = ""
) -> SimContext:
    """Read the business's active sources and the settings the server uses."""
    from crm.models import Business, Source, TeamMember

    if business_slug:
        business = Business.objects.filter(slug=business_slug).first()
        if business is None:
            slugs = ", ".join(Business.objects.order_by("slug").values_list("slug", flat=True)) or "none"
            raise SimulationError(f"no business {business_slug!r} (there are: {slugs})")
    else:
        businesses = list(Business.objects.order_by("slug")[:2])
        if len(businesses) != 1:
            slugs = ", ".join(Business.objects.order_by("slug").values_list("slug", flat=True)) or "none"
            raise SimulationError(f"name the business with --business (there are: {slugs})")
        business = businesses[0]
    sources: dict[str, list[SourceInfo]] = defaultdict(list)
    reserved: set[str] = set()
    for source in Source.objects.filter(business=business, is_active=True).order_by("key"):
        # The config as the business file writes it: the page token is one of its keys there.
        config = {**source.config, "access_token": source.page_token} if source.page_token else dict(source.config)
        sources[source.provider].append(SourceInfo(source.key, source.provider, source.secret, config))
        reserved.update(str(source.config.get(k, "")) for k in ("phone_number", "forward_to"))
    reserved.update(TeamMember.objects.filter(business=business).values_list("phone", flat=True))
    twilio = business_account(business.pk)  # the business's own account signs its hooks, if it has one
    return SimContext(
        business_slug=business.slug,
        business_name=business.name,
        region=business.region or "US",
        sources=dict(sources),
        meta_app_secret=settings.META_APP_SECRET,
        twilio_auth_token=twilio.auth_token,
        twilio_account_sid=twilio.sid,
        stripe_webhook_secret=settings.STRIPE_WEBHOOK_SECRET,
        public_base_url=(public_base_url or settings.PUBLIC_BASE_URL).rstrip("/"),
        reserved_phones=frozenset(p for p in reserved if p),
        api_token=api_token,
    )


# --- people -----------------------------------------------------------------

# Real area codes (city, state and a ZIP there, for Twilio's geo parameters);
# the first six are the Chicago area, where the demo business works.
LOCAL_AREA_CODES = 6
FIRST_NAMES = (
    "Rosa",
    "James",
    "Aisha",
    "Mateo",
    "Grace",
    "Wei",
    "Olivia",
    "Darnell",
    "Priya",
    "Liam",
    "Sofia",
    "Kwame",
    "Hannah",
    "Diego",
    "Mei",
    "Noah",
    "Fatima",
    "Connor",
    "Yuki",
    "Elena",
    "Marcus",
    "Ingrid",
    "Tariq",
    "Chloe",
    "Andrés",
    "Zoe",
    "Dmitri",
    "Amara",
    "Luca",
    "Nadia",
    "Owen",
    "Ximena",
    "Samuel",
    "Leila",
    "Henry",
    "Renée",
)
LAST_NAMES = (
    "Diaz",
    "Okafor",
    "Nguyen",
    "Kowalski",
    "Patel",
    "O'Brien",
    "García",
    "Johnson",
    "Schmidt",
    "Rossi",
    "Kim",
    "Washington",
    "Haddad",
    "Fischer",
    "Lopez",
    "Chen",
    "Murphy",
    "Novak",
    "Adeyemi",
    "Svensson",
    "Brooks",
    "Tanaka",
    "Moreno",
    "Walsh",
    "Ivanova",
    "Baker",
    "Santos",
    "Cohen",
    "Mensah",
    "Reyes",
    "Lindqvist",
    "Park",
)
LOCAL_POSTAL_CODES = (
    "60601",
    "60602",
    "60605",
    "60607",
    "60610",
    "60613",
    "60614",
    "60618",
    "60622",
    "60625",
    "60630",
    "60640",
    "60647",
    "60657",
    "60660",
    "60201",
    "60302",
    "60714",
)
AWAY_POSTAL_CODES = ("46320", "53140", "61801", "10001")
REQUESTS = (
    ("Heating", "Furnace is blowing cold air since last night"),
    ("Cooling", "The air conditioner runs but upstairs stays at 82"),
    ("Heating", "Heat pump is making a grinding noise"),
    ("Heating", "Boiler needs its yearly tune-up before winter"),
    ("HVAC", "Want a smart thermostat installed, old one removed"),
    ("HVAC", "Ductwork in the attic came apart, need a quote"),
    ("Plumbing", "Water heater is leaking in the basement"),
    ("Plumbing", "Kitchen drain is clogged and backing up"),
    ("Plumbing", "Sump pump failed during the storm"),
    ("Plumbing", "Toilet keeps running and the pipe under it drips"),
    ("Cooling", "Quote to replace a 20 year old air conditioner"),
    ("Plumbing", "Small leak under the bathroom sink"),
)
SMS_REPLIES = (
    "Yes, tomorrow morning works for me",
    "Can someone come Thursday after 3?",
    "Thanks! What does a diagnostic visit cost?",
    "Saturday would be best if you have anything",
    "Sounds good, call me at lunch",
    "Running late today, can we do 4:30 instead?",
)
DM_TEXTS = (
    "Hola! ¿Hacen mantenimiento de calefacción? La caldera hace ruido 😅",
    "Hi! Do you service heat pumps in Evanston? Señor José recommended you",
    "How much is an AC tune-up? Ça coûte combien à peu près?",
    "Our water heater is leaking 😬 can someone come today?",
    "Do you do ductwork? Saw your reel about attic insulation 👍",
)
DM_FOLLOW_UPS = ("Also, are you free this week?", "Thanks! Mornings are best 🙏", "¿Y cuánto cuesta la visita?")
# Google's "SEND TEST DATA" lead.
GOOGLE_TEST_PERSON = ("FirstName", "LastName", "+16505550123", "test@example.com", "94043")


def phone_styles(e164: str) -> list[str]:
    """How people type the same US number: "(212) 555-0147", "212.555.0147"…"""
    digits = e164.removeprefix("+1")
    a, b, c = digits[:3], digits[3:6], digits[6:]
    return [f"({a}) {b}-{c}", f"{a}.{b}.{c}", f"+1 {a} {b} {c}", digits, f"{a}-{b}-{c}", e164]


def email_styles(email: str) -> list[str]:
    """The same address as people type it on different forms."""
    local, domain = email.split("@", 1)
    titled = ".".join(part[:1].upper() + part[1:] for part in local.split("."))
    return [email, f"{titled}@{domain}", f"{titled}@{domain.capitalize()}", email.upper()]


def _ascii(text: str) -> str:
    table = str.maketrans("áéíóúñçüöåäé'", "aeiouncuoaae ")
    return "".join(ch for ch in text.lower().translate(table) if ch in string.ascii_lowercase + " ").replace(" ", "")


def people_make(rng: random.Random, count: int, reserved: Iterable[str] = ()) -> list[Person]:
    """`count` distinct people with distinct valid fictional numbers; most
    with a local (Chicago-area) number, the rest from across the US."""
    taken = set(reserved)
    local = [(a, s) for a in AREA_CODES[:LOCAL_AREA_CODES] for s in range(100, 200) if f"+1{a[0]}5550{s}" not in taken]
    away = [(a, s) for a in AREA_CODES[LOCAL_AREA_CODES:] for s in range(100, 200) if f"+1{a[0]}5550{s}" not in taken]
    if count > len(local) + len(away):
        raise SimulationError(f"at most {len(local) + len(away)} people have distinct fictional 555-01xx numbers")
    rng.shuffle(local)
    rng.shuffle(away)
    people = []
    for number in range(1, count + 1):
        use_local = bool(local) and (rng.random() < 0.7 or not away)
        area, sub = (local if use_local else away).pop()
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        service, request = rng.choice(REQUESTS)
        domain = rng.choice(("example.com", "example.net", "example.org"))
        postal = rng.choice(AWAY_POSTAL_CODES) if rng.random() < 0.1 else rng.choice(LOCAL_POSTAL_CODES)
        people.append(
            Person(
                number=number,
                first_name=first,
                last_name=last,
                phone=f"+1{area[0]}5550{sub}",
                email=f"{_ascii(first)}.{_ascii(last)}{number}@{domain}",
                postal_code=postal,
                service=service,
                request=request,
                area=area,
            )
        )
    return people


# --- deliveries ---------------------------------------------------------------


def _form_fields(b: Builder, person: Person, nth: int) -> dict[str, Any]:
    rng = b.rng
    fields: dict[str, Any] = {}
    if rng.random() < 0.25:
        fields["name"] = person.name
    else:
        fields["first_name"], fields["last_name"] = person.first_name, person.last_name
    fields["phone"] = rng.choice(phone_styles(person.phone)[:4])
    fields["email"] = email_styles(person.email)[nth % 4]
    fields["postal_code"] = person.postal_code
    fields["service"] = person.service
    fields["message"] = person.request
    return fields


class WebsiteBuilder(Builder):
    """`/hooks/forms/<key>/`: a site's own form, server to server (Bearer secret)."""

    name = source_provider = event_provider = "website"

    def _send(
        self, source: SourceInfo, fields: dict[str, Any], as_json: bool, key: str
    ) -> tuple[bytes, dict[str, str]]:
        headers = {"Authorization": f"Bearer {source.secret}", "User-Agent": "AcmeSite/2.3 (WordPress; +forms)"}
        if as_json:
            body, headers["Content-Type"] = json.dumps(fields).encode(), "application/json"
        else:
            flat = {k: ("on" if v is True else v) for k, v in fields.items() if v is not False}
            body, headers["Content-Type"] = urlencode(flat).encode(), "application/x-www-form-urlencoded"
        if key:
            headers["Idempotency-Key"] = key
        return body, headers

    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        source, rng = self.source(), self.rng
        fields = _form_fields(self, person, nth)
        consent = rng.random() < 0.85
        fields["consent"] = consent
        fields["consent_text"] = DEFAULT_CONSENT_TEXT.format(business=self.ctx.business_name)
        fields["page_url"] = f"https://{self.ctx.business_slug}.example/request-a-quote"
        if rng.random() < 0.6:
            campaign = rng.choice(("fall-tuneup", "ac-rebate", "emergency-plumbing"))
            fields.update(utm_source="google", utm_medium="cpc", utm_campaign=campaign, gclid=self.ids.token(40))
        key = f"site-{self.ids.token(20)}" if rng.random() < 0.5 else ""
        body, headers = self._send(source, fields, rng.random() < 0.6, key)
        post = self.post(LEAD, f"/hooks/forms/{source.key}/", body, headers, person=person.number)
        return [Job(phase, [post])]

    def malformed(self, at: datetime, phase: int) -> Job:
        source = self.source()
        body = b'{"first_name": "Casey", "phone": "(312) 555-01'  # cut off mid-send
        headers = {"Authorization": f"Bearer {source.secret}", "Content-Type": "application/json"}
        path = f"/hooks/forms/{source.key}/"
        return Job(phase, [self.post(MALFORMED, path, body, headers, expect=frozenset({400}), stores=STORES_FAILED)])

    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        source = self.source()
        fields = _form_fields(self, stranger, 0)
        body, headers = self._send(source, fields, True, "")
        headers["Authorization"] = "Bearer rotated-out-secret-from-last-year"
        path = f"/hooks/forms/{source.key}/"
        return Job(phase, [self.post(BAD_SIGNATURE, path, body, headers, expect=frozenset({401}), stores=STORES_NONE)])


class HostedFormBuilder(Builder):
    """`/f/<key>/`: our own page — GET it (CSRF cookie, token, nonce), then POST."""

    name = source_provider = event_provider = "hosted_form"

    def _job(self, phase: int, intent: str, form: dict[str, str], **kw: Any) -> Job:
        source = self.source()
        expect = kw.pop("expect", OK) | {HOSTED_RATE_LIMITED}
        post = self.post(intent, f"/f/{source.key}/", b"", {}, form=form, expect=expect, **kw)
        return Job(phase, [post])

    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        fields = _form_fields(self, person, nth)
        form = {k: str(v) for k, v in fields.items() if k not in ("name", "service")}
        if "name" in fields:
            form["first_name"], form["last_name"] = person.first_name, person.last_name
        if self.rng.random() < 0.85:
            form["consent"] = "yes"
        return [self._job(phase, LEAD, form, person=person.number)]

    def duplicate(self, job: Job) -> Job | None:
        # A double click: the same browser posts the same bytes again at once.
        first = job.posts[0]
        job.posts.append(replace(first, intent=DUPLICATE, stores=STORES_SAME, repeat_previous=True, form=None))
        return None

    def malformed(self, at: datetime, phase: int) -> Job:
        # Neither phone nor email: the page asks again (400) and keeps nothing.
        form = {"first_name": "Pat", "message": "Call me about a new furnace"}
        return self._job(phase, MALFORMED, form, expect=frozenset({400}), stores=STORES_NONE)

    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        form = {"first_name": stranger.first_name, "phone": stranger.phone, "message": stranger.request}
        return self._job(phase, BAD_SIGNATURE, form, csrf=False, expect=frozenset({403}), stores=STORES_NONE)

    def extra_noise(self, stranger: Person, at: datetime) -> list[Job]:
        form = {"first_name": "Best", "phone": "+1 800 555 0199", "website_url": "https://cheap-seo.example"}
        return [self._job(0, HONEYPOT, form, stores=STORES_NONE)]


class GoogleAdsBuilder(Builder):
    """`/hooks/google-ads/<key>/`: lead form webhooks; `google_key` in the body."""

    name = source_provider = event_provider = "google_ads"

    def _payload(self, source: SourceInfo, person: Person, at: datetime, *, is_test: bool = False) -> dict:
        columns = [
            ("Full Name", person.name, "FULL_NAME"),
            ("User Phone", person.phone, "PHONE_NUMBER"),
            ("User Email", email_styles(person.email)[1 if is_test else 0], "EMAIL"),
            ("Postal Code", person.postal_code, "POSTAL_CODE"),
            ("What service do you need?", person.service, "SERVICE"),
        ]
        lead_id = ("TeSter-123-" if is_test else "") + self.ids.token(44, string.ascii_letters + string.digits + "-_")
        return {
            "lead_id": lead_id,
            "user_column_data": [{"column_name": n, "string_value": v, "column_id": c} for n, v, c in columns],
            "api_version": "1.0",
            "form_id": 40000000000 if is_test else int(self.ids.digits(11)),
            "campaign_id": 20000000000 if is_test else int(self.ids.digits(11)),
            "google_key": source.secret,
            "is_test": is_test,
            "gcl_id": ("TeSter-123-gclid-" if is_test else "") + self.ids.token(40),
            "adgroup_id": int(self.ids.digits(11)),
            "creative_id": int(self.ids.digits(12)),
            "lead_submit_time": iso(at),
        }

    def _post(self, intent: str, source: SourceInfo, payload: dict, **kw: Any) -> Post:
        headers = {"Content-Type": "application/json", "User-Agent": "Google-Ads-Lead-Forms-Webhook"}
        return self.post(intent, f"/hooks/google-ads/{source.key}/", compact(payload), headers, **kw)

    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        source = self.source()
        payload = self._payload(source, person, at, is_test=person.is_google_test)
        return [Job(phase, [self._post(LEAD, source, payload, person=person.number)])]

    def malformed(self, at: datetime, phase: int) -> Job:
        source = self.source()
        payload = {"lead_id": self.ids.token(44), "google_key": source.secret, "user_column_data": "FULL_NAME=?"}
        return Job(phase, [self._post(MALFORMED, source, payload, expect=UNREADABLE, stores=STORES_FAILED)])

    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        source = self.source()
        payload = self._payload(source, stranger, at)
        payload["google_key"] = "key-from-another-account"
        return Job(phase, [self._post(BAD_SIGNATURE, source, payload, expect=REFUSED, stores=STORES_NONE)])


class TypeformBuilder(Builder):
    """`/hooks/typeform/<key>/`: `Typeform-Signature` with the source's secret."""

    name = source_provider = event_provider = "typeform"
    FIELDS = (
        ("Fq1NameAbc01", "full_name", "short_text", "What's your name?"),
        ("Fq2MailAbc02", "email", "email", "What's your email?"),
        ("Fq3PhoneAb03", "phone", "phone_number", "Best phone number?"),
        ("Fq4ServAbc04", "service", "multiple_choice", "What do you need?"),
        ("Fq5ZipAbcd05", "zip", "short_text", "ZIP code?"),
        ("Fq6DescAb06", "details", "long_text", "Tell us more"),
    )

    def _payload(self, person: Person, at: datetime, nth: int) -> dict:
        values = {
            "full_name": ("text", person.name),
            "email": ("email", email_styles(person.email)[nth % 4]),
            "phone": ("phone_number", person.phone),
            "service": ("choice", {"label": person.service}),
            "zip": ("text", person.postal_code),
            "details": ("text", person.request),
        }
        answers = []
        for fid, ref, ftype, _ in self.FIELDS:
            kind, value = values[ref]
            answers.append({"type": kind, kind: value, "field": {"id": fid, "type": ftype, "ref": ref}})
        token = self.ids.token(32, string.ascii_lowercase + string.digits)
        return {
            "event_id": self.ids.token(26, string.ascii_uppercase + string.digits),
            "event_type": "form_response",
            "form_response": {
                "form_id": "aBcD1234",
                "token": token,
                "landed_at": iso(at - timedelta(minutes=2)),
                "submitted_at": iso(at),
                "hidden": {"utm_source": "facebook", "utm_medium": "paid_social", "utm_campaign": "fall_tuneup"},
                "definition": {
                    "id": "aBcD1234",
                    "title": f"{self.ctx.business_name}: free quote",
                    "fields": [
                        {"id": fid, "ref": ref, "type": ftype, "title": title, "properties": {}}
                        for fid, ref, ftype, title in self.FIELDS
                    ],
                },
                "answers": answers,
                "ending": {"id": "DefaultTyScreen", "ref": "default_tys"},
            },
        }

    def _post(self, intent: str, body: bytes, secret: str, **kw: Any) -> Post:
        source = self.source()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "Typeform Webhooks",
            "Typeform-Signature": typeform_signature(secret or source.secret, body),
        }
        return self.post(intent, f"/hooks/typeform/{source.key}/", body, headers, **kw)

    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        body = compact(self._payload(person, at, nth))
        return [Job(phase, [self._post(LEAD, body, "", person=person.number)])]

    def malformed(self, at: datetime, phase: int) -> Job:
        body = b'{"event_id":"01JQ8Z7K3M4N5P6Q7R8S9T0V1X","event_type":"form_response","form_response":{"answers":['
        return Job(phase, [self._post(MALFORMED, body, "", expect=UNREADABLE, stores=STORES_FAILED)])

    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        body = compact(self._payload(stranger, at, 0))
        return Job(phase, [self._post(BAD_SIGNATURE, body, "not-the-secret", expect=REFUSED, stores=STORES_NONE)])


def _meta_headers(body: bytes, secret: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "facebookexternalua",
        "X-Hub-Signature-256": meta_signature(secret, body),
        "X-Hub-Signature": meta_signature(secret, body, "sha1"),
    }


class MetaBuilder(Builder):
    """`/hooks/meta/` (`object: page`, `leadgen`): the notification carries ids
    only; the server fetches the lead from META_GRAPH_URL, which `GraphServer`
    serves from `plan.graph_leads`."""

    name = source_provider = event_provider = "meta"
    needs_setting = "META_APP_SECRET"

    def _notification(self, page_id: str, leadgen_id: str, form_id: str, ad_id: str, at: datetime) -> bytes:
        value: dict[str, str | int] = {"form_id": form_id, "leadgen_id": leadgen_id, "page_id": page_id}
        if ad_id:  # organic and test-tool leads come without ad ids
            value.update(ad_id=ad_id, adgroup_id=ad_id)
        value["created_time"] = int(at.timestamp())
        change = {"value": value, "field": "leadgen"}
        return compact({"object": "page", "entry": [{"id": page_id, "time": int(at.timestamp()), "changes": [change]}]})

    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        source = self.source()
        page_id = str(source.config.get("page_id", ""))
        leadgen_id, form_id = self.ids.digits(16), self.ids.digits(15)
        organic = self.rng.random() < 0.2
        ad_id = "" if organic else "1202" + self.ids.digits(14)
        lead: dict[str, Any] = {
            "id": leadgen_id,
            "created_time": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S+0000"),
        }
        if not organic:
            lead.update(
                ad_id=ad_id,
                ad_name="Fall tune-up - video",
                adset_id="1202" + self.ids.digits(14),
                adset_name="Chicago homeowners 35-65",
                campaign_id="1202" + self.ids.digits(14),
                campaign_name="Lead gen - HVAC",
            )
        lead.update(
            form_id=form_id,
            platform=self.rng.choice(("fb", "ig")),
            is_organic=organic,
            field_data=[
                {"name": "full_name", "values": [person.name]},
                {"name": "phone_number", "values": [person.phone]},
                {"name": "email", "values": [email_styles(person.email)[nth % 4]]},
                {"name": "zip_code", "values": [person.postal_code]},
                {"name": "what_do_you_need_help_with?", "values": [person.service.lower()]},
            ],
        )
        self.plan.graph_leads[leadgen_id] = lead
        if source.config.get("access_token"):
            self.plan.graph_tokens.add(str(source.config["access_token"]))
        body = self._notification(page_id, leadgen_id, form_id, ad_id, at)
        headers = _meta_headers(body, self.ctx.meta_app_secret)
        return [Job(phase, [self.post(LEAD, "/hooks/meta/", body, headers, person=person.number)])]

    def malformed(self, at: datetime, phase: int) -> Job:
        page_id = str(self.source().config.get("page_id", ""))
        # A notification cut off mid-send: signed as sent, unreadable.
        body = self._notification(page_id, self.ids.digits(16), self.ids.digits(15), "", at)[:70]
        headers = _meta_headers(body, self.ctx.meta_app_secret)
        return Job(
            phase, [self.post(MALFORMED, "/hooks/meta/", body, headers, expect=UNREADABLE, stores=STORES_FAILED)]
        )

    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        page_id = str(self.source().config.get("page_id", ""))
        body = self._notification(page_id, self.ids.digits(16), self.ids.digits(15), "", at)
        headers = _meta_headers(body, "an-old-app-secret")
        return Job(phase, [self.post(BAD_SIGNATURE, "/hooks/meta/", body, headers, expect=REFUSED, stores=STORES_NONE)])


class InstagramBuilder(Builder):
    """`/hooks/meta/` (`object: instagram`): DMs, known by an Instagram-scoped id only."""

    name = source_provider = event_provider = "instagram"
    needs_setting = "META_APP_SECRET"
    carries_phone = False

    def _dm(self, igsid: str, text: str, at: datetime) -> bytes:
        account = str(self.source().config.get("account_id", ""))
        ms = int(at.timestamp() * 1000)
        message = {"mid": "aWdfZAG1faXRlbToxOklHTWVzc2FnZA" + self.ids.token(60), "text": text}
        messaging = {"sender": {"id": igsid}, "recipient": {"id": account}, "timestamp": ms - 250, "message": message}
        return compact({"object": "instagram", "entry": [{"time": ms, "id": account, "messaging": [messaging]}]})

    def _post(self, intent: str, body: bytes, secret: str, **kw: Any) -> Post:
        return self.post(intent, "/hooks/meta/", body, _meta_headers(body, secret), **kw)

    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        body = self._dm(person.igsid, self.rng.choice(DM_TEXTS), at)
        return [Job(phase, [self._post(LEAD, body, self.ctx.meta_app_secret, person=person.number)])]

    def reply(self, person: Person, at: datetime, phase: int) -> list[Job]:
        body = self._dm(person.igsid, self.rng.choice(DM_FOLLOW_UPS), at)
        return [Job(phase, [self._post(REPLY, body, self.ctx.meta_app_secret, person=person.number)])]

    def malformed(self, at: datetime, phase: int) -> Job:
        # A DM without its message id: readable JSON, but not a message anyone can store.
        account = str(self.source().config.get("account_id", ""))
        messaging = {"sender": {"id": self.ids.digits(16)}, "recipient": {"id": account}, "message": {"text": "hi"}}
        body = compact({"object": "instagram", "entry": [{"id": account, "messaging": [messaging]}]})
        post = self._post(MALFORMED, body, self.ctx.meta_app_secret, expect=UNREADABLE, stores=STORES_FAILED)
        return Job(phase, [post])

    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        body = self._dm(self.ids.digits(16), "Hi, is this still available?", at)
        return Job(phase, [self._post(BAD_SIGNATURE, body, "an-old-app-secret", expect=REFUSED, stores=STORES_NONE)])


class TwilioBuilder(Builder):
    """`/hooks/twilio/...`: missed calls (the call, then its no-answer status)
    and inbound SMS, signed over PUBLIC_BASE_URL + path; the business is the
    one whose twilio source has the `To` number."""

    name = source_provider = event_provider = "twilio"
    needs_setting = "TWILIO_AUTH_TOKEN"

    def _account(self) -> str:
        return self.ctx.twilio_account_sid or "AC" + "0" * 31 + "1"

    def _geo(self, person: Person) -> dict[str, str]:
        _, city, state, zip_code = person.area
        to = {"ToCity": "CHICAGO", "ToState": "IL", "ToZip": "60601", "ToCountry": "US"}
        return {"FromCity": city, "FromState": state, "FromZip": zip_code, "FromCountry": "US", **to}

    def _post(self, intent: str, path: str, params: dict[str, str], token: str = "", **kw: Any) -> Post:
        url = self.ctx.public_base_url + path
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "User-Agent": "TwilioProxy/1.1",
            "I-Twilio-Idempotency-Token": self.ids.token(36),
            "X-Twilio-Signature": RequestValidator(token or self.ctx.twilio_auth_token).compute_signature(url, params),
        }
        return self.post(intent, path, urlencode(params).encode(), headers, **kw)

    def _sms(self, person: Person, to: str, text: str) -> dict[str, str]:
        sid = self.ids.sid("SM")
        return {
            **self._geo(person),
            "SmsMessageSid": sid,
            "NumMedia": "0",
            "SmsSid": sid,
            "SmsStatus": "received",
            "Body": text,
            "To": to,
            "NumSegments": "1",
            "MessageSid": sid,
            "AccountSid": self._account(),
            "From": person.phone,
            "ApiVersion": "2010-04-01",
        }

    def _call(self, person: Person, to: str, status: str, sid: str) -> dict[str, str]:
        return {
            "AccountSid": self._account(),
            "ApiVersion": "2010-04-01",
            "CallSid": sid,
            "CallStatus": status,
            "Called": to,
            "Caller": person.phone,
            "Direction": "inbound",
            "From": person.phone,
            "To": to,
            **self._geo(person),
        }

    def _line(self) -> SourceInfo:
        return self.source()

    def lead(self, person: Person, at: datetime, phase: int, nth: int) -> list[Job]:
        line = self._line()
        to = str(line.config.get("phone_number", ""))
        if nth == 0 and self.rng.random() < 0.5:
            text = f"Hi, this is {person.first_name}. {person.request}. I'm in {person.postal_code}, can you help?"
            params = self._sms(person, to, text)
            return [Job(phase, [self._post(LEAD, "/hooks/twilio/sms/", params, person=person.number)])]
        # A call nobody picks up. The line forwards (`<Dial>`) when it has a
        # forward_to: the Dial action reports no-answer, then the caller's leg
        # ends completed. Without one the server answers with a message and
        # the caller's leg ends completed after a few seconds.
        sid, status_path = self.ids.sid("CA"), "/hooks/twilio/voice/status/"
        call = self._post(LEAD, "/hooks/twilio/voice/", self._call(person, to, "ringing", sid), person=person.number)
        statuses = []
        if line.config.get("forward_to"):
            dial = self._call(person, to, "in-progress", sid)
            dial.update(DialCallSid=self.ids.sid("CA"), DialCallStatus="no-answer", DialCallDuration="0")
            statuses.append(self._post(CALL_STATUS, status_path, dial, person=person.number))
        leg = self._call(person, to, "completed", sid)
        leg.update(
            CallDuration=str(self.rng.randint(21, 30) if line.config.get("forward_to") else self.rng.randint(3, 8)),
            CallbackSource="call-progress-events",
            SequenceNumber="0",
            Timestamp=(at + timedelta(seconds=30)).astimezone(UTC).strftime("%a, %d %b %Y %H:%M:%S +0000"),
        )
        statuses.append(self._post(CALL_STATUS, status_path, leg, person=person.number))
        return [Job(phase, [call]), *(Job(phase + 1 + n, [post]) for n, post in enumerate(statuses))]

    def reply(self, person: Person, at: datetime, phase: int) -> list[Job]:
        to = str(self._line().config.get("phone_number", ""))
        params = self._sms(person, to, self.rng.choice(SMS_REPLIES))
        return [Job(phase, [self._post(REPLY, "/hooks/twilio/sms/", params, person=person.number)])]

    def malformed(self, at: datetime, phase: int) -> Job:
        # Signed and to the right line, but without the MessageSid that names it.
        to = str(self._line().config.get("phone_number", ""))
        params = {
            "AccountSid": self._account(),
            "To": to,
            "Body": "hello?",
            "NumMedia": "0",
            "ApiVersion": "2010-04-01",
        }
        post = self._post(MALFORMED, "/hooks/twilio/sms/", params, expect=UNREADABLE, stores=STORES_FAILED)
        return Job(phase, [post])

    def bad_signature(self, stranger: Person, at: datetime, phase: int) -> Job:
        to = str(self._line().config.get("phone_number", ""))
        params = self._sms(stranger, to, "Is this the heating company?")
        post = self._post(
            BAD_SIGNATURE, "/hooks/twilio/sms/", params, token="f" * 32, expect=REFUSED, stores=STORES_NONE
        )
        return Job(phase, [post])


BUILDERS: tuple[type[Builder], ...] = (
    GoogleAdsBuilder,
    WebsiteBuilder,
    HostedFormBuilder,
    TypeformBuilder,
    MetaBuilder,
    InstagramBuilder,
    TwilioBuilder,
    ThumbtackBuilder,
    YelpBuilder,
    AngiBuilder,
    CallRailBuilder,
)
BUILDER_NAMES = tuple(b.name for b in BUILDERS)
# How often each channel brings a new person, relative to the others.
WEIGHTS = {
    "google_ads": 3,
    "website": 3,
    "hosted_form": 1,
    "typeform": 2,
    "meta": 3,
    "instagram": 1,
    "twilio": 2,
    "thumbtack": 2,
    "yelp": 1,
    "angi": 1,
    "callrail": 2,
}
# The hosted form lets one address post 10 times per 10 minutes: the duplicate,
# the malformed post and the bot's leave room for this many people.
HOSTED_PEOPLE_MAX = HOSTED_RATE_LIMIT[0] - 3
REPLY_PHASE = 3


def plan_build(
    ctx: SimContext,
    *,
    leads: int,
    seed: int,
    only: Iterable[str] | None = None,
    now: datetime | None = None,
    noise: bool = True,
    api_wait: float | None = None,
) -> Plan:
    """`leads` people reaching the business through the selected builders,
    and what else real traffic holds (see the module docstring)."""
    selected = set(BUILDER_NAMES if only is None else only)
    unknown = selected - set(BUILDER_NAMES) - {"stripe", "calendly", "estimates"}
    if unknown:
        raise SimulationError(
            f"unknown provider(s) {', '.join(sorted(unknown))}; choose from {', '.join(BUILDER_NAMES)}"
        )
    rng = random.Random(seed)
    now = now or timezone.now()
    plan = Plan(seed=seed, people=[], jobs=[], builders=[], skipped={})
    builders: dict[str, Builder] = {}
    for cls in BUILDERS:
        if cls.name not in selected:
            continue
        builder = cls(ctx, rng, plan)
        reason = builder.unavailable()
        if reason:
            plan.skipped[cls.name] = reason
        else:
            builders[cls.name] = builder
    plan.builders = list(builders)
    if not builders:
        return plan

    google_tests = max(1, leads // 10) if "google_ads" in builders and leads else 0
    everyone = people_make(rng, leads + 8, ctx.reserved_phones)  # 8 strangers for the badly signed posts
    people, strangers = everyone[:leads], everyone[leads:]
    primaries = _primaries(rng, people, builders)
    ids = Ids(rng)
    for i, name in enumerate(primaries):
        if name == "instagram":
            people[i] = replace(people[i], phone="", email="", igsid=ids.digits(16))
    if google_tests:
        first, last, phone, email, postal = GOOGLE_TEST_PERSON
        tester = Person(len(people) + 1, first, last, phone, email, postal, "HVAC", "", is_google_test=True)
        people.append(tester)
        primaries.append("google_ads")
    plan.people = people

    phone_builders = [n for n, b in builders.items() if b.carries_phone]
    hosted_used = primaries.count("hosted_form")
    minute = timedelta(minutes=1)
    for person, primary in zip(people, primaries, strict=True):
        at = now - timedelta(minutes=rng.randint(20, 90))
        channels = [primary]
        if person.phone and not person.is_google_test:
            extra = 1 if person.number == 1 else int(rng.random() < 0.35) + int(rng.random() < 0.1)
            others = [n for n in phone_builders if n != primary]
            for name in rng.sample(others, min(extra, len(others))):
                if name == "hosted_form" and hosted_used >= HOSTED_PEOPLE_MAX:
                    continue
                hosted_used += name == "hosted_form"
                channels.append(name)
        plan.channels[person.number] = channels
        for nth, name in enumerate(channels):
            when = at + nth * rng.randint(2, 12) * minute
            plan.jobs.extend(builders[name].lead(person, when, nth, nth))
        if person.is_google_test:
            continue
        if person.igsid and rng.random() < 0.5:
            plan.jobs.extend(builders["instagram"].reply(person, at + 20 * minute, REPLY_PHASE))
        elif person.phone and "twilio" in builders and (person.number == 1 or rng.random() < 0.3):
            plan.jobs.extend(builders["twilio"].reply(person, at + 30 * minute, REPLY_PHASE))
    if noise:
        _noise(rng, plan, builders, strangers, now)
    if only is None or "stripe" in selected:
        _payments(ctx, plan, seed, now, asked=only is not None)
    if only is None or "calendly" in selected:
        _bookings(ctx, plan, seed, now, asked=only is not None)
    if only is None or "estimates" in selected:
        _estimates(ctx, plan, seed, now, asked=only is not None, wait=api_wait)
    return plan


def _payments(ctx: SimContext, plan: Plan, seed: int, now: datetime, *, asked: bool) -> None:
    """Signed Stripe payments and refunds for some of the people (their own
    random stream, so adding them changes no other delivery of a seed)."""
    if not ctx.stripe_webhook_secret:
        if asked:
            plan.skipped["stripe"] = "STRIPE_WEBHOOK_SECRET is not set (the server refuses every delivery without it)"
        return
    plan.jobs.extend(payment_jobs(ctx, random.Random(seed * 7919 + 1), plan.people, now))
    plan.builders.append("stripe")


def _bookings(ctx: SimContext, plan: Plan, seed: int, now: datetime, *, asked: bool) -> None:
    """Signed Calendly bookings, cancellations and no-shows for some of the
    people (their own random stream, so adding them changes no other delivery)."""
    if not ctx.sources.get("calendly") or not signing_key(ctx):
        if asked:
            why = "no active calendly source" if not ctx.sources.get("calendly") else "CALENDLY_SIGNING_KEY is not set"
            plan.skipped["calendly"] = f"{why} (the server refuses every delivery without it)"
        return
    plan.jobs.extend(booking_jobs(ctx, random.Random(seed * 7927 + 2), plan.people, now))
    plan.builders.append("calendly")


def _estimates(ctx: SimContext, plan: Plan, seed: int, now: datetime, *, asked: bool, wait: float | None) -> None:
    """Visits held and estimates sent, accepted and declined, written through
    the API with a team member's token (their own random stream, so adding
    them changes no other delivery). The visits are booked through Calendly."""
    why = ""
    if not ctx.api_token:
        why = "no API token (pass --token or set SIMULATE_API_TOKEN)"
    elif not ctx.sources.get("calendly") or not signing_key(ctx):
        why = "the visits are booked through Calendly: no active calendly source or CALENDLY_SIGNING_KEY"
    if why:
        if asked:
            plan.skipped["estimates"] = why
        return
    jobs = estimate_jobs(ctx, random.Random(seed * 7933 + 3), plan, now, wait=WAIT_SECONDS if wait is None else wait)
    if jobs:
        plan.jobs.extend(jobs)
        plan.builders.append("estimates")


def _primaries(rng: random.Random, people: list[Person], builders: dict[str, Builder]) -> list[str]:
    """Each person's first channel: every builder at least once (when there
    are enough people), then by weight; the hosted form within its rate limit."""
    names = list(builders)
    primaries = names[: len(people)]
    while len(primaries) < len(people):
        open_names = [n for n in names if n != "hosted_form" or primaries.count(n) < HOSTED_PEOPLE_MAX // 2]
        if not open_names:
            limit, window = HOSTED_RATE_LIMIT
            raise SimulationError(
                f"the hosted form alone takes at most {HOSTED_PEOPLE_MAX // 2} people per run "
                f"(it accepts {limit} posts per address per {window // 60} minutes); add other providers"
            )
        primaries.append(rng.choices(open_names, [WEIGHTS[n] for n in open_names])[0])
    rng.shuffle(primaries)
    return primaries


def _noise(
    rng: random.Random, plan: Plan, builders: dict[str, Builder], strangers: list[Person], now: datetime
) -> None:
    """Retries, signed garbage and forged deliveries: for each builder at least
    one of each, and more with more people."""
    by_builder: dict[str, list[Job]] = defaultdict(list)
    for job in plan.jobs:
        if job.posts[0].intent in (LEAD, REPLY, CALL_STATUS):
            by_builder[job.posts[0].builder].append(job)
    for name, builder in builders.items():
        jobs = by_builder.get(name, [])
        for job in rng.sample(jobs, min(len(jobs), max(1, round(len(jobs) * 0.12)))):
            if name == "hosted_form":
                builder.duplicate(job)  # in the same job: the same browser
                continue
            again = builder.duplicate(job)
            if again is not None:
                plan.jobs.append(again)
        few = max(1, len(jobs) // 25)
        for _ in range(few):
            plan.jobs.append(builder.malformed(now, rng.randint(0, 2)))
            plan.jobs.append(builder.bad_signature(rng.choice(strangers), now, rng.randint(0, 2)))
        plan.jobs.extend(builder.extra_noise(rng.choice(strangers), now))


# --- sending -------------------------------------------------------------------


@dataclass
class Result:
    post: Post
    status: int  # 0: no HTTP answer (refused, timed out)
    elapsed_ms: float
    sent: bytes = b""
    detail: str = ""

    @property
    def expected(self) -> bool:
        return self.status in self.post.expect


class _HiddenInputs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "input" and a.get("type") == "hidden" and a.get("name"):
            self.values[str(a["name"])] = a.get("value") or ""


def hidden_inputs(html: str) -> dict[str, str]:
    parser = _HiddenInputs()
    parser.feed(html)
    return parser.values


def job_run(job: Job, base_url: str, timeout: tuple[float, float] = DEFAULT_TIMEOUT) -> list[Result]:
    """Send one job's posts in order on one session; never raises for HTTP trouble."""
    results: list[Result] = []
    previous: tuple[bytes, dict[str, str]] = (b"", {})
    with requests.Session() as session:
        for post in job.posts:
            started = time.perf_counter()
            try:
                # The path first: finding an id there may complete the body too.
                url = base_url + (post.route(base_url) if post.route is not None else post.path)
                if post.repeat_previous:
                    body, headers = previous
                elif post.prepare is not None:
                    body, headers = post.prepare()
                elif post.form is not None:
                    body, headers = _hosted_body(session, base_url + post.path, post, timeout)
                else:
                    body, headers = post.body, post.headers
                previous = (body, headers)
                if post.csrf:
                    response = session.post(url, data=body, headers=headers, timeout=timeout, allow_redirects=False)
                else:  # a forged cross-site post carries none of the page's cookies
                    response = requests.post(url, data=body, headers=headers, timeout=timeout, allow_redirects=False)
                status, detail = response.status_code, response.text[:300]
            except (requests.RequestException, _PageError, PostNotReady) as exc:
                status, detail, body = getattr(exc, "status", 0), f"{type(exc).__name__}: {exc}"[:300], b""
            results.append(Result(post, status, (time.perf_counter() - started) * 1000, body, detail))
    return results


class _PageError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _hosted_body(
    session: requests.Session, url: str, post: Post, timeout: tuple[float, float]
) -> tuple[bytes, dict[str, str]]:
    page = session.get(url, timeout=timeout)
    if page.status_code != 200:
        raise _PageError(page.status_code, f"GET {url} answered {page.status_code}")
    hidden = hidden_inputs(page.text)
    fields = {**hidden, **(post.form or {})}
    if not post.csrf:
        fields.pop("csrfmiddlewaretoken", None)
    headers = {"Content-Type": "application/x-www-form-urlencoded", "User-Agent": "Mozilla/5.0 (LeadOps simulate)"}
    return urlencode(fields).encode(), headers


def plan_run(
    plan: Plan,
    base_url: str,
    *,
    concurrency: int = 4,
    timeout: tuple[float, float] = DEFAULT_TIMEOUT,
) -> list[Result]:
    """Post every job, phase by phase; within a phase, `concurrency` at a time."""
    base_url = base_url.rstrip("/")
    results: list[Result] = []
    for phase in sorted({job.phase for job in plan.jobs}):
        jobs = [job for job in plan.jobs if job.phase == phase]
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="simulate") as pool:
            for job_results in pool.map(lambda job: job_run(job, base_url, timeout), jobs):
                results.extend(job_results)
    return results


def loopback_url(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOOPBACK_HOSTS


# --- a stand-in for Meta's Graph API --------------------------------------------


class GraphServer:
    """Graph-compatible lead reads on 127.0.0.1: `GET <any prefix>/<leadgen_id>`
    with the page's `access_token` (query string or Bearer) answers the lead,
    as Graph does; `fields=` narrows it. Unknown ids and bad tokens get Graph's
    error shapes. Records what was fetched so the caller can wait for it."""

    def __init__(self, port: int = 0) -> None:
        self.leads: dict[str, dict[str, Any]] = {}
        self.tokens: set[str] = set()
        self.fetched: set[str] = set()
        self.refused = 0
        self._changed = threading.Condition()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def publish(self, leads: dict[str, dict[str, Any]], tokens: Iterable[str]) -> None:
        with self._changed:
            self.leads.update(leads)
            self.tokens.update(tokens)

    def start(self) -> GraphServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="graph", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()

    def __enter__(self) -> GraphServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_fetched(self, ids: Iterable[str], timeout: float) -> set[str]:
        """Wait (at most `timeout` seconds) until every id was fetched; the ids fetched."""
        wanted = set(ids)
        deadline = time.monotonic() + timeout
        with self._changed:
            while not wanted <= self.fetched:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.5))
            return wanted & self.fetched

    def _answer(self, path: str, query: dict[str, list[str]], authorization: str) -> tuple[int, dict[str, Any]]:
        leadgen_id = [part for part in path.split("/") if part][-1:] or [""]
        token = (query.get("access_token") or [""])[0] or authorization.removeprefix("Bearer ").strip()
        with self._changed:
            lead = self.leads.get(leadgen_id[0])
            if lead is None:
                self.refused += 1
                message = f"Unsupported get request. Object with ID '{leadgen_id[0]}' does not exist"
                return 400, {"error": {"message": message, "type": "GraphMethodException", "code": 100}}
            if token not in self.tokens:
                self.refused += 1
                error = {"message": "Invalid OAuth access token - Cannot parse access token", "type": "OAuthException"}
                return 400, {"error": {**error, "code": 190}}
            self.fetched.add(leadgen_id[0])
            self._changed.notify_all()
        wanted = {f for f in ",".join(query.get("fields", [])).split(",") if f}
        return 200, {k: v for k, v in lead.items() if not wanted or k in wanted or k == "id"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        graph = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                status, data = graph._answer(parts.path, parse_qs(parts.query), self.headers.get("Authorization", ""))
                body = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet: the summary reports
                return

        return Handler


# --- reporting -------------------------------------------------------------------


def unexpected(results: Iterable[Result]) -> list[Result]:
    return [r for r in results if not r.expected]


def summary_lines(plan: Plan, results: list[Result]) -> Iterator[str]:
    """What was posted and how the server answered, for people."""
    yield "Posts by source and HTTP status:"
    by_builder: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_builder[r.post.builder].append(r)
    for name in plan.builders:
        rs = by_builder.get(name, [])
        yield f"  {name:<12} {len(rs):>5} posts   {counts_text(r.status for r in rs)}"
    yield f"  {'total':<12} {len(results):>5} posts   {counts_text(r.status for r in results)}"

    by_intent: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_intent[r.post.intent].append(r)
    several = sum(1 for channels in plan.channels.values() if len(channels) > 1)
    yield (
        f"People: {len(plan.people)} ({several} on two or three channels); lead posts {len(by_intent[LEAD])}, "
        f"replies {len(by_intent[REPLY])}, missed-call statuses {len(by_intent[CALL_STATUS])}, "
        f"repeated deliveries {len(by_intent[DUPLICATE])} ({counts_text(r.status for r in by_intent[DUPLICATE])})"
    )
    paid = [r for r in results if r.post.builder == "stripe" and r.post.intent in ("payment", "refund")]
    if paid:
        yield f"Stripe: {counts_text(r.status for r in paid)} ({sum(r.post.intent == 'refund' for r in paid)} refunds)"
    calendly = Counter(r.post.intent for r in results if r.post.builder == "calendly")
    if calendly:
        yield (
            f"Calendly: {calendly['booking']} bookings, {calendly['cancellation']} cancellations, "
            f"{calendly['no_show']} no-shows, {calendly['unmatched_booking']} from nobody known "
            f"({counts_text(r.status for r in results if r.post.builder == 'calendly')})"
        )
    estimates = Counter(r.post.intent for r in results if r.post.builder == "estimates")
    if estimates:
        yield summary(estimates, [r for r in results if r.post.builder == "estimates"])
    yield "Meant to fail (expected, not errors):"
    for intent, what in (
        (MALFORMED, "signed but malformed (stored failed, or refused)"),
        (BAD_SIGNATURE, "bad signature, key or CSRF token (not stored)"),
        (HONEYPOT, "bots caught by the hosted form's honeypot (answered 200, not stored)"),
    ):
        rs = by_intent.get(intent, [])
        if rs:
            yield f"  {len(rs):>3} {what}: {counts_text(r.status for r in rs)}"
    limited = [r for r in results if r.post.builder == "hosted_form" and r.status == HOSTED_RATE_LIMITED]
    if limited:
        limit, window = HOSTED_RATE_LIMIT
        yield (
            f"  {len(limited):>3} hosted-form posts rate limited ({limit} per address per {window // 60} minutes): "
            "run again later for hosted-form leads"
        )
    wrong = unexpected(results)
    if not wrong:
        yield "Unexpected statuses: none"
        return
    yield f"Unexpected statuses: {len(wrong)}"
    for r in wrong[:30]:
        who = f" person {r.post.person}" if r.post.person else ""
        want = "/".join(str(s) for s in sorted(r.post.expect))
        got = r.status or "no answer"
        yield (
            f"  ! {r.post.builder} {r.post.intent}{who}: POST {r.post.path} -> {got} (expected {want}): "
            f"{r.detail[:160]!r}"
        )
    if len(wrong) > 30:
        yield f"  … and {len(wrong) - 30} more"
