"""The business's approved facts: what any reply, drafted by the rules or by
a model, may state besides the lead's own records — its name, services and
offers, areas, hours, booking link and phone number, and the business file's
`playbook` prices and facts. Each has an id a draft cites; the claims guard
looks the cited ids up here again (agents/playbook/claims_guard.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.urls import NoReverseMatch, reverse

from crm.localtime import END_OF_DAY
from crm.models import DAYS, Business, Provider, ServiceArea, ServiceLine, Source

_DAY_NAMES = {"mon": "Mon", "tue": "Tue", "wed": "Wed", "thu": "Thu", "fri": "Fri", "sat": "Sat", "sun": "Sun"}
_SYMBOLS = {"USD": "$", "CAD": "$", "AUD": "$", "EUR": "€", "GBP": "£", "MXN": "$"}


@dataclass(frozen=True)
class Fact:
    """One approved fact: an id the model cites, and the text it states."""

    id: str
    text: str


def money(amount: Decimal | str, currency: str) -> str:
    value = Decimal(str(amount))
    symbol = _SYMBOLS.get(currency.upper())
    words = f"{value:,.2f}"
    return f"{symbol}{words}" if symbol else f"{words} {currency.upper()}"


def clock_words(hhmm: str) -> str:
    """A clock time in words: 14:30 is "2:30 PM", 24:00 (open until midnight) "midnight"."""
    if hhmm.strip() == END_OF_DAY:
        return "midnight"
    hour, minute = (int(part) for part in hhmm.split(":"))
    suffix = "AM" if hour < 12 else "PM"
    return f"{(hour % 12) or 12}:{minute:02d} {suffix}"


def hours_text(hours: dict[str, str]) -> str:
    """{"mon": "08:00-18:00", ...} as "Mon 8:00 AM–6:00 PM, Tue …"."""
    parts = []
    for day in DAYS:
        window = hours.get(day)
        if window and "-" in window:
            start, end = window.split("-", 1)
            parts.append(f"{_DAY_NAMES.get(day, day)} {clock_words(start)}–{clock_words(end)}")
    return ", ".join(parts)


def booking_link(business: Business, sources: list[Source]) -> str:
    """The business file's booking_url, else a source's, else the hosted form's page."""
    url = str((business.playbook or {}).get("booking_url") or "")
    if url:
        return url
    url = next((str(s.config.get("booking_url", "")) for s in sources if s.config.get("booking_url")), "")
    if url:
        return url
    form = next((s for s in sources if s.provider in (Provider.HOSTED_FORM, Provider.WEBSITE)), None)
    if form is None:
        return ""
    try:
        return settings.PUBLIC_BASE_URL.rstrip("/") + reverse("hosted-form", args=[form.key])
    except NoReverseMatch:
        return ""


def playbook_facts(business: Business) -> list[Fact]:
    """The business's approved facts, each with its id (four queries)."""
    facts = [Fact("business", f"The business is {business.name}.")]
    for line in ServiceLine.objects.filter(business=business).order_by("name", "pk"):
        words = f" ({', '.join(str(k) for k in line.keywords)})" if line.keywords else ""
        facts.append(Fact(f"service:{line.slug}", f"We do {line.name} work{words}."))
        if line.offer:
            facts.append(Fact(f"offer:{line.slug}", f"Offer for {line.name}: {line.offer}"))
    areas = list(ServiceArea.objects.filter(business=business).order_by("name", "pk"))
    for area in areas:
        codes = f" (postal codes {', '.join(str(c) for c in area.postal_codes)})" if area.postal_codes else ""
        facts.append(Fact(f"area:{area.name}", f"We serve {area.name}{codes}."))
    if business.business_hours:
        facts.append(Fact("hours", f"Office hours ({business.timezone}): {hours_text(business.business_hours)}."))
    link, phone = business_links(business)
    if link:
        facts.append(Fact("booking_url", f"Customers book a visit themselves at {link}"))
    if phone:
        facts.append(Fact("phone", f"The business's phone number is {phone}."))
    playbook = business.playbook or {}
    for n, price in enumerate(playbook.get("prices") or [], start=1):
        note = f" ({price['note']})" if price.get("note") else ""
        amount = money(price["amount"], price.get("currency") or business.currency)
        facts.append(Fact(f"price:{n}", f"{price['item']}: {amount}{note}."))
    for n, text in enumerate(playbook.get("facts") or [], start=1):
        facts.append(Fact(f"fact:{n}", str(text)))
    return facts


def business_links(business: Business) -> tuple[str, str]:
    """The business's booking link and phone number ("" when it has none)."""
    sources = list(Source.objects.filter(business=business, is_active=True).order_by("pk"))
    phone = next((str(s.config.get("phone_number", "")) for s in sources if s.provider == Provider.TWILIO), "")
    return booking_link(business, sources), phone


def placeholder_values(business: Business, context: dict[str, str]) -> dict[str, str]:
    """What the model's placeholders become: the lead's (`playbook_context`)
    plus the business's booking link and phone number."""
    values = {"business": business.name, **context}
    link, phone = business_links(business)
    if link:
        values["booking_url"] = link
    if phone:
        values["business_phone"] = phone
    return values
