"""Loading one business from its YAML file (demo/acme-hvac.yaml shows every key).

`business_file_load` is the entry point. It guarantees:

- Everything is read and checked before anything is kept: the YAML is parsed
  with the line of every key and list item remembered, so each refusal names
  the line and the reason (`line 7: unknown key 'colour' in team member`).
- The whole load is one transaction. Any error (a bad value, an unknown key,
  a reference to something neither the file nor the business has) rolls
  everything back: nothing is written, not even a new user.
- It is idempotent. Each row is compared with what the file asks for and only
  changed fields are saved; an unchanged row is not touched (its `updated_at`
  stays put). When anything changed, one receipt (`business.loaded`) records
  the counts; a run that changes nothing writes no receipt.
- The file is authoritative for the rows it lists (an optional key left out
  means the model's default), and silent about the rest: rows and sections
  the file does not mention (a source, a team member, the whole `policy`)
  are left as they are, never deleted or reset.

`availability` rules (members on the team, days, slots, capacity, optional
service lines) are stored as `Availability` rows. A rule is known by its
members, days and slots; its capacity and lines are updated in place. When
the file has an `availability` section it is authoritative for the
business's rules: a rule no longer listed is switched off (`is_active`),
never deleted, because booked appointments point at it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, time
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import phonenumbers
import yaml
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email, validate_slug
from django.db import connection, models, transaction

from crm.models import (
    DAYS,
    Availability,
    Business,
    MessageTemplate,
    Provider,
    Role,
    Sequence,
    ServiceArea,
    ServiceLine,
    Source,
    Stage,
    TeamMember,
)
from crm.phones import email_normalize, phone_to_e164
from crm.services.contact_numbers import source_numbers_refusals
from crm.services.receipts import receipt_write

# A template is sent on a channel that reaches the person: every step channel but a task.
TEMPLATE_CHANNELS = tuple(c for c in Sequence.StepChannel.values if c != Sequence.StepChannel.TASK)
STEP_CHANNELS = tuple(Sequence.StepChannel.values)
SEQUENCE_TRIGGERS = tuple(Sequence.Trigger.values)
STEP_CLOCKS = tuple(Sequence.StepClock.values)
# Source settings that hold phone numbers: checked and stored as E.164.
SOURCE_PHONE_KEYS = ("phone_number", "forward_to")
# A twilio source's own account (or subaccount): the SIDs Twilio issues.
TWILIO_SIDS = {"account_sid": re.compile(r"AC[0-9a-f]{32}"), "messaging_service_sid": re.compile(r"MG[0-9a-f]{32}")}

_TIME_RANGE = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")
# Serializes loads of the same slug, so two concurrent runs cannot both create it.
_LOAD_LOCK_NAMESPACE = 4208


class BusinessFileError(Exception):
    """The file cannot be loaded; `line` is where (1-based), `reason` why."""

    def __init__(self, line: int | None, reason: str, path: str = "") -> None:
        super().__init__(line, reason)
        self.line, self.reason, self.path = line, reason, path

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{self.path}: {where}{self.reason}" if self.path else f"{where}{self.reason}"


# --- YAML with line numbers -------------------------------------------------


class LineDict(dict[str, Any]):
    """A mapping from the file that remembers its own line and each key's."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.lines: dict[str, int] = {}


class LineList(list[Any]):
    """A list from the file that remembers its own line and each item's."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line = line
        self.lines: list[int] = []


class _LineLoader(yaml.SafeLoader):
    """SafeLoader whose mappings and lists are LineDict and LineList."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    data = LineDict(node.start_mark.line + 1)
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        key = loader.construct_object(key_node, deep=True)
        # YAML 1.1 reads bare `on`, `yes`, `1` as booleans and numbers.
        if not isinstance(key, str):
            raise BusinessFileError(line, f"key {key!r} must be text (quote it)")
        if key in data:
            raise BusinessFileError(line, f"duplicate key {key!r} (first at line {data.lines[key]})")
        data[key] = loader.construct_object(value_node, deep=True)
        data.lines[key] = line
    return data


def _construct_sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> LineList:
    data = LineList(node.start_mark.line + 1)
    for child in node.value:
        data.append(loader.construct_object(child, deep=True))
        data.lines.append(child.start_mark.line + 1)
    return data


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)


