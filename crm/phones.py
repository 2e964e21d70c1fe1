"""Phone and email normalization: one place that decides what a value is."""

from __future__ import annotations

import phonenumbers


def phone_to_e164(raw: str, region: str = "US") -> str | None:
    """E.164 for anything phonenumbers can parse as a possible number, else None.

    "Possible", not "valid": fictional 555 numbers and new ranges are still
    someone's typed number and must match themselves.
    """
    text = (raw or "").strip()
    if not text:
        return None
    try:
        number = phonenumbers.parse(text, region or "US")
    except phonenumbers.NumberParseException:
        return None
    if not phonenumbers.is_possible_number(number):
        return None
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)


def email_normalize(raw: str) -> str:
    return (raw or "").strip().lower()
