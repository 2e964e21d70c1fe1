"""Whether an inbound message is an emergency: water or gas, sparks or smoke,
no heat or cooling with someone vulnerable in the house, or "right now".

Read as the message is recorded (English and Spanish, no network), beside
its intent; a business adds its own words in the business file
(`policy: {scope_keywords: {emergency: [...]}}`, the same words that send a
new lead down the exception path). An urgent message's conversation goes
first in the inbox while the person waits (crm.inbox). A false alarm costs a
setter a glance; a missed one leaves a flooded basement below an older
"are you open on sundays?", so the net is wide and only a plain negation
("not urgent", "no rush") takes a word back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from crm.models import Business, LeadException


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.VERBOSE)


_HAZARD = _rx(
    r"""\b(?:
        water\s+(?:is\s+|was\s+|keeps\s+)?(?:pouring|pooling|gushing|spraying|flooding|leaking|coming\s+(?:in|through|out|up)
            |everywhere|all\s+over|dripping\s+through|running\s+down|backing\s+up|on\s+the\s+floor)
        |flood(?:ing|ed|s)?|burst|busted\s+pipe|pipe\s+(?:broke|burst|split)|sewage|sewer\s+(?:is\s+)?backing
        |overflowing|ceiling\s+(?:is\s+)?(?:leaking|dripping|caving|coming\s+down)
        |(?:smell(?:s|ing)?|odou?r)\s+(?:of\s+|like\s+)?(?:gas|propane|burning|smoke)|gas\s+(?:smell|leak)|leaking\s+gas
        |carbon\s+monoxide|co\s+(?:alarm|detector)|spark(?:s|ing|ed)?|smok(?:e|ing)|on\s+fire|caught\s+fire|flames?
        |burning\s+smell|electrical\s+fire|shock(?:ed)?\s+me
        |emergenc(?:y|ies)|urgent(?:ly)?|right\s+now|right\s+away|asap|immediately|as\s+soon\s+as\s+possible
        |(?:come|here|out|someone|somebody|anyone|fix|help|need\w*)\b[^.?!]{0,40}\b(?:today|tonight)\b
        |agua\s+(?:por\s+todas\s+partes|saliendo|en\s+el\s+piso|entrando|cayendo)|se\s+(?:est[áa]\s+)?(?:sale|saliendo)\s+el\s+agua
        |inunda\w*|fuga\s+de\s+(?:agua|gas)|tuber[íi]a\s+(?:rota|reventada)|revent\w*
        |(?:huele|olor)\s+a\s+(?:gas|quemado|humo)|mon[óo]xido|chispa\w*|humo|incendio|fuego
        |urgen(?:te|cia)|emergencia|ahora\s+mismo|hoy\s+mismo|de\s+inmediato|lo\s+antes\s+posible|cuanto\s+antes
    )\b""",
)
_NO_COMFORT = _rx(
    r"""\b(?:no|without|lost|out\s+of)\s+(?:heat|heating|hot\s+water|ac|a/c|air\s+conditioning|air|cooling)\b
        |\b(?:heat|heater|heating|furnace|boiler|ac|a/c|air\s+conditioner|air\s+conditioning)\s+(?:is\s+|went\s+|has\s+)?
            (?:out|off|dead|down|died|broke\w*|not\s+working|stopped\s+working|quit)\b
        |\bsin\s+(?:calefacci[óo]n|calor|aire(?:\s+acondicionado)?|agua\s+caliente)\b
        |\b(?:la\s+calefacci[óo]n|el\s+aire|el\s+calentador)\s+no\s+(?:funciona|sirve|prende)\b"""
)
_VULNERABLE = _rx(
    r"""\b(?:baby|babies|newborn|infant|toddler|kids?|children|elderly|grandm\w*|grandp\w*|grandparents?|senior
        |\d{2}[-\s]?(?:year|yr)s?[-\s]?old|pregnant|sick|ill|oxygen|disabled|disability|wheelchair|medical|medication
        |freezing|too\s+hot|heat\s+stroke|below\s+(?:zero|freezing)|(?:9\d|1[0-2]\d)\s*(?:degrees|°)|is\s+[7-9]\d
        |beb[ée]s?|reci[ée]n\s+nacid\w*|ni[ñn][oa]s|anciano\w*|abuel\w*|embarazada|enferm\w*|discapacitad\w*
        |congelando|much[oí]simo\s+calor)\b"""
)
# A word taken back: "not urgent", "no rush", "no emergency", "nada urgente".
_NEGATED = _rx(
    r"""\b(?:not|no|nothing|isn'?t|non)[-\s]+(?:an?\s+|too\s+|super\s+|that\s+)?(?:urgent|emergency|rush|hurry)\w*
        |\bno\s+(?:es\s+)?(?:urgente|emergencia|prisa)\b|\bnada\s+urgente\b|\bwhenever\b"""
)


def urgent_read(text: str, words: Iterable[str] = ()) -> bool:
    """Whether `text` reads as an emergency; `words`: the business's own."""
    body = _NEGATED.sub(" ", text or "")
    if _HAZARD.search(body):
        return True
    if _NO_COMFORT.search(body) and _VULNERABLE.search(body):
        return True
    lowered = body.lower()
    return any(word and re.search(rf"\b{re.escape(word.lower())}\b", lowered) for word in words)


def business_urgent_words(business: Business) -> list[str]:
    """The business file's own emergency words (`scope_keywords.emergency`)."""
    words = (business.scope_keywords or {}).get(LeadException.EMERGENCY, [])
    return [str(word) for word in words if str(word).strip()]


def message_urgent(business: Business, text: str) -> bool:
    """Whether an inbound message to `business` is urgent, with its own words."""
    return urgent_read(text, business_urgent_words(business))
