"""What line a phone number is, asked of Twilio Lookup v2 (line type
intelligence) before the first text to it, for businesses whose file turns
`policy.line_type_lookup` on.

A text to a landline or a toll-free number never arrives (Twilio answers
30006 later, and the lead waits for nothing): the dispatcher fails it with
block reason `cannot_text` before it reaches Twilio and gives the lead's
owner a task to call instead.

The answer is kept per number (`NumberLookup`): a line type is a fact about
the number, the same for every business, and a lookup costs money, so a
number is asked once and again only after KEPT (numbers are ported). A
lookup that fails (Twilio down, a timeout) keeps nothing and never holds a
text back: most numbers are mobiles, and the send path has its own answer
for a number that cannot take the text.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import requests
from django.utils import timezone
from twilio.base.exceptions import TwilioException, TwilioRestException
from twilio.rest import Client

from crm.models import NumberLookup

log = logging.getLogger(__name__)

LineType = NumberLookup.LineType
# Lines a text cannot reach: a call it is.
CANNOT_TEXT = frozenset({LineType.LANDLINE, LineType.TOLL_FREE})
KEPT = timedelta(days=180)
WORDS = {
    LineType.MOBILE: "mobile",
    LineType.LANDLINE: "landline",
    LineType.FIXED_VOIP: "internet phone (fixed)",
    LineType.NON_FIXED_VOIP: "internet phone",
    LineType.TOLL_FREE: "toll-free",
    LineType.PERSONAL: "personal number",
    LineType.PAGER: "pager",
    LineType.VOICEMAIL: "voicemail",
    LineType.SHARED_COST: "shared cost",
}


def line_words(line_type: str) -> str:
    """A line type as a person reads it ("" when unknown)."""
    return WORDS.get(line_type, "")  # type: ignore[call-overload]


def number_line(number: str, client: Client, *, now: datetime | None = None) -> NumberLookup | None:
    """The kept answer for `number`, or Twilio's (kept) when there is none
    fresh; None when Lookup could not answer now."""
    now = now or timezone.now()
    kept = NumberLookup.objects.filter(number=number, looked_up_at__gte=now - KEPT).first()
    if kept is not None:
        return kept
    try:
        found = client.lookups.v2.phone_numbers(number).fetch(fields="line_type_intelligence")
    except TwilioRestException as exc:
        if exc.status >= 500 or exc.status == 429:
            log.warning("Twilio Lookup of %s failed: %s", number, exc.msg)
            return None
        # Lookup refused the number itself (not a number, unknown): that is
        # its answer, kept, and the text goes on to fail or not on its own.
        return _keep(number, now, error=f"{exc.status}: {exc.msg}")
    except (TwilioException, requests.RequestException) as exc:
        log.warning("Twilio Lookup of %s failed: %s", number, exc)
        return None
    intelligence = found.line_type_intelligence or {}
    line_type = str(intelligence.get("type") or "")
    error = intelligence.get("error_code")
    return _keep(
        number,
        now,
        line_type=line_type if line_type in LineType.values else LineType.UNKNOWN,
        carrier_name=str(intelligence.get("carrier_name") or "")[:200],
        error=f"{error}" if error else ("" if found.valid is not False else "not a valid number"),
    )


def _keep(
    number: str, now: datetime, *, line_type: str = LineType.UNKNOWN, carrier_name: str = "", error: str = ""
) -> NumberLookup:
    kept, _ = NumberLookup.objects.update_or_create(
        number=number,
        defaults={"line_type": line_type, "carrier_name": carrier_name, "error": error[:200], "looked_up_at": now},
    )
    return kept


def lines_known(numbers: list[str]) -> dict[str, str]:
    """{number: line type in words} of the numbers looked up (one query)."""
    if not numbers:
        return {}
    rows = NumberLookup.objects.filter(number__in=numbers).values_list("number", "line_type")
    return {number: words for number, line_type in rows if (words := line_words(line_type))}