def yaml_load_with_lines(text: str) -> Any:
    """Parse YAML safely; mappings and lists come back as LineDict/LineList."""
    try:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise BusinessFileError(mark.line + 1 if mark else None, f"not valid YAML: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise BusinessFileError(None, f"not valid YAML: {exc}") from exc


def _plain(value: Any) -> Any:
    """The same data as built-in dicts and lists, as a JSONField stores it."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# --- typed reading of one mapping ----------------------------------------------

_MISSING = object()


def _kind(value: Any) -> str:
    if value is None:
        return "empty"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, date):
        return "a date"
    return type(value).__name__


@dataclass(frozen=True)
class Ref:
    """A name the file refers to, and where."""

    name: str
    line: int


class _Map:
    """One mapping of the file with typed getters whose errors name the line.

    A key given as empty (`subject:`) counts as left out.
    """

    def __init__(
        self,
        value: Any,
        line: int,
        what: str,
        *,
        required: tuple[str, ...] = (),
        optional: tuple[str, ...] = (),
        any_other: bool = False,
    ) -> None:
        if not isinstance(value, LineDict):
            raise BusinessFileError(line, f"{what} must be a mapping, not {_kind(value)}")
        self.data, self.what, self.line = value, what, value.line
        allowed = {*required, *optional}
        if not any_other:
            for key in value:
                if key not in allowed:
                    raise BusinessFileError(value.lines[key], f"unknown key {key!r} in {what}")
        for key in required:
            if value.get(key) is None:
                raise BusinessFileError(self.line_of(key), f"missing key {key!r} in {what}")

    def line_of(self, key: str) -> int:
        return self.data.lines.get(key, self.data.line)

    def error(self, key: str, reason: str) -> BusinessFileError:
        return BusinessFileError(self.line_of(key), reason)

    def raw(self, key: str) -> Any:
        value = self.data.get(key)
        return _MISSING if value is None else value

    def has(self, key: str) -> bool:
        return self.raw(key) is not _MISSING

    def text(self, key: str, default: str = "") -> str:
        value = self.raw(key)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            raise self.error(key, f"{key!r} in {self.what} must be text, not {_kind(value)}")
        value = value.strip()
        if not value:
            raise self.error(key, f"{key!r} in {self.what} is empty")
        return value

    def slug(self, key: str) -> str:
        value = self.text(key)
        try:
            validate_slug(value)
        except ValidationError as exc:
            raise self.error(
                key, f"{key!r} in {self.what} must be a slug (letters, digits, - and _): {value!r}"
            ) from exc
        return value

    def integer(self, key: str, default: int | None, *, minimum: int = 0) -> int | None:
        value = self.raw(key)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"{key!r} in {self.what} must be a whole number, not {_kind(value)}")
        if value < minimum:
            raise self.error(key, f"{key!r} in {self.what} must be at least {minimum}, not {value}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"{key!r} in {self.what} must be true or false, not {_kind(value)}")
        return value

    def choice(self, key: str, choices: tuple[str, ...] | list[str], label: str) -> str:
        value = self.text(key)
        if value not in choices:
            raise self.error(key, f"bad {label} {value!r} in {self.what} (one of {', '.join(choices)})")
        return value

    def items(self, key: str, *, non_empty: bool = False) -> list[tuple[Any, int]]:
        """The list under `key` as (item, line) pairs."""
        value = self.raw(key)
        if value is _MISSING:
            if non_empty:
                raise self.error(key, f"missing key {key!r} in {self.what}")
            return []
        if not isinstance(value, LineList):
            raise self.error(key, f"{key!r} in {self.what} must be a list, not {_kind(value)}")
        if non_empty and not value:
            raise self.error(key, f"{key!r} in {self.what} is empty")
        return list(zip(value, value.lines, strict=True))

    def texts(self, key: str, *, non_empty: bool = False) -> list[Ref]:
        refs = []
        for item, line in self.items(key, non_empty=non_empty):
            if not isinstance(item, str) or not item.strip():
                hint = " (quote it)" if isinstance(item, int | float) else ""
                raise BusinessFileError(line, f"each of {key!r} in {self.what} must be text, not {_kind(item)}{hint}")
            refs.append(Ref(item.strip(), line))
        return refs

    def zone(self, key: str) -> str:
        value = self.text(key)
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise self.error(
                key, f"bad time zone {value!r} in {self.what} (an IANA name like America/Chicago)"
            ) from exc
        return value

    def phone(self, key: str, region: str) -> str:
        value = self.raw(key)
        if isinstance(value, int) and not isinstance(value, bool):
            raise self.error(key, f"{key!r} in {self.what} must be text: quote the phone number")
        raw = self.text(key)
        e164 = phone_to_e164(raw, region)
        if e164 is None:
            raise self.error(key, f"bad phone {raw!r} in {self.what}: not a possible phone number")
        return e164

    def time_range(self, key: str, *, ordered: bool = True) -> tuple[time, time]:
        return _time_range(self.text(key), self.line_of(key), f"{key!r} in {self.what}", ordered=ordered)


def _time_range(value: Any, line: int, what: str, *, ordered: bool = True) -> tuple[time, time]:
    match = _TIME_RANGE.match(value) if isinstance(value, str) else None
    if not match:
        raise BusinessFileError(line, f'{what} must be a time range like "08:00-18:00", not {value!r}')
    start = time(int(match[1]), int(match[2]))
    end = time(int(match[3]), int(match[4]))
    if (ordered and start >= end) or start == end:
        raise BusinessFileError(line, f"{what}: the range {value!r} must end after it starts")
    return start, end


def _model_default(model: type[models.Model], name: str) -> Any:
    model_field = model._meta.get_field(name)
    assert isinstance(model_field, models.Field)
    return model_field.to_python(model_field.get_default())


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
    doc = _Map(loaded, 1, "the file", required=("business",), optional=_SECTIONS)
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
    return spec


def _unique(doc: _Map, section: str, what: str, parse: Any) -> list[Any]:
    """Parse each item of a list section, refusing two with the same key."""
    rows: list[Row] = []
    seen: dict[str, int] = {}
    for item, line in doc.items(section):
        row = parse(_ItemMap(item, line, what))
        if row.key in seen:
            raise BusinessFileError(line, f"duplicate {what} {row.key!r} (first at line {seen[row.key]})")
        seen[row.key] = line
        rows.append(row)
    return rows


@dataclass
class _ItemMap:
    """A list item before its own keys are known to the section parser."""

    value: Any
    line: int
    what: str

    def read(self, **kwargs: Any) -> _Map:
        return _Map(self.value, self.line, self.what, **kwargs)


def _parse_business(doc: _Map, path: str) -> BusinessSpec:
    m = _Map(
        doc.raw("business"),
        doc.line_of("business"),
        "business",
        required=("slug", "name", "timezone"),
        optional=("region", "currency"),
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
        **_parse_policy(doc, region),
        **_parse_notifications(doc),
    }
    return BusinessSpec(path=path, slug=m.slug("slug"), line=m.line, fields=fields)


def _parse_policy(doc: _Map, region: str) -> dict[str, Any]:
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
            "sla_reassign_on_breach",
            "estimate_follow_up_days",
            "brief_hour",
            "raw_retention_days",
        )
    }
    if not doc.has("policy"):
        # No policy section: an existing business keeps its policy; a new one gets the defaults.
        return {}
    m = _Map(
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
    }
    if not 0 <= fields["brief_hour"] <= 23:
        raise m.error("brief_hour", f"brief_hour must be an hour from 0 to 23, not {fields['brief_hour']}")
    if m.has("quiet_hours"):
        # May wrap midnight, so only an empty range is refused.
        fields["quiet_hours_start"], fields["quiet_hours_end"] = m.time_range("quiet_hours", ordered=False)
    return fields


# An origin a browser sends: scheme, host (a leading "*." allowed, as CSP
# allows) and an optional port; nothing that could end the CSP directive.
_ORIGIN = re.compile(
    r"^https?://(\*\.)?[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(:\d{1,5})?$"
)


def _contact_countries(m: _Map, region: str) -> list[str]:
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


def _embed_origins(m: _Map) -> list[str]:
    """["https://acme.example"]: the sites that may frame the hosted form."""
    origins = []
    for ref in m.texts("embed_origins"):
        if not _ORIGIN.match(ref.name):
            raise BusinessFileError(
                ref.line, f"bad origin {ref.name!r} in embed_origins (like https://acme.example, no path)"
            )
        origins.append(ref.name.lower())
    return origins


def _parse_notifications(doc: _Map) -> dict[str, Any]:
    """notifications: {slack_webhook_url: ...}: where this business's alerts and notices go."""
    if not doc.has("notifications"):
        return {}  # left as it is
    m = _Map(doc.raw("notifications"), doc.line_of("notifications"), "notifications", optional=("slack_webhook_url",))
    url = m.text("slack_webhook_url", "")
    if url and not re.fullmatch(r"https?://[^\s]+", url):
        raise m.error("slack_webhook_url", f"slack_webhook_url must be an http(s) URL, not {url!r}")
    return {"slack_webhook_url": url}


# The ICP/fit scorer's rules (agents.fit.qualify applies them) and the scope flags.
FIT_RULES = (
    "in_area",
    "out_of_area",
    "service_matched",
    "has_phone",
    "has_email",
    "sms_consent",
    "paid_click",
    "emergency",
    "commercial",
    "warranty",
)
SCOPE_FLAGS = ("emergency", "commercial", "warranty", "licensed_diagnosis")


def _fit_rules(m: _Map) -> list[dict[str, Any]]:
    """[{rule: in_area, points: 30}, ...]: the business's own scoring; empty keeps the built-in one."""
    rules = []
    for raw, line in m.items("fit_rules"):
        rule = _Map(raw, line, "fit rule", required=("rule", "points"))
        name = rule.choice("rule", FIT_RULES, "fit rule")
        points = rule.raw("points")
        if isinstance(points, bool) or not isinstance(points, int):
            raise rule.error("points", f"points of fit rule {name} must be a whole number, not {_kind(points)}")
        rules.append({"rule": name, "points": points})
    return rules


def _scope_keywords(m: _Map) -> dict[str, list[str]]:
    """{emergency: [...], commercial: [...]}: words added to the built-in scope words."""
    if not m.has("scope_keywords"):
        return {}
    words = _Map(m.raw("scope_keywords"), m.line_of("scope_keywords"), "scope_keywords", optional=SCOPE_FLAGS)
    return {flag: [ref.name for ref in words.texts(flag)] for flag in SCOPE_FLAGS if words.has(flag)}


def _state_windows(m: _Map) -> dict[str, str]:
    """{"FL": "08:00-20:00"}: stricter local windows for recipients in a US state."""
    if not m.has("quiet_hours_by_state"):
        return {}
    raw = m.raw("quiet_hours_by_state")
    if not isinstance(raw, dict):
        raise m.error("quiet_hours_by_state", "quiet_hours_by_state must map a state code to HH:MM-HH:MM")
    windows = {}
    for state, window in raw.items():
        if not (isinstance(state, str) and re.fullmatch(r"[A-Z]{2}", state)):
            raise m.error("quiet_hours_by_state", f"{state!r} is not a two-letter US state code")
        if not (isinstance(window, str) and re.fullmatch(r"\d\d:\d\d-\d\d:\d\d", window)):
            raise m.error("quiet_hours_by_state", f"{window!r} for {state} is not HH:MM-HH:MM")
        windows[state] = window
    return windows


def _parse_source(item: _ItemMap, region: str) -> SourceRow:
    m = item.read(required=("key", "provider"), any_other=True)
    provider = m.choice("provider", Provider.values, "provider")
    config: dict[str, Any] = {}
    for key in m.data:
        if key in ("key", "provider", "secret", "access_token", "auth_token", "first_response_minutes"):
            continue
        value = m.raw(key)
        if value is _MISSING:
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
        config[key] = _plain(value)
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
            line, f"{what} must be text, a number, true/false, a list or a mapping, not {_kind(value)} (quote it)"
        )


