"""Which numbers a business may text, call or forward calls to.

A public form lets anyone type any number. Left unchecked, that makes the
business text premium-rate ranges abroad (SMS pumping: the attacker is paid
per message) or harass a stranger. So a number is judged before any consent
is recorded for it and again at the send gate:

- its country (phonenumbers' region for the number) must be one the business
  contacts: `Business.contact_countries`, or its own `region` when empty;
- its type must suit the channel (below).

The rule lives here, in crm, because the business file (forwarding numbers)
and the Contact admin (sending numbers) need it as much as the agents do.
"""

from __future__ import annotations

import phonenumbers
from django.core.exceptions import ValidationError
from django.db.models.fields.json import KeyTextTransform
from phonenumbers import PhoneNumberType as T

from crm.models import Business, Source
from crm.models.contacts import PROVIDER_IDS
from crm.phones import phone_to_e164

# SMS goes to handsets only. FIXED_LINE_OR_MOBILE is allowed because in the
# US, Canada and other NANP countries the two share ranges and cannot be told
# apart. Refused: premium-rate and shared-cost (the receiver is paid: the
# pumping attack itself), toll-free (a business line, and a common pumping
# target), plain fixed lines, pagers, VoIP, UAN, voicemail and "personal"
# numbers (UK 070: forwarded at a premium), and UNKNOWN (a number that is not
# valid anywhere cannot be vouched for).
SMS_TYPES = frozenset({T.MOBILE, T.FIXED_LINE_OR_MOBILE})
# A call (or a forwarded call) may reach a landline or a toll-free number;
# never one that bills the caller beyond a normal call.
VOICE_REFUSED_TYPES = frozenset({T.PREMIUM_RATE, T.SHARED_COST, T.PERSONAL_NUMBER, T.UAN, T.UNKNOWN})
TYPE_NAMES = {value: name.lower() for name, value in vars(T).items() if isinstance(value, int) and name.isupper()}


def contact_countries(business: Business) -> list[str]:
    """The countries whose numbers this business may text or call."""
    return [c.upper() for c in business.contact_countries] or [business.region.upper()]


def number_refusal(business: Business, value: str, channel: str) -> str:
    """Why `value` (E.164) must not be used on `channel` ("sms" or "voice") for
    this business, or "" when it may. Email and other channels are not judged."""
    if channel not in ("sms", "voice"):
        return ""
    try:
        number = phonenumbers.parse(value, business.region or "US")
    except phonenumbers.NumberParseException:
        return f"{value!r} is not a phone number"
    country = phonenumbers.region_code_for_number(number)
    kind = phonenumbers.number_type(number)
    if country is None or kind == T.UNKNOWN:
        return f"{value} is not a valid number in any country"
    allowed = contact_countries(business)
    if country not in allowed:
        return f"{value} is a {country} number; this business contacts {', '.join(allowed)} numbers only"
    if channel == "sms" and kind not in SMS_TYPES:
        return f"{value} is a {TYPE_NAMES.get(kind, kind)} number: texts go to mobile numbers only"
    if channel == "voice" and kind in VOICE_REFUSED_TYPES:
        return f"{value} is a {TYPE_NAMES.get(kind, kind)} number: it must not be called"
    return ""


def business_sending_numbers(business_id: int) -> set[str]:
    """The numbers of the business's own Twilio sources: the only ones it may send from."""
    configs = Source.objects.filter(business_id=business_id, provider="twilio").values_list("config", flat=True)
    return {str(c.get("phone_number")) for c in configs if c and c.get("phone_number")}


def business_messaging_services(business_id: int) -> set[str]:
    """The Messaging Service SIDs its own active Twilio sources name."""
    configs = Source.objects.filter(business_id=business_id, provider="twilio", is_active=True).values_list(
        "config", flat=True
    )
    return {str(c.get("messaging_service_sid")) for c in configs if c and c.get("messaging_service_sid")}


def sending_number_clean(business: Business, value: str) -> str:
    """`value` as the E.164 sending number it must be: one of the business's
    own Twilio source numbers (blank: none pinned yet). Raises ValidationError
    otherwise, so nobody can make a contact's texts leave from another
    business's number."""
    raw = (value or "").strip()
    if not raw:
        return ""
    number = phone_to_e164(raw, business.region) or raw
    own = business_sending_numbers(business.pk)
    if number not in own:
        listed = ", ".join(sorted(own)) or "none configured"
        raise ValidationError(
            f"{raw} is not one of {business.name}'s own Twilio numbers (its sources' phone_number: {listed})"
        )
    return number


def source_numbers_refusals(business: Business, provider: str, config: dict[str, object]) -> dict[str, str]:
    """Why a source's settings may not be saved, by setting ({} when they may):
    a provider's account, line, page or form id held by another business
    (`PROVIDER_IDS`: the database refuses it too; this says which setting,
    never whose it is), and a forwarding number outside the business's
    country and number-type rule (never a premium-rate line). For the
    business file and the Source admin."""
    refusals: dict[str, str] = {}
    for key in PROVIDER_IDS.get(provider, ()):
        value = config.get(key)
        if value in (None, ""):
            continue
        taken = (
            Source.objects.annotate(held=KeyTextTransform(key, "config"))
            .filter(provider=provider, held=str(value))
            .exclude(business=business)
            .exists()
        )
        if taken:
            refusals[key] = f"{key} {value} is already in use by another business"
    line = config.get("phone_number")
    if provider == "twilio" and line and "phone_number" not in refusals:
        # The line texts and calls the business's customers: a number of a
        # country it does not contact is a mistake (or someone else's line).
        try:
            parsed = phonenumbers.parse(str(line), business.region or "US")
            # The number's own region, else its calling code's (a test range, a new block).
            country = phonenumbers.region_code_for_number(parsed) or phonenumbers.region_code_for_country_code(
                parsed.country_code or 0
            )
        except phonenumbers.NumberParseException:
            country = None
        allowed = contact_countries(business)
        if country not in allowed:
            refusals["phone_number"] = (
                f"phone_number {line} is a {country or 'unknown'} number; this business contacts "
                f"{', '.join(allowed)} numbers only (policy: contact_countries)"
            )
    forward_to = config.get("forward_to")
    if forward_to:
        refusal = number_refusal(business, str(forward_to), "voice")
        if refusal:
            refusals["forward_to"] = f"forward_to refused: {refusal}"
    return refusals
