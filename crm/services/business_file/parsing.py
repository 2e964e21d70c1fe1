"""Parsing a business file into a `BusinessSpec`: one `_parse_*` function
per section, each producing the rows that section asks for. Nothing here
touches the database; references that may name rows the business already
has (service lines, areas, templates, availability members) are checked
when the spec is applied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import time
from decimal import Decimal, InvalidOperation
from typing import Any

import phonenumbers
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import models

from crm.models import DAYS, MAPPED_KINDS, Business, ConversionPlatform, Provider, Role, Sequence, Stage, TeamMember
from crm.phones import email_normalize
from crm.services.business_file.reading import (
    MISSING,
    BusinessFileError,
    ItemMap,
    Map,
    Ref,
    kind_of,
    plain,
    time_range,
    yaml_load_with_lines,
)
from crm.services.conversions import GOOGLE_APIS
from crm.services.webhooks import WebhookRefused, webhook_events_check, webhook_secret_check
from crm.us_states import STATE_CODES
from crm.validation import (
    AUTO_REPLY_INTENTS,
    FACT_MAX_LENGTH,
    FIT_RULES,
    SCOPE_FLAGS,
    booking_url_refusal,
    origin_refusal,
    policy_refusals,
)

# A template is sent on a channel that reaches the person: every step channel but a task.
TEMPLATE_CHANNELS = tuple(c for c in Sequence.StepChannel.values if c != Sequence.StepChannel.TASK)
STEP_CHANNELS = tuple(Sequence.StepChannel.values)
SEQUENCE_TRIGGERS = tuple(Sequence.Trigger.values)
STEP_CLOCKS = tuple(Sequence.StepClock.values)
# Source settings that hold phone numbers: checked and stored as E.164.
SOURCE_PHONE_KEYS = ("phone_number", "forward_to")
# A twilio source's own account (or subaccount): the SIDs Twilio issues.
TWILIO_SIDS = {"account_sid": re.compile(r"AC[0-9a-f]{32}"), "messaging_service_sid": re.compile(r"MG[0-9a-f]{32}")}


# --- what the file asks for -------------------------------------------------


@dataclass
class Row:
    """One record the file asks for: its natural key, the field values it
    should have, and the line that names it."""

    line: int
    key: str
    fields: dict[str, Any]


@dataclass
class MemberRow(Row):
    email: str = ""
    service_lines: list[Ref] = field(default_factory=list)
    service_areas: list[Ref] = field(default_factory=list)


@dataclass
class SourceRow(Row):
    # The line of each provider setting, for refusals found against the database.
    key_lines: dict[str, int] = field(default_factory=dict)


@dataclass
class SequenceRow(Row):
    # (template named by a step, the step's channel)
    templates: list[tuple[Ref, str]] = field(default_factory=list)


@dataclass
class WebhookRow(Row):
    """An outbound webhook subscription: `key` is its URL."""

    secret: str | None = None
    key_lines: dict[str, int] = field(default_factory=dict)


@dataclass
class ConversionRow(Row):
    """A conversions account: `key` is its platform; `secrets` the credentials
    the file names (the others stay as they are, or come from the environment)."""

    secrets: dict[str, str] = field(default_factory=dict)


@dataclass
class AvailabilityRule:
    line: int
    members: list[Ref]
    days: list[str]
    slots: list[tuple[time, time]]
    capacity: int
    service_lines: list[Ref] = field(default_factory=list)

    @property
    def slot_texts(self) -> list[str]:
        return [f"{start:%H:%M}-{end:%H:%M}" for start, end in self.slots]


@dataclass
class BusinessSpec:
    """A parsed and checked business file, not yet applied."""

    path: str
    slug: str
    line: int
    fields: dict[str, Any]
    sources: list[Row] = field(default_factory=list)
    service_lines: list[Row] = field(default_factory=list)
    service_areas: list[Row] = field(default_factory=list)
    templates: list[Row] = field(default_factory=list)
    sequences: list[SequenceRow] = field(default_factory=list)
    team: list[MemberRow] = field(default_factory=list)
    availability: list[AvailabilityRule] = field(default_factory=list)
    # An `availability` section (even an empty one) replaces the business's rules.
    availability_given: bool = False
    webhooks: list[WebhookRow] = field(default_factory=list)
    conversions: list[ConversionRow] = field(default_factory=list)


_SECTIONS = (
    "business",
    "sources",
    "service_lines",
    "service_areas",
    "team",
    "policy",
    "notifications",
    "templates",
    "sequences",
    "availability",
    "webhooks",
    "ai",
    "playbook",
    "calls",
    "conversions",
)


def business_file_parse(text: str, *, path: str = "") -> BusinessSpec:
    """Parse and check a business file without touching the database.

    Checks structure, keys, types and formats (time zones, phones, time
    ranges, step delays, duplicates). References (service lines, areas,
    templates, availability members) may also name rows the business already
    has, so `business_spec_apply` checks them. Raises BusinessFileError
    naming the line.
    """
    try:
        return _parse(text, path)
    except BusinessFileError as exc:
        exc.path = path
        raise


def _parse(text: str, path: str) -> BusinessSpec:
    loaded = yaml_load_with_lines(text)
    if loaded is None:
        raise BusinessFileError(1, "the file is empty: it needs at least a 'business' section")
    doc = Map(loaded, 1, "the file", required=("business",), optional=_SECTIONS)
    spec = _parse_business(doc, path)
    region = spec.fields["region"]
    spec.sources = _unique(doc, "sources", "source", lambda m: _parse_source(m, region))
    spec.service_lines = _unique(doc, "service_lines", "service line", lambda m: _parse_service_line(m, spec))
    spec.service_areas = _unique(doc, "service_areas", "service area", _parse_service_area)
    spec.templates = _unique(doc, "templates", "template", _parse_template)
    spec.sequences = _unique(doc, "sequences", "sequence", _parse_sequence)
    spec.team = _unique(doc, "team", "team member", lambda m: _parse_member(m, region))
    spec.availability = [_parse_availability(item, line) for item, line in doc.items("availability")]
    spec.availability_given = doc.has("availability")
    spec.webhooks = _unique(doc, "webhooks", "webhook", _parse_webhook)
    spec.conversions = _parse_conversions(doc)
    return spec


def _unique(doc: Map, section: str, what: str, parse: Any) -> list[Any]:
    """Parse each item of a list section, refusing two with the same key."""
    rows: list[Row] = []
    seen: dict[str, int] = {}
    for item, line in doc.items(section):
        row = parse(ItemMap(item, line, what))
        if row.key in seen:
            raise BusinessFileError(line, f"duplicate {what} {row.key!r} (first at line {seen[row.key]})")
        seen[row.key] = line
        rows.append(row)
    return rows


def _parse_business(doc: Map, path: str) -> BusinessSpec:
    m = Map(
        doc.raw("business"),
        doc.line_of("business"),
        "business",
        required=("slug", "name", "timezone"),
        optional=("region", "currency", "legal_name", "website", "privacy_policy_url"),
    )
    region = m.text("region", "US").upper()
    if region not in phonenumbers.SUPPORTED_REGIONS:
        raise m.error("region", f"bad region {region!r} in business (a two-letter country code like US)")
    currency = m.text("currency", "USD").upper()
    if not re.fullmatch(r"[A-Z]{3}", currency):
        raise m.error("currency", f"bad currency {currency!r} in business (a three-letter code like USD)")
    fields: dict[str, Any] = {
        "name": m.text("name"),
        "timezone": m.zone("timezone"),
        "region": region,
        "currency": currency,
        "registration": _registration(m),
        **_parse_policy(doc, region),
        **_parse_notifications(doc),
        **_parse_ai(doc),
        **_parse_playbook(doc, currency),
        **_parse_calls(doc),
    }
    return BusinessSpec(path=path, slug=m.slug("slug"), line=m.line, fields=fields)


def _registration(m: Map) -> dict[str, str]:
    """What a carrier's sender registration names: the legal name and two
    public https addresses (the website, the privacy policy)."""
    found = {"legal_name": m.text("legal_name").strip()}
    for key in ("website", "privacy_policy_url"):
        url = m.text(key).strip()
        if url and not re.fullmatch(r"https://[^\s/$.?#][^\s]*", url):
            raise m.error(key, f"{key} must be a public https:// address, not {url!r}")
        found[key] = url
    return {key: value for key, value in found.items() if value}


def _parse_policy(doc: Map, region: str) -> dict[str, Any]:
    defaults = {
        name: _model_default(Business, name)
        for name in (
            "first_response_minutes",
            "quiet_hours_start",
            "quiet_hours_end",
            "dedupe_window_days",
            "max_texts_per_day",
            "consent_max_age_days",
            "missed_call_text_back",
            "missed_call_text_back_window_hours",
            "line_type_lookup",
            "sla_reassign_on_breach",
            "estimate_follow_up_days",
            "brief_hour",
            "raw_retention_days",
        )
    }
    if not doc.has("policy"):
        # No policy section: an existing business keeps its policy; a new one gets the defaults.
        return {}
    m = Map(
        doc.raw("policy"),
        doc.line_of("policy"),
        "policy",
        optional=(
            "first_response_minutes",
            "quiet_hours",
            "dedupe_window_days",
            "max_texts_per_day",
            "consent_max_age_days",
            "missed_call_text_back",
            "missed_call_text_back_window_hours",
            "line_type_lookup",
            "quiet_hours_by_state",
            "business_hours",
            "sla_reassign_on_breach",
            "fit_rules",
            "scope_keywords",
            "estimate_follow_up_days",
            "brief_hour",
            "contact_countries",
            "captcha",
            "embed_origins",
            "raw_retention_days",
            "sms_health",
            "reviews",
        ),
    )
    fields = {
        "first_response_minutes": m.integer("first_response_minutes", defaults["first_response_minutes"], minimum=1),
        "dedupe_window_days": m.integer("dedupe_window_days", defaults["dedupe_window_days"]),
        "max_texts_per_day": m.integer("max_texts_per_day", defaults["max_texts_per_day"]),
        "quiet_hours_start": defaults["quiet_hours_start"],
        "quiet_hours_end": defaults["quiet_hours_end"],
        "consent_max_age_days": m.integer("consent_max_age_days", defaults["consent_max_age_days"], minimum=1),
        "missed_call_text_back": m.boolean("missed_call_text_back", defaults["missed_call_text_back"]),
        "missed_call_text_back_window_hours": m.integer(
            "missed_call_text_back_window_hours", defaults["missed_call_text_back_window_hours"], minimum=1
        ),
        "line_type_lookup": m.boolean("line_type_lookup", defaults["line_type_lookup"]),
        "quiet_hours_by_state": _state_windows(m),
        "business_hours": _parse_hours(m, "business_hours"),
        "sla_reassign_on_breach": m.boolean("sla_reassign_on_breach", defaults["sla_reassign_on_breach"]),
        "fit_rules": _fit_rules(m),
        "scope_keywords": _scope_keywords(m),
        "estimate_follow_up_days": m.integer("estimate_follow_up_days", defaults["estimate_follow_up_days"], minimum=1),
        "brief_hour": m.integer("brief_hour", defaults["brief_hour"]),
        "contact_countries": _contact_countries(m, region),
        "captcha_required": m.boolean("captcha", False),
        "embed_origins": _embed_origins(m),
        "raw_retention_days": m.integer("raw_retention_days", defaults["raw_retention_days"], minimum=1),
        "sms_health": _sms_health(m),
        "reviews": _reviews(m),
    }
    if not 0 <= fields["brief_hour"] <= 23:
        raise m.error("brief_hour", f"brief_hour must be an hour from 0 to 23, not {fields['brief_hour']}")
    if m.has("quiet_hours"):
        # May wrap midnight, so only an empty range is refused.
        fields["quiet_hours_start"], fields["quiet_hours_end"] = m.time_range(
            "quiet_hours", ordered=False, to_midnight=True
        )
    return fields


# An origin a browser sends: scheme, host (a leading "*." allowed, as CSP
# allows) and an optional port; nothing that could end the CSP directive.


def _contact_countries(m: Map, region: str) -> list[str]:
    """[US, CA]: the countries whose numbers may be texted or called; left out: the region only."""
    countries = []
    for ref in m.texts("contact_countries"):
        code = ref.name.upper()
        if code not in phonenumbers.SUPPORTED_REGIONS:
            raise BusinessFileError(ref.line, f"bad country {ref.name!r} in contact_countries (a code like US or CA)")
        if code not in countries:
            countries.append(code)
    # The region alone is the default: store it as "the default" so a changed region follows.
    return [] if countries == [region] else countries


def _embed_origins(m: Map) -> list[str]:
    """["https://acme.example"]: the sites that may frame the hosted form
    (crm.validation.origin_refusal: the admin's rule too)."""
    origins = []
    for ref in m.texts("embed_origins"):
        refusal = origin_refusal(ref.name.lower())
        if refusal:
            raise BusinessFileError(ref.line, f"bad origin {ref.name!r} in embed_origins: {refusal}")
        origins.append(ref.name.lower().rstrip("/"))
    return origins


def _parse_notifications(doc: Map) -> dict[str, Any]:
    """notifications: {slack_webhook_url: ...}: where this business's alerts and notices go."""
    if not doc.has("notifications"):
        return {}  # left as it is
    m = Map(doc.raw("notifications"), doc.line_of("notifications"), "notifications", optional=("slack_webhook_url",))
    url = m.text("slack_webhook_url", "")
    if url and not re.fullmatch(r"https?://[^\s]+", url):
        raise m.error("slack_webhook_url", f"slack_webhook_url must be an http(s) URL, not {url!r}")
    return {"slack_webhook_url": url}


# The intents a model's reply may answer without a person (`ai: {auto_reply: [...]}`).
# Never a revocation, a complaint, a wrong number or spam: those keep their
# own paths, and a person answers what needs answering.


def _parse_ai(doc: Map) -> dict[str, Any]:
    """ai: {enabled, monthly_calls, auto_reply, receptionist}: this
    business's use of the server's language model (LLM_PROVIDER) and of the
    after-hours receptionist (which works with the rules alone); left out: as
    it is (a new business: enabled, no cap, no auto-reply, no receptionist)."""
    if not doc.has("ai"):
        return {}
    m = Map(doc.raw("ai"), doc.line_of("ai"), "ai", optional=("enabled", "monthly_calls", "auto_reply", "receptionist"))
    intents: list[str] = []
    for ref in m.texts("auto_reply"):
        if ref.name not in AUTO_REPLY_INTENTS:
            raise BusinessFileError(
                ref.line,
                f"bad intent {ref.name!r} in ai auto_reply (one of {', '.join(AUTO_REPLY_INTENTS)}; "
                "revocations, complaints, wrong numbers and spam are never answered by a model)",
            )
        if ref.name not in intents:
            intents.append(ref.name)
    return {
        "ai_enabled": m.boolean("enabled", True),
        "ai_monthly_calls": m.integer("monthly_calls", None),
        "ai_auto_reply": intents,
        "ai_receptionist": m.boolean("receptionist", False),
    }


def _parse_playbook(doc: Map, currency: str) -> dict[str, Any]:
    """playbook: {booking_url, prices: [{item, amount, note}], facts: [...]}:
    what a drafted reply may state besides the records (services, areas,
    hours). Approved by whoever writes the file, as its templates are; a
    price is stated only where it is listed here."""
    if not doc.has("playbook"):
        return {}
    m = Map(doc.raw("playbook"), doc.line_of("playbook"), "playbook", optional=("booking_url", "prices", "facts"))
    playbook: dict[str, Any] = {}
    url = m.text("booking_url", "")
    if url:
        if refusal := booking_url_refusal(url):
            raise m.error("booking_url", refusal)
        playbook["booking_url"] = url
    prices = []
    for raw, line in m.items("prices"):
        price = Map(raw, line, "playbook price", required=("item", "amount"), optional=("note",))
        amount = _amount(price, "amount", "playbook price")
        prices.append(
            {"item": _fact_text(price, "item"), "amount": f"{amount}", "currency": currency}
            | ({"note": _fact_text(price, "note")} if price.has("note") else {})
        )
    if prices:
        playbook["prices"] = prices
    facts = []
    for ref in m.texts("facts"):
        if len(ref.name) > FACT_MAX_LENGTH:
            raise BusinessFileError(ref.line, f"a playbook fact is at most {FACT_MAX_LENGTH} characters")
        facts.append(ref.name)
    if facts:
        playbook["facts"] = facts
    return {"playbook": playbook}


# How a recorded call is transcribed: not at all, or by the server's speech
# to text (STT_*, agents/ai/speech.py).
CALL_TRANSCRIPTION = ("off", "model")


def _parse_calls(doc: Map) -> dict[str, Any]:
    """calls: {record, transcription, states}: whether forwarded calls are
    recorded, how a recording is transcribed (off or model), and the US
    states the business operates in (for the recording-consent announcement:
    left out, every recorded call is announced). Left out: as it is (a new
    business: not recorded)."""
    if not doc.has("calls"):
        return {}
    m = Map(doc.raw("calls"), doc.line_of("calls"), "calls", optional=("record", "transcription", "states"))
    # YAML reads a bare `off` as false.
    transcription = "off" if m.raw("transcription") is False else m.text("transcription", "off")
    if transcription not in CALL_TRANSCRIPTION:
        raise m.error(
            "transcription", f"bad transcription {transcription!r} in calls (one of {', '.join(CALL_TRANSCRIPTION)})"
        )
    states: list[str] = []
    for ref in m.texts("states"):
        code = ref.name.strip().upper()
        if code not in STATE_CODES:
            raise BusinessFileError(ref.line, f"{ref.name!r} in calls states is not a two-letter US state code")
        if code not in states:
            states.append(code)
    return {
        "call_recording": m.boolean("record", False),
        "call_transcription": transcription,
        "call_states": states,
    }


def _fact_text(m: Map, key: str) -> str:
    value = m.text(key)
    if len(value) > FACT_MAX_LENGTH:
        raise m.error(key, f"{key!r} in {m.what} is at most {FACT_MAX_LENGTH} characters")
    return value


def _amount(m: Map, key: str, what: str) -> Decimal:
    """A money amount: at least 0, at most two decimals."""
    raw = m.raw(key)
    try:
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            raise InvalidOperation
        amount = Decimal(str(raw).strip())
    except InvalidOperation as exc:
        raise m.error(key, f"{key!r} in {what} must be an amount, not {kind_of(raw)}") from exc
    if not amount.is_finite() or amount < 0 or amount != amount.quantize(Decimal("0.01")):
        raise m.error(key, f"{key!r} in {what} must be an amount of at least 0 with at most 2 decimals, not {raw!r}")
    return amount.quantize(Decimal("0.01"))


def _fit_rules(m: Map) -> list[dict[str, Any]]:
    """[{rule: in_area, points: 30}, ...]: the business's own scoring; empty keeps the built-in one."""
    rules = []
    for raw, line in m.items("fit_rules"):
        rule = Map(raw, line, "fit rule", required=("rule", "points"))
        name = rule.choice("rule", FIT_RULES, "fit rule")
        points = rule.raw("points")
        if isinstance(points, bool) or not isinstance(points, int):
            raise rule.error("points", f"points of fit rule {name} must be a whole number, not {kind_of(points)}")
        rules.append({"rule": name, "points": points})
    return rules


def _scope_keywords(m: Map) -> dict[str, list[str]]:
    """{emergency: [...], commercial: [...]}: words added to the built-in scope words."""
    if not m.has("scope_keywords"):
        return {}
    words = Map(m.raw("scope_keywords"), m.line_of("scope_keywords"), "scope_keywords", optional=SCOPE_FLAGS)
    return {flag: [ref.name for ref in words.texts(flag)] for flag in SCOPE_FLAGS if words.has(flag)}


SMS_HEALTH_KEYS = ("opt_outs_per_100", "filtered_percent", "min_sends")


def _sms_health(m: Map) -> dict[str, float]:
    """{opt_outs_per_100: 1, filtered_percent: 2, min_sends: 20}: the limits
    past which a sequence's texts pause it; each left out keeps its default."""
    if not m.has("sms_health"):
        return {}
    health = Map(m.raw("sms_health"), m.line, "policy.sms_health", optional=SMS_HEALTH_KEYS)
    found: dict[str, float] = {}
    for key in SMS_HEALTH_KEYS:
        value = health.raw(key)
        if value is MISSING:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise health.error(key, f"{key} must be a number above 0, not {value!r}")
        found[key] = float(value)
    return found


REVIEW_AFTER = ("paid", "completed", "off")


def _reviews(m: Map) -> dict[str, Any]:
    """{after: paid, delay_hours: 2, google_place_id: ChIJ…, url: https://…}:
    when a customer is asked for a review. No link (neither a place id nor a
    URL) asks no one; `after: off` switches the requests off and keeps the link."""
    if not m.has("reviews"):
        return {}
    reviews = Map(
        m.raw("reviews"),
        m.line_of("reviews"),
        "policy.reviews",
        optional=("after", "delay_hours", "google_place_id", "url"),
    )
    found: dict[str, Any] = {
        "after": reviews.choice("after", REVIEW_AFTER, "moment") if reviews.has("after") else "paid"
    }
    found["delay_hours"] = reviews.integer("delay_hours", 2)
    place = reviews.text("google_place_id")
    if place and not re.fullmatch(r"[A-Za-z0-9_-]{10,300}", place):
        raise reviews.error("google_place_id", f"google_place_id must be a Google place id (ChIJ…), not {place!r}")
    url = reviews.text("url")
    if url and not re.fullmatch(r"https://[^\s/$.?#][^\s]*", url):
        raise reviews.error("url", f"url must be a public https:// address, not {url!r}")
    found.update({key: value for key, value in (("google_place_id", place), ("url", url)) if value})
    return found


def _state_windows(m: Map) -> dict[str, str]:
    """{"FL": "08:00-20:00"}: stricter local windows for recipients in a US state."""
    if not m.has("quiet_hours_by_state"):
        return {}
    raw = m.raw("quiet_hours_by_state")
    if refusal := policy_refusals({"quiet_hours_by_state": raw}).get("quiet_hours_by_state"):
        raise m.error("quiet_hours_by_state", refusal)
    return dict(raw)


def _parse_source(item: ItemMap, region: str) -> SourceRow:
    m = item.read(required=("key", "provider"), any_other=True)
    provider = m.choice("provider", Provider.values, "provider")
    config: dict[str, Any] = {}
    for key in m.data:
        if key in ("key", "provider", "secret", "access_token", "auth_token", "first_response_minutes"):
            continue
        value = m.raw(key)
        if value is MISSING:
            raise m.error(key, f"{key!r} in source is empty")
        if key in SOURCE_PHONE_KEYS:
            value = m.phone(key, region)
        elif provider == Provider.TWILIO and key in TWILIO_SIDS:
            value = m.text(key)
            if not TWILIO_SIDS[key].fullmatch(value):
                prefix = "AC" if key == "account_sid" else "MG"
                raise m.error(
                    key, f"bad {key} {value!r} in source ({prefix} and 32 hex digits, from the Twilio console)"
                )
        else:
            _check_jsonable(value, m.line_of(key), f"{key!r} in source")
        config[key] = plain(value)
    fields = {
        "provider": provider,
        "config": config,
        # This source's own first-response standard; none: the business's.
        "first_response_minutes": m.integer("first_response_minutes", None, minimum=1),
    }
    # Secrets are written only when the file names them, so one set in the
    # admin (and kept out of the file) survives the next load. Both are
    # encrypted by their fields (crm.fields).
    if m.has("secret"):
        fields["secret"] = m.text("secret")
    if m.has("access_token"):
        fields["page_token"] = m.text("access_token")
    if m.has("auth_token"):
        # A twilio source's own account: its auth token is the source's secret,
        # and is useless without the account it belongs to.
        if provider != Provider.TWILIO:
            raise m.error("auth_token", "'auth_token' is for twilio sources (others take 'secret')")
        if m.has("secret"):
            raise m.error("auth_token", "a twilio source takes 'auth_token' or 'secret', not both")
        if "account_sid" not in config:
            raise m.error("auth_token", "'auth_token' in source needs the 'account_sid' it belongs to")
        fields["secret"] = m.text("auth_token")
    return SourceRow(line=m.line, key=m.slug("key"), fields=fields, key_lines=dict(m.data.lines))


def _check_jsonable(value: Any, line: int, what: str) -> None:
    if isinstance(value, dict):
        for v in value.values():
            _check_jsonable(v, line, what)
    elif isinstance(value, list):
        for v in value:
            _check_jsonable(v, line, what)
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise BusinessFileError(
            line, f"{what} must be text, a number, true/false, a list or a mapping, not {kind_of(value)} (quote it)"
        )


def _parse_service_line(item: ItemMap, spec: BusinessSpec) -> Row:
    m = item.read(
        required=("slug", "name"), optional=("keywords", "high_value", "currency", "offer", "offer_templates")
    )
    high_value: Decimal | None = None
    if m.has("high_value"):
        raw = m.raw("high_value")
        try:
            if isinstance(raw, bool) or not isinstance(raw, int | float | str):
                raise InvalidOperation
            high_value = Decimal(str(raw).strip())
        except InvalidOperation as exc:
            raise m.error("high_value", f"'high_value' in service line must be an amount, not {kind_of(raw)}") from exc
        if not high_value.is_finite() or high_value < 0 or high_value != high_value.quantize(Decimal("0.01")):
            raise m.error(
                "high_value",
                f"'high_value' in service line must be an amount of at least 0 with at most 2 decimals, not {raw!r}",
            )
        high_value = high_value.quantize(Decimal("0.01"))
    currency = m.text("currency", spec.fields["currency"]).upper()
    fields = {
        "name": m.text("name"),
        "keywords": [ref.name for ref in m.texts("keywords")],
        "high_value_amount": high_value,
        "currency": currency,
        "offer": m.text("offer"),
        "offer_templates": [ref.name for ref in m.texts("offer_templates")],
    }
    return Row(line=m.line, key=m.slug("slug"), fields=fields)


def _parse_service_area(item: ItemMap) -> Row:
    m = item.read(required=("name",), optional=("postal_codes",))
    codes = []
    for ref in m.texts("postal_codes"):
        if "*" in ref.name[:-1]:
            raise BusinessFileError(ref.line, f"postal code {ref.name!r}: '*' may only end a prefix, like \"606*\"")
        codes.append(ref.name)
    return Row(line=m.line, key=m.text("name"), fields={"postal_codes": codes})


def _parse_template(item: ItemMap) -> Row:
    m = item.read(required=("key", "channel", "body"), optional=("approved", "subject"))
    fields = {
        "channel": m.choice("channel", TEMPLATE_CHANNELS, "channel"),
        "body": m.text("body"),
        "approved": m.boolean("approved", False),
        "subject": m.text("subject"),
    }
    return Row(line=m.line, key=m.slug("key"), fields=fields)


def _parse_sequence(item: ItemMap) -> SequenceRow:
    m = item.read(required=("key", "trigger", "steps"), optional=("priority", "active", "goal_stages"))
    steps: list[dict[str, Any]] = []
    templates: list[tuple[Ref, str]] = []
    for step_value, line in m.items("steps", non_empty=True):
        step = Map(
            step_value, line, "sequence step", required=("after", "channel"), optional=("template", "title", "clock")
        )
        after = step.text("after")
        if Sequence.step_delay(after) is None:
            raise step.error("after", f"bad 'after' {after!r} in sequence step (like 15m, 2h or 1d)")
        channel = step.choice("channel", STEP_CHANNELS, "channel")
        stored: dict[str, Any] = {"after": after, "channel": channel}
        # absolute (the default): plain time; business: only the business's open hours and days count.
        if step.has("clock"):
            stored["clock"] = step.choice("clock", STEP_CLOCKS, "clock")
        if channel == "task":
            stored["title"] = step.text("title")
            if not stored["title"]:
                raise step.error("title", "missing key 'title' in sequence step (a task step needs one)")
        else:
            if not step.has("template"):
                raise step.error("template", f"missing key 'template' in sequence step (a {channel} step needs one)")
            template = step.slug("template")
            stored["template"] = template
            templates.append((Ref(template, step.line_of("template")), channel))
            if step.has("title"):
                stored["title"] = step.text("title")
        steps.append(stored)
    fields = {
        "trigger": m.choice("trigger", SEQUENCE_TRIGGERS, "trigger"),
        "steps": steps,
        "priority": m.integer("priority", _model_default(Sequence, "priority")),
        "is_active": m.boolean("active", True),
        "goal_stages": _goal_stages(m),
    }
    return SequenceRow(line=m.line, key=m.slug("key"), fields=fields, templates=templates)


def _goal_stages(m: Map) -> list[str]:
    stages = []
    for ref in m.texts("goal_stages"):
        if ref.name not in Stage.values:
            known = ", ".join(Stage.values)
            raise BusinessFileError(ref.line, f"bad stage {ref.name!r} in goal_stages (one of {known})")
        stages.append(ref.name)
    return stages


def _parse_member(item: ItemMap, region: str) -> MemberRow:
    m = item.read(
        required=("username", "role"),
        optional=(
            "name",
            "email",
            "phone",
            "service_lines",
            "service_areas",
            "weight",
            "max_open_leads",
            "hours",
            "timezone",
        ),
    )
    username = m.text("username")
    try:
        UnicodeUsernameValidator()(username)
    except ValidationError as exc:
        raise m.error("username", f"bad username {username!r} (letters, digits and @.+-_ only)") from exc
    email = ""
    if m.has("email"):
        email = email_normalize(m.text("email"))
        try:
            validate_email(email)
        except ValidationError as exc:
            raise m.error("email", f"bad email {email!r} in team member") from exc
    fields = {
        "role": m.choice("role", Role.values, "role"),
        "display_name": m.text("name"),
        "email": email,
        "phone": m.phone("phone", region) if m.has("phone") else "",
        "timezone": m.zone("timezone") if m.has("timezone") else "",
        "weight": m.integer("weight", _model_default(TeamMember, "weight")),
        "max_open_leads": m.integer("max_open_leads", None),
        "hours": _parse_hours(m),
    }
    return MemberRow(
        line=m.line,
        key=username,
        fields=fields,
        email=email,
        service_lines=m.texts("service_lines"),
        service_areas=m.texts("service_areas"),
    )


def _parse_hours(member: Map, key: str = "hours") -> dict[str, str]:
    if not member.has(key):
        return {}
    m = Map(member.raw(key), member.line_of(key), key, optional=DAYS)
    hours = {}
    for day in DAYS:
        if m.has(day):
            m.time_range(day, to_midnight=True)
            hours[day] = m.text(day)
    return hours


def _parse_webhook(item: ItemMap) -> WebhookRow:
    """{url, events: [payment.recorded, …] or ["*"], secret: whsec_…}: where
    the business's events go. The URL's address check needs the network and
    is made when the file is applied; the secret is written only when the
    file names it (one set in the admin survives the next load)."""
    m = item.read(required=("url", "events"), optional=("secret", "description"))
    url = m.text("url")
    if not re.fullmatch(r"https?://[^\s]+", url):
        raise m.error("url", f"url in webhook must be an http(s) URL, not {url!r}")
    events = [ref.name for ref in m.texts("events", non_empty=True)]
    secret = m.text("secret") if m.has("secret") else None
    try:
        events = webhook_events_check(events)
    except WebhookRefused as exc:
        raise m.error("events", f"{exc} in webhook") from exc
    try:
        if secret is not None:
            webhook_secret_check(secret)
    except WebhookRefused as exc:
        raise m.error("secret", f"{exc} (the secret in webhook {url})") from exc
    fields: dict[str, Any] = {"events": events}
    if m.has("description"):
        fields["description"] = m.text("description")
    return WebhookRow(line=m.line, key=url, fields=fields, secret=secret, key_lines=dict(m.data.lines))


GOOGLE_SECRETS = ("developer_token", "client_id", "client_secret", "refresh_token")
_CUSTOMER_ID = re.compile(r"\d{3}-?\d{3}-?\d{4}")
_ACTION = re.compile(r"customers/\d+/conversionActions/\d+")


def _parse_conversions(doc: Map) -> list[ConversionRow]:
    """conversions: {google: {...}, meta: {...}}: where the business's
    conversion moments go. A platform the file leaves out is left as it is."""
    if not doc.has("conversions"):
        return []
    m = Map(
        doc.raw("conversions"), doc.line_of("conversions"), "conversions", optional=tuple(ConversionPlatform.values)
    )
    rows = []
    if m.has("google"):
        rows.append(_parse_google(Map(m.raw("google"), m.line_of("google"), "conversions.google", **_GOOGLE_KEYS)))
    if m.has("meta"):
        rows.append(_parse_meta(Map(m.raw("meta"), m.line_of("meta"), "conversions.meta", **_META_KEYS)))
    return rows


_GOOGLE_KEYS: dict[str, Any] = {
    "required": ("customer_id", "actions"),
    "optional": ("api", "login_customer_id", "timezone", "enhanced_conversions", "active", *GOOGLE_SECRETS),
}
_META_KEYS: dict[str, Any] = {
    "required": ("dataset_id", "events"),
    "optional": ("access_token", "active", "ad_account_id"),
}


def _customer_id(m: Map, key: str) -> str:
    value = m.raw(key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
        m.data[key] = value
    text = m.text(key)
    if not _CUSTOMER_ID.fullmatch(text):
        raise m.error(key, f"{key!r} in {m.what} must be a Google Ads customer id like 123-456-7890, not {text!r}")
    return text.replace("-", "")


def _kind_map(m: Map, key: str, check: Any) -> dict[str, str]:
    names = Map(m.raw(key), m.line_of(key), f"{key!r} in {m.what}", optional=tuple(MAPPED_KINDS))
    mapped: dict[str, str] = {str(kind): check(names, kind) for kind in MAPPED_KINDS if names.has(kind)}
    if not mapped:
        raise m.error(key, f"{key!r} in {m.what} maps no moment (one or more of {', '.join(MAPPED_KINDS)})")
    return mapped


def _parse_google(m: Map) -> ConversionRow:
    def action(names: Map, kind: str) -> str:
        value = names.text(kind)
        if not _ACTION.fullmatch(value):
            raise names.error(
                kind, f"{kind!r} must be a conversion action like customers/1234567890/conversionActions/111"
            )
        return value

    config: dict[str, Any] = {
        "customer_id": _customer_id(m, "customer_id"),
        "actions": _kind_map(m, "actions", action),
        "enhanced_conversions": m.boolean("enhanced_conversions", False),
    }
    if m.has("api"):
        # Left out, the applier decides: a new account gets data_manager, an
        # existing one keeps its API (crm.services.conversions.account_config_defaults).
        api = m.text("api")
        if api not in GOOGLE_APIS:
            raise m.error("api", f"'api' in {m.what} is one of {', '.join(GOOGLE_APIS)}, not {api!r}")
        config["api"] = api
    if m.has("login_customer_id"):
        config["login_customer_id"] = _customer_id(m, "login_customer_id")
    if m.has("timezone"):
        config["timezone"] = m.zone("timezone")
    secrets = {name: m.text(name) for name in GOOGLE_SECRETS if m.has(name)}
    return ConversionRow(
        line=m.line, key="google", fields={"config": config, "is_active": m.boolean("active", True)}, secrets=secrets
    )


def _parse_meta(m: Map) -> ConversionRow:
    raw = m.raw("dataset_id")
    dataset = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else m.text("dataset_id")
    if not dataset.isdigit():
        raise m.error("dataset_id", f"'dataset_id' in {m.what} is Meta's dataset (pixel) id, digits only: {dataset!r}")
    config = {"dataset_id": dataset, "events": _kind_map(m, "events", lambda names, kind: names.text(kind)[:100])}
    if m.has("ad_account_id"):
        # The ad account whose daily spend is read (agents.conversions.spend_meta):
        # a dataset says nothing of the account that pays for the ads.
        raw = m.raw("ad_account_id")
        account = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else m.text("ad_account_id")
        account = account.removeprefix("act_")
        if not account.isdigit():
            raise m.error(
                "ad_account_id", f"'ad_account_id' in {m.what} is Meta's ad account id (act_ and digits): {account!r}"
            )
        config["ad_account_id"] = account
    secrets = {"access_token": m.text("access_token")} if m.has("access_token") else {}
    return ConversionRow(
        line=m.line, key="meta", fields={"config": config, "is_active": m.boolean("active", True)}, secrets=secrets
    )


def _parse_availability(value: Any, line: int) -> AvailabilityRule:
    m = Map(
        value, line, "availability rule", required=("members", "days", "slots"), optional=("capacity", "service_lines")
    )
    days = []
    for ref in m.texts("days", non_empty=True):
        if ref.name not in DAYS:
            raise BusinessFileError(ref.line, f"bad day {ref.name!r} in availability rule (one of {', '.join(DAYS)})")
        days.append(ref.name)
    slots = [time_range(ref.name, ref.line, "slot in availability rule") for ref in m.texts("slots", non_empty=True)]
    capacity = m.integer("capacity", 1, minimum=1)
    assert capacity is not None
    return AvailabilityRule(
        line=m.line,
        members=m.texts("members", non_empty=True),
        days=days,
        slots=slots,
        capacity=capacity,
        service_lines=m.texts("service_lines"),
    )


def _model_default(model: type[models.Model], name: str) -> Any:
    model_field = model._meta.get_field(name)
    assert isinstance(model_field, models.Field)
    return model_field.to_python(model_field.get_default())