def _parse_service_line(item: _ItemMap, spec: BusinessSpec) -> Row:
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
            raise m.error("high_value", f"'high_value' in service line must be an amount, not {_kind(raw)}") from exc
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


def _parse_service_area(item: _ItemMap) -> Row:
    m = item.read(required=("name",), optional=("postal_codes",))
    codes = []
    for ref in m.texts("postal_codes"):
        if "*" in ref.name[:-1]:
            raise BusinessFileError(ref.line, f"postal code {ref.name!r}: '*' may only end a prefix, like \"606*\"")
        codes.append(ref.name)
    return Row(line=m.line, key=m.text("name"), fields={"postal_codes": codes})


def _parse_template(item: _ItemMap) -> Row:
    m = item.read(required=("key", "channel", "body"), optional=("approved", "subject"))
    fields = {
        "channel": m.choice("channel", TEMPLATE_CHANNELS, "channel"),
        "body": m.text("body"),
        "approved": m.boolean("approved", False),
        "subject": m.text("subject"),
    }
    return Row(line=m.line, key=m.slug("key"), fields=fields)


def _parse_sequence(item: _ItemMap) -> SequenceRow:
    m = item.read(required=("key", "trigger", "steps"), optional=("priority", "active", "goal_stages"))
    steps: list[dict[str, Any]] = []
    templates: list[tuple[Ref, str]] = []
    for step_value, line in m.items("steps", non_empty=True):
        step = _Map(
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


def _goal_stages(m: _Map) -> list[str]:
    stages = []
    for ref in m.texts("goal_stages"):
        if ref.name not in Stage.values:
            known = ", ".join(Stage.values)
            raise BusinessFileError(ref.line, f"bad stage {ref.name!r} in goal_stages (one of {known})")
        stages.append(ref.name)
    return stages


def _parse_member(item: _ItemMap, region: str) -> MemberRow:
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


def _parse_hours(member: _Map, key: str = "hours") -> dict[str, str]:
    if not member.has(key):
        return {}
    m = _Map(member.raw(key), member.line_of(key), key, optional=DAYS)
    hours = {}
    for day in DAYS:
        if m.has(day):
            m.time_range(day)
            hours[day] = m.text(day)
    return hours


def _parse_availability(value: Any, line: int) -> AvailabilityRule:
    m = _Map(
        value, line, "availability rule", required=("members", "days", "slots"), optional=("capacity", "service_lines")
    )
    days = []
    for ref in m.texts("days", non_empty=True):
        if ref.name not in DAYS:
            raise BusinessFileError(ref.line, f"bad day {ref.name!r} in availability rule (one of {', '.join(DAYS)})")
        days.append(ref.name)
    slots = [_time_range(ref.name, ref.line, "slot in availability rule") for ref in m.texts("slots", non_empty=True)]
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


# --- applying it ------------------------------------------------------------


@dataclass
class BusinessLoadResult:
    """What a load did: per kind of record, how many were created and updated."""

    business: Business
    path: str
    created: Counter[str] = field(default_factory=Counter)
    updated: Counter[str] = field(default_factory=Counter)
    # One line per created or changed record, naming changed fields (never values: secrets live here).
    changes: list[str] = field(default_factory=list)
    availability_rules: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def record(self, kind: str, key: str, *, created: bool, fields: list[str]) -> None:
        if created:
            self.created[kind] += 1
            self.changes.append(f"{kind} {key}: created")
        elif fields:
            self.updated[kind] += 1
            self.changes.append(f"{kind} {key}: {', '.join(fields)}")

    def summary(self) -> dict[str, Any]:
        return {
            "file": self.path,
            "created": dict(self.created),
            "updated": dict(self.updated),
            "changes": self.changes,
        }

    def report(self) -> list[str]:
        """Human-readable lines for the command's output."""
        slug = self.business.slug
        lines = []
        if not self.changed:
            lines.append(f"{slug}: nothing changed (the database already matches {self.path})")
        else:
            for label, counts in (("created", self.created), ("updated", self.updated)):
                if counts:
                    lines.append(
                        f"{slug}: {label} " + ", ".join(_plural(n, kind) for kind, n in sorted(counts.items()))
                    )
        lines.append(f"availability: {self.availability_rules} rules in the file")
        return lines


def _plural(n: int, kind: str) -> str:
    if n == 1:
        return f"1 {kind}"
    return f"{n} {kind}es" if kind.endswith("s") else f"{n} {kind}s"


def business_file_load(path: str | Path, *, actor: str = "load_business") -> BusinessLoadResult:
    """Read, check and apply one business file in one transaction.

    Raises BusinessFileError (naming the file, line and reason) and writes
    nothing when the file is unreadable or anything in it is refused.
    """
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BusinessFileError(None, f"cannot read the file: {exc}", name) from exc
    spec = business_file_parse(text, path=name)
    try:
        return business_spec_apply(spec, actor=actor)
    except BusinessFileError as exc:
        exc.path = name
        raise


@transaction.atomic
def business_spec_apply(spec: BusinessSpec, *, actor: str = "load_business") -> BusinessLoadResult:
    """Create or update the business and everything the spec lists.

    Owns one transaction; references to rows the business already had are
    checked here, and any refusal rolls the whole load back. Saves only the
    fields that differ and writes one `business.loaded` receipt if anything
    changed.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [_LOAD_LOCK_NAMESPACE, spec.slug])
    business, created, changed = _upsert(Business, {"slug": spec.slug}, spec.fields, spec.line)
    result = BusinessLoadResult(business=business, path=spec.path)
    result.record("business", spec.slug, created=created, fields=changed)

    for row in spec.sources:
        # Source keys appear in webhook URLs without a business, so they are unique overall.
        owner = (
            Source.objects.filter(key=row.key)
            .exclude(business=business)
            .values_list("business__slug", flat=True)
            .first()
        )
        if owner:
            raise BusinessFileError(row.line, f"source key {row.key!r} already belongs to business {owner!r}")
        _check_source_numbers(business, row)
        _apply_row(result, "source", Source, {"business": business, "key": row.key}, row)
    for row in spec.service_lines:
        _apply_row(result, "service line", ServiceLine, {"business": business, "slug": row.key}, row)
    for row in spec.service_areas:
        _apply_row(result, "service area", ServiceArea, {"business": business, "name": row.key}, row)
    for row in spec.templates:
        _apply_row(result, "template", MessageTemplate, {"business": business, "key": row.key}, row)

    template_channels = dict(MessageTemplate.objects.filter(business=business).values_list("key", "channel"))
    for sequence in spec.sequences:
        for ref, channel in sequence.templates:
            if ref.name not in template_channels:
                raise BusinessFileError(ref.line, f"unknown template {ref.name!r} in sequence {sequence.key!r}")
            if template_channels[ref.name] != channel:
                known = template_channels[ref.name]
                raise BusinessFileError(
                    ref.line, f"template {ref.name!r} is a {known} template, but the step sends {channel}"
                )
        _apply_row(result, "sequence", Sequence, {"business": business, "key": sequence.key}, sequence)

    _apply_team(result, business, spec.team)

    if spec.availability_given:
        _apply_availability(result, business, spec.availability)
    result.availability_rules = len(spec.availability)

    if result.changed:
        receipt_write(
            business=business,
            actor=actor,
            action="business.loaded",
            subject=business.public_id,
            reason=f"loaded from {spec.path}" if spec.path else "loaded from a business file",
            after=result.summary(),
        )
    return result


def _check_source_numbers(business: Business, row: Row) -> None:
    lines = row.key_lines if isinstance(row, SourceRow) else {}
    refusals = source_numbers_refusals(business, row.fields["provider"], row.fields["config"])
    for key, reason in refusals.items():
        raise BusinessFileError(lines.get(key, row.line), reason)


def _apply_row(
    result: BusinessLoadResult, kind: str, model: type[models.Model], lookup: dict[str, Any], row: Row
) -> None:
    _obj, created, changed = _upsert(model, lookup, row.fields, row.line)
    result.record(kind, row.key, created=created, fields=changed)


def _upsert(model: type[Any], lookup: dict[str, Any], fields: dict[str, Any], line: int) -> tuple[Any, bool, list[str]]:
    """Create the row, or save only the fields that differ (none: no write).

    Returns (row, created, names of the fields changed).
    """
    obj = model.objects.filter(**lookup).first()
    if obj is None:
        obj = model(**lookup, **fields)
        _clean(obj, line)
        obj.save()
        return obj, True, []
    changed = [name for name, value in fields.items() if getattr(obj, name) != value]
    if changed:
        for name in changed:
            setattr(obj, name, fields[name])
        _clean(obj, line)
        auto = [f.name for f in model._meta.concrete_fields if getattr(f, "auto_now", False)]
        obj.save(update_fields=[*changed, *auto])
    return obj, False, changed


def _clean(obj: models.Model, line: int) -> None:
    try:
        obj.full_clean()
    except ValidationError as exc:
        if hasattr(exc, "error_dict"):
            reason = "; ".join(f"{name}: {' '.join(msgs)}" for name, msgs in exc.message_dict.items())
        else:
            reason = " ".join(exc.messages)
        raise BusinessFileError(line, f"{obj._meta.verbose_name} refused: {reason}") from exc


def _apply_team(result: BusinessLoadResult, business: Business, team: list[MemberRow]) -> None:
    user_model = get_user_model()
    lines = {line.slug: line for line in ServiceLine.objects.filter(business=business)}
    areas = {area.name: area for area in ServiceArea.objects.filter(business=business)}
    groups = {group.name: group for group in Group.objects.filter(name__in=Role.values)}
    for row in team:
        wanted_lines = [_resolve(lines, ref, "service line", row.key) for ref in row.service_lines]
        wanted_areas = [_resolve(areas, ref, "service area", row.key) for ref in row.service_areas]
        user = user_model.objects.filter(username=row.key).first()
        if user is None:
            user = user_model(username=row.key, email=row.email)
            user.set_unusable_password()
            user.save()
            result.changes.append(f"user {row.key}: created")
        member, created, changed = _upsert(TeamMember, {"business": business, "user": user}, row.fields, row.line)
        if set(member.service_lines.all()) != set(wanted_lines):
            member.service_lines.set(wanted_lines)
            changed.append("service_lines")
        if set(member.service_areas.all()) != set(wanted_areas):
            member.service_areas.set(wanted_areas)
            changed.append("service_areas")
        # A user's role groups follow all their memberships, across businesses.
        roles = set(TeamMember.objects.filter(user=user).values_list("role", flat=True))
        missing = roles - set(groups)
        if missing:
            raise BusinessFileError(row.line, f"group {sorted(missing)[0]!r} does not exist: run `manage.py migrate`")
        held = set(user.groups.filter(name__in=Role.values).values_list("name", flat=True))
        if held != roles:
            user.groups.remove(*(groups[name] for name in held - roles))
            user.groups.add(*(groups[name] for name in roles - held))
            changed.append("groups")
        result.record("team member", row.key, created=created, fields=changed)


def _resolve(known: dict[str, Any], ref: Ref, what: str, member: str) -> Any:
    if ref.name not in known:
        raise BusinessFileError(ref.line, f"unknown {what} {ref.name!r} in team member {member!r}")
    return known[ref.name]


def _apply_availability(result: BusinessLoadResult, business: Business, rules: list[AvailabilityRule]) -> None:
    """Make the business's active rules the file's: match each by members,
    days and slots; update capacity and lines; switch off the rest."""
    members = {m.user.get_username(): m for m in TeamMember.objects.filter(business=business).select_related("user")}
    lines = {line.slug: line for line in ServiceLine.objects.filter(business=business)}
    existing = list(
        Availability.objects.filter(business=business).prefetch_related("members__user", "service_lines").order_by("pk")
    )

    def identity(usernames: list[str], days: list[str], slots: list[str]) -> tuple[Any, ...]:
        return frozenset(usernames), tuple(days), tuple(slots)

    kept: set[int] = set()
    for rule in rules:
        for ref in rule.members:
            if ref.name not in members:
                raise BusinessFileError(ref.line, f"unknown team member {ref.name!r} in availability rule")
        for ref in rule.service_lines:
            if ref.name not in lines:
                raise BusinessFileError(ref.line, f"unknown service line {ref.name!r} in availability rule")
        wanted = identity([r.name for r in rule.members], rule.days, rule.slot_texts)
        wanted_lines = {lines[r.name] for r in rule.service_lines}
        label = f"{'+'.join(sorted(wanted[0]))} {','.join(rule.days)} {','.join(rule.slot_texts)}"
        row = next(
            (
                a
                for a in existing
                if a.pk not in kept
                and identity([m.user.get_username() for m in a.members.all()], a.days, a.slots) == wanted
            ),
            None,
        )
        if row is None:
            row = Availability(business=business, days=rule.days, slots=rule.slot_texts, capacity=rule.capacity)
            _clean(row, rule.line)
            row.save()
            row.members.set([members[r.name] for r in rule.members])
            row.service_lines.set(wanted_lines)
            result.record("availability rule", label, created=True, fields=[])
        else:
            changed = []
            if row.capacity != rule.capacity:
                row.capacity = rule.capacity
                changed.append("capacity")
            if not row.is_active:
                row.is_active = True
                changed.append("is_active")
            if changed:
                _clean(row, rule.line)
                row.save(update_fields=changed)
            if set(row.service_lines.all()) != wanted_lines:
                row.service_lines.set(wanted_lines)
                changed.append("service_lines")
            result.record("availability rule", label, created=False, fields=changed)
        kept.add(row.pk)
    for row in existing:
        if row.pk not in kept and row.is_active:
            row.is_active = False
            row.save(update_fields=["is_active"])
            result.record("availability rule", row.public_id, created=False, fields=["is_active"])
