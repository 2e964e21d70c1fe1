"""The rules a business's settings obey wherever they are typed: in the
business file (crm.services.business_file) or in the admin's forms. Both
end in the models' `clean()` (the loader runs `full_clean` on every row it
writes; a ModelForm does too), which call these; the business file's parser
calls them again only to name the line. Pure functions: no database.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import urlsplit

import phonenumbers

from crm.us_states import STATE_CODES

# Characters that change how text is shown without showing themselves: a
# right-to-left override makes "Acme" read backwards in a customer's text,
# a zero-width space makes two names look alike. Names go into texts.
_INVISIBLE = {
    "\u200b": "a zero-width space",
    "\u200c": "a zero-width non-joiner",
    "\u200d": "a zero-width joiner",
    "\u2060": "a word joiner",
    "\ufeff": "a zero-width no-break space",
    "\u200e": "a left-to-right mark",
    "\u200f": "a right-to-left mark",
    "\u061c": "an Arabic letter mark",
    **{chr(c): "a bidirectional override" for c in range(0x202A, 0x202F)},
    **{chr(c): "a bidirectional isolate" for c in range(0x2066, 0x206A)},
}

_HOST = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*$")
# A developer's own machine may frame the form over plain http.
_LOCAL_HOSTS = ("localhost", "127.0.0.1")


def name_refusal(value: str) -> str | None:
    """Why `value` may not be a name shown to customers (None: it may)."""
    for char in value:
        if char in _INVISIBLE:
            return f"contains {_INVISIBLE[char]} (U+{ord(char):04X}), which changes how the text reads"
        if unicodedata.category(char) == "Cc":
            return f"contains a control character (U+{ord(char):04X})"
    return None


def origin_refusal(value: str) -> str | None:
    """Why `value` is not one exact web origin (None: it is):
    https://host[:port], nothing after it, no wildcard; plain http for
    localhost alone."""
    parts = urlsplit(value)
    host = parts.hostname or ""
    if "*" in value:
        return "a wildcard would let any matching site frame the form: name each site"
    if parts.scheme != "https" and not (parts.scheme == "http" and host in _LOCAL_HOSTS):
        return "must be https:// (http only for localhost)"
    if parts.username or parts.password or parts.path not in ("", "/") or parts.query or parts.fragment:
        return "must be an origin alone, like https://acme.example (no path, query or user)"
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return "has a bad port"
    if not _HOST.match(host):
        return "names no valid host"
    return None


# ---------------------------------------------------------------------------
# The policy fields stored as JSON. The admin shows them as raw JSON, the
# business file as YAML sections; a shape either would accept and the other
# refuse is a shape the senders, the SLA clock or the scorer meet unchecked.

# Day names as business hours and availability spell them, Monday first (date.weekday() order).
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# "08:00-18:00"; "…-24:00" where a day's range may run to midnight.
_TIME_RANGE = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-(?:([01]\d|2[0-3]):([0-5]\d)|(24:00))$")
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
# The intents a model's guarded reply may answer without a person:
# revocations, complaints, wrong numbers and spam never are.
AUTO_REPLY_INTENTS = ("booking_request", "question", "price_question", "reschedule", "other")
FACT_MAX_LENGTH = 300


def time_range_refusal(value: object, *, ordered: bool = True, to_midnight: bool = False) -> str | None:
    """Why `value` is not a time range "HH:MM-HH:MM" (None: it is).
    `ordered`: it must end after it starts (quiet hours may wrap midnight);
    `to_midnight`: it may end at "24:00"."""
    match = _TIME_RANGE.match(value) if isinstance(value, str) else None
    if not match or (match[5] and not to_midnight):
        return f'must be a time range like "08:00-18:00", not {value!r}'
    start, end = match[1] + match[2], (match[3] or "24") + (match[4] or "00")
    if (ordered and start >= end) or start == end:
        return f"must end after it starts, not {value!r}"
    return None


def _words(value: object) -> list[str] | None:
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def _hours_refusal(value: object) -> str | None:
    if not isinstance(value, dict):
        return "business_hours must map a day (mon … sun) to HH:MM-HH:MM"
    for day, window in value.items():
        if day not in DAYS:
            return f"{day!r} in business_hours is not a day (one of {', '.join(DAYS)})"
        if refusal := time_range_refusal(window, to_midnight=True):
            return f"{day!r} in business_hours {refusal}"
    return None


def _state_windows_refusal(value: object) -> str | None:
    if not isinstance(value, dict):
        return "quiet_hours_by_state must map a state code to HH:MM-HH:MM"
    for state, window in value.items():
        if state not in STATE_CODES:
            return f"{state!r} is not a two-letter US state code"
        if refusal := time_range_refusal(window, to_midnight=True):
            return f"{window!r} for {state} {refusal}"
    return None


def _countries_refusal(value: object) -> str | None:
    codes = _words(value)
    if codes is None:
        return "contact_countries must be a list of country codes like US or CA"
    for code in codes:
        if code not in phonenumbers.SUPPORTED_REGIONS:
            return f"bad country {code!r} in contact_countries (a code like US or CA)"
    return None


def _scope_refusal(value: object) -> str | None:
    if not isinstance(value, dict):
        return "scope_keywords must map a flag to a list of words"
    for flag, words in value.items():
        if flag not in SCOPE_FLAGS:
            return f"unknown flag {flag!r} in scope_keywords (one of {', '.join(SCOPE_FLAGS)})"
        if _words(words) is None:
            return f"{flag} in scope_keywords must be a list of words"
    return None


def _fit_refusal(value: object) -> str | None:
    if not isinstance(value, list):
        return "fit_rules must be a list of {rule, points}"
    for rule in value:
        if not isinstance(rule, dict) or set(rule) != {"rule", "points"}:
            return "each fit rule is {rule, points} and nothing else"
        if rule["rule"] not in FIT_RULES:
            return f"bad rule {rule['rule']!r} in fit_rules (one of {', '.join(FIT_RULES)})"
        if isinstance(rule["points"], bool) or not isinstance(rule["points"], int):
            return f"points of fit rule {rule['rule']} must be a whole number"
    return None


def _intents_refusal(value: object) -> str | None:
    intents = _words(value)
    if intents is None:
        return "ai auto_reply must be a list of intents"
    for intent in intents:
        if intent not in AUTO_REPLY_INTENTS:
            return (
                f"bad intent {intent!r} in ai auto_reply (one of {', '.join(AUTO_REPLY_INTENTS)}; "
                "revocations, complaints, wrong numbers and spam are never answered by a model)"
            )
    return None


def _call_states_refusal(value: object) -> str | None:
    states = _words(value)
    if states is None:
        return "calls states must be a list of two-letter US state codes"
    for state in states:
        if state not in STATE_CODES:
            return f"{state!r} in calls states is not a two-letter US state code"
    return None


def booking_url_refusal(value: object) -> str | None:
    if not (isinstance(value, str) and re.fullmatch(r"https?://[^\s]+", value)):
        return f"booking_url in playbook must be an http(s) URL, not {value!r}"
    return None


def _playbook_refusal(value: object) -> str | None:
    if not isinstance(value, dict):
        return "playbook must be {booking_url, prices, facts}"
    if unknown := set(value) - {"booking_url", "prices", "facts"}:
        return f"unknown key {sorted(unknown)[0]!r} in playbook (booking_url, prices, facts)"
    if "booking_url" in value and (refusal := booking_url_refusal(value["booking_url"])):
        return refusal
    prices = value.get("prices", [])
    if not isinstance(prices, list):
        return "playbook prices must be a list of {item, amount, note}"
    for price in prices:
        keys = set(price) if isinstance(price, dict) else set()
        if not {"item", "amount"} <= keys <= {"item", "amount", "currency", "note"}:
            return "each playbook price is {item, amount, note}"
        if not re.fullmatch(r"\d{1,10}(\.\d{1,2})?", str(price["amount"])):
            return f"the amount of playbook price {price['item']!r} must be at least 0 with at most 2 decimals"
    facts = _words(value.get("facts", []))
    if facts is None:
        return "playbook facts must be a list of sentences"
    if any(len(fact) > FACT_MAX_LENGTH for fact in facts):
        return f"a playbook fact is at most {FACT_MAX_LENGTH} characters"
    return None


def _origins_refusal(value: object) -> str | None:
    origins = _words(value)
    if origins is None:
        return "embed_origins must be a list of origins like https://acme.example"
    for origin in origins:
        if refusal := origin_refusal(origin):
            return f"{origin!r} {refusal}."
    return None


_POLICY_CHECKS = {
    "business_hours": _hours_refusal,
    "quiet_hours_by_state": _state_windows_refusal,
    "contact_countries": _countries_refusal,
    "scope_keywords": _scope_refusal,
    "fit_rules": _fit_refusal,
    "ai_auto_reply": _intents_refusal,
    "call_states": _call_states_refusal,
    "playbook": _playbook_refusal,
    "embed_origins": _origins_refusal,
}


def policy_refusals(values: dict[str, object]) -> dict[str, str]:
    """For each JSON policy field in `values` whose shape the business file
    would refuse: the field and why. Empty: every one is well formed."""
    return {
        field: refusal
        for field, check in _POLICY_CHECKS.items()
        if field in values and (refusal := check(values[field]))
    }
