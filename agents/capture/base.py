"""What every source parser produces: one normalized intake (`Capture`).

Parsers turn a provider's body into Captures and know nothing of the
database; `agents.capture.identity.capture_apply` turns a Capture into
records. A parser raises `MalformedPayload` for a signed body it cannot read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from crm.services.inbound_handlers import MalformedPayload


def json_object(body: bytes) -> dict[str, Any]:
    """The delivered JSON object; `MalformedPayload` for anything else."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # ValueError covers bad JSON and bad UTF-8
        raise MalformedPayload(f"invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise MalformedPayload("a JSON object is expected")
    return data


@dataclass
class ConsentEvidence:
    """What a form showed and what the person did, kept as ledger evidence."""

    granted: bool
    text: str = ""
    checkbox_value: str = ""
    page_url: str = ""
    ip: str = ""
    user_agent: str = ""
    channels: tuple[str, ...] = ("sms",)

    def as_evidence(self, at: datetime) -> dict[str, Any]:
        return {
            "text_shown": self.text,
            "checkbox_value": self.checkbox_value,
            "page_url": self.page_url,
            "ip": self.ip,
            "user_agent": self.user_agent,
            "at": at.isoformat(),
        }


@dataclass
class Capture:
    channel: str  # form, call, sms, dm
    occurred_at: datetime
    first_name: str = ""
    last_name: str = ""
    phones: list[str] = field(default_factory=list)
    emails: list[str] = field(default_factory=list)
    # ("instagram", IGSID) and the like
    handles: list[tuple[str, str]] = field(default_factory=list)
    postal_code: str = ""
    address: str = ""
    request_text: str = ""
    service_hint: str = ""
    answers: dict[str, Any] = field(default_factory=dict)
    touch: dict[str, Any] = field(default_factory=dict)
    consent: ConsentEvidence | None = None
    is_test: bool = False
    # An inbound text or DM to record as a message on the lead.
    message_body: str = ""
    message_sid: str = ""


def iso_time(raw: Any, fallback: datetime) -> datetime:
    """A provider's ISO-8601 timestamp as an aware datetime (UTC when it names
    no zone); `fallback` when it is missing or unreadable."""
    if not isinstance(raw, str):
        return fallback
    try:
        parsed = parse_datetime(raw.strip())
    except ValueError:
        parsed = None
    if parsed is None:
        return fallback
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed, UTC)


def split_name(full: str) -> tuple[str, str]:
    parts = " ".join((full or "").split()).split(" ", 1)
    return (parts[0], parts[1]) if len(parts) == 2 else (parts[0], "")


def truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"1", "true", "yes", "on", "y", "checked", "agree", "agreed"}


UTM_KEYS = ("utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content")


def utm_from(mapping: dict[str, Any]) -> dict[str, str]:
    return {key.removeprefix("utm_"): str(mapping[key]) for key in UTM_KEYS if mapping.get(key)}


@dataclass(frozen=True)
class PaymentHints:
    """What a provider tells about who paid and for what."""

    metadata: dict[str, str] = field(default_factory=dict)
    emails: tuple[str, ...] = ()
    phones: tuple[str, ...] = ()
    name: str = ""
    description: str = ""
