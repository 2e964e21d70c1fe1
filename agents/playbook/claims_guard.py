"""The claims guard: finds the promises only a person may make (invariant 9).

`claims_scan(text)` returns every price, discount, warranty, arrival or
completion time, and diagnosis of licensed work it finds in a draft, in the
order they appear. It is a pure function (no database, no network) so every
drafter, rules or language model, is checked by the same words.

It leans towards finding: a false alarm costs a person a glance, a missed
promise costs the business a price or a visit it never agreed to. The
negatives it must leave alone are the playbook's ordinary sentences ("Reply
STOP to opt out", "We got your request", "What time works for you?").
English, with Spanish basics for money and time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum


class ClaimKind(StrEnum):
    PRICE = "price"
    DISCOUNT = "discount"
    WARRANTY = "warranty"
    ARRIVAL_TIME = "arrival_time"
    LICENSED_DIAGNOSIS = "licensed_diagnosis"


@dataclass(frozen=True)
class Finding:
    """One claim: its kind and the words that make it."""

    kind: str
    excerpt: str


@dataclass(frozen=True)
class _Rule:
    kind: ClaimKind
    pattern: re.Pattern[str]
    # A match is dropped when the text just before it matches this (fixed-width
    # lookbehinds cannot say "are you" and "toll-" in one pattern).
    not_after: re.Pattern[str] | None = None


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.VERBOSE)


_NUMBER = r"\d{1,3}(?:[,.]\d{3})*(?:[.,]\d{1,2})?|\d+(?:[.,]\d{1,2})?"
_WORD_NUMBER = (
    r"(?:an?|one|two|three|four|five|six|seven|eight|nine|ten|twelve|fifteen|twenty|thirty|forty-five"
    r"|a\s+few|a\s+couple(?:\s+of)?|\d+(?:\s*(?:-|to|or)\s*\d+)?)"
)
_DURATION = r"(?:minutes?|mins?|hours?|hrs?|days?|business\s+days?|weeks?)"
_WEEKDAY = (
    r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|mon|tues?|wed|thu|thurs|fri|sat|sun"
    r"|lunes|martes|mi[ée]rcoles|jueves|viernes|s[áa]bado|domingo)"
)
_EQUIPMENT = (
    r"(?:compressor|furnace|heat\s+exchanger|capacitor|condenser|evaporator(?:\s+coil)?|coil|blower(?:\s+motor)?"
    r"|fan\s+motor|motor|thermostat|breaker(?:\s+panel|\s+box)?|electrical\s+panel|panel|fuse\s+box|fuse|wiring"
    r"|circuit|outlet|water\s+heater|boiler|heat\s+pump|air\s+conditioner|a/?c(?:\s+unit)?|hvac(?:\s+system)?"
    r"|unit|system|pipes?|sewer(?:\s+line)?|main\s+line|drain|gas\s+line|gas\s+valve|valve|roof|foundation"
    r"|refrigerant|freon|ductwork|ducts?)"
)
_FAULT = (
    r"(?:dead|bad|broken|shot|faulty|failing|failed|blown|cracked|leaking|fried|gone|damaged|burnt|burned(?:\s+out)?"
    r"|clogged|corroded|frozen|toast|unsafe|dangerous|overloaded|undersized|shorted|low|done\s+for|beyond\s+repair"
    r"|not\s+working\s+because)"
)

_RULES: tuple[_Rule, ...] = (
    # --- price: money amounts and stated prices --------------------------------
    _Rule(ClaimKind.PRICE, _rx(rf"(?<!\w)(?:US\$|\$|€|£)\s?(?:{_NUMBER})")),
    _Rule(ClaimKind.PRICE, _rx(rf"\b(?:USD|EUR|GBP|MXN)\s?(?:{_NUMBER})\b")),
    _Rule(
        ClaimKind.PRICE,
        _rx(rf"\b(?:{_NUMBER})\s?(?:€|(?:dollars?|bucks|usd|eur|euros?|pesos|d[óo]lares|quid|pounds)\b)"),
    ),
    _Rule(
        ClaimKind.PRICE,
        _rx(
            rf"""\b(?:price|prices|pricing|cost|costs|fee|fees|rate|rates|charge|charges|total|quote|deposit
                   |precio|costo|cuesta|cobramos|tarifa)
                 (?:\s+(?:is|are|will\s+be|would\s+be|of|runs?|comes\s+to|at|es|de|son|ser[áa]))?
                 \s*:?\s*(?:about|around|roughly|only|just|approximately|approx\.?|unos|solo|s[óo]lo)?
                 \s*(?:US\$|\$|€|£)?\s?(?:{_NUMBER})\b"""
        ),
    ),
    _Rule(ClaimKind.PRICE, _rx(rf"\bas\s+low\s+as\s+\$?(?:{_NUMBER})\b")),
    # --- discounts and free offers ---------------------------------------------
    _Rule(ClaimKind.DISCOUNT, _rx(r"\b\d{1,3}\s?(?:%|percent\b|por\s+ciento\b)\s*(?:off\b|discount|descuento)")),
    _Rule(
        ClaimKind.DISCOUNT,
        _rx(
            r"""\b(?:discount(?:s|ed)?|coupons?|promo(?:tion)?(?:\s+code)?|special\s+offer|rebates?|half[-\s]price
                   |half\s+off|bogo|complimentary|free\s+of\s+charge|no\s+(?:extra\s+)?charge|at\s+no\s+(?:extra\s+)?cost
                   |gratis|gratuit[oa]s?|descuentos?|oferta\s+especial)\b"""
        ),
    ),
    _Rule(
        ClaimKind.DISCOUNT,
        _rx(r"\bfree\b(?![-\s]+(?:to|time|of\s+(?!charge)|standing|flowing|form|range)\b)(?:\s+[a-z]+(?:-[a-z]+)?)?"),
        not_after=_rx(
            r"(?:\bfeel|\btoll[-\s]?|\bhands[-\s]|\bare\s+you|\byou'?re|\byou\s+are|\bi'?m|\bi\s+am|\bwe'?re|\bwe\s+are"
            r"|\bsugar[-\s]|\bgluten[-\s]|\bsmoke[-\s]|\bduty[-\s]|\bhassle[-\s]|\bworry[-\s])\s*$"
        ),
    ),
    # --- warranties, guarantees and promises ------------------------------------
    _Rule(
        ClaimKind.WARRANTY,
        _rx(
            r"""\b(?:warrant(?:y|ies|ied)|guarantee(?:s|d)?|guaranteeing|lifetime|money[-\s]back|we\s+promise|promised?
                   |garant[íi]as?|garantizad[oa]s?|garantizamos)\b"""
        ),
    ),
    # --- arrival and completion times -------------------------------------------
    _Rule(ClaimKind.ARRIVAL_TIME, _rx(r"\b(?:[01]?\d|2[0-3]):[0-5]\d(?:\s?(?:am|pm)\b|\s?[ap]\.m\.)?")),
    _Rule(ClaimKind.ARRIVAL_TIME, _rx(r"\b(?:1[0-2]|0?[1-9])\s?(?:(?:am|pm)\b|[ap]\.m\.)")),
    _Rule(
        ClaimKind.ARRIVAL_TIME,
        _rx(
            r"""\b(?:today|tonight|tomorrow|this\s+(?:morning|afternoon|evening|week|weekend)|next\s+week
                   |right\s+away|same[-\s]day|next[-\s]day|within\s+the\s+hour|on\s+(?:my|our|his|her|their|the)\s+way
                   |eta|e\.t\.a\.|24/7|around\s+the\s+clock)\b"""
        ),
    ),
    _Rule(
        ClaimKind.ARRIVAL_TIME,
        _rx(rf"\b(?:within|in|under|less\s+than)\s+(?:the\s+next\s+)?{_WORD_NUMBER}\s+{_DURATION}\b"),
    ),
    _Rule(
        ClaimKind.ARRIVAL_TIME,
        _rx(
            rf"""\b(?:by|before|on|this|next|until|till|el|este|para\s+el)\s+
                 (?:{_WEEKDAY}|noon|midnight|tonight|tomorrow|(?:the\s+)?end\s+of\s+(?:the\s+)?(?:day|week)|eod|the\s+weekend)\b"""
        ),
    ),
    _Rule(
        ClaimKind.ARRIVAL_TIME,
        _rx(
            r"""\b(?:(?:we|i|they|he|she|someone|a\s+tech(?:nician)?|the\s+tech(?:nician)?|our\s+tech(?:nician)?)(?:'ll|\s+will|\s+can)
                   \s+(?:be\s+(?:there|over|out|on\s+site)|arrive|get\s+there|come\s+(?:out|by|over)|show\s+up|swing\s+by|stop\s+by
                   |have\s+it\s+(?:done|fixed|finished)|finish|fix\s+it)|arriv(?:e|es|al|ing))\b"""
        ),
    ),
    # Spanish: today, tomorrow, at a time, within a duration, we arrive.
    _Rule(
        ClaimKind.ARRIVAL_TIME,
        _rx(
            r"""\b(?:hoy|ma[ñn]ana|esta\s+(?:tarde|noche|semana)|a\s+las\s+\d{1,2}(?::\d{2})?|(?:en|dentro\s+de)\s+(?:\d+|una?|dos|tres)\s+(?:minutos?|horas?|d[íi]as?)
                   |llegamos|llegaremos|llegar[áa]|vamos\s+en\s+camino)\b"""
        ),
    ),
    # --- diagnoses of licensed work ----------------------------------------------
    _Rule(
        ClaimKind.LICENSED_DIAGNOSIS,
        _rx(
            rf"""\b(?:your|the|its|that|this)\s+(?:\w+\s+)?{_EQUIPMENT}(?:\s+(?:is|are|was|were|looks|sounds|seems)|'s)
                 \s+(?:\w+\s+)?{_FAULT}\b"""
        ),
    ),
    _Rule(
        ClaimKind.LICENSED_DIAGNOSIS,
        _rx(
            r"""\b(?:it'?s|it\s+is|that'?s|that\s+is|this\s+is|sounds\s+like|looks\s+like|probably|likely|definitely|must\s+be
                   |you\s+have|you've\s+got)
                 \s+(?:a|an|the|your)?\s*(?:\w+\s+)?
                 (?:gas\s+leak|refrigerant\s+leak|freon\s+leak|carbon\s+monoxide(?:\s+leak)?|co\s+leak|short(?:ed)?\s+circuit
                   |cracked\s+heat\s+exchanger|bad\s+capacitor|failed\s+compressor|blown\s+fuse|tripped\s+breaker|ground\s+fault
                   |faulty\s+wiring|burst\s+pipe|slab\s+leak|sewer\s+backup|code\s+violation|bad\s+ground|overloaded\s+circuit)\b"""
        ),
    ),
    _Rule(
        ClaimKind.LICENSED_DIAGNOSIS,
        _rx(
            rf"""\bneeds?\s+(?:(?:a|an|to\s+be|to\s+get\s+a|some)\s+)?
                 (?:new|replacement|replaced|replacing|rewir\w*|repip\w*|rebuil\w*|recharg\w*|upgraded?)\b
                 (?!\s+(?:time|appointment|date|day|slot|number|phone|email|address)\b)
                 (?:\s+{_EQUIPMENT}\b)?"""
        ),
    ),
    _Rule(ClaimKind.LICENSED_DIAGNOSIS, _rx(r"\b(?:not|isn'?t|is\s+not|aren'?t|are\s+not)\s+(?:up\s+)?to\s+code\b")),
    _Rule(
        ClaimKind.LICENSED_DIAGNOSIS,
        _rx(
            rf"""\b(?:sounds|looks)\s+like\s+(?:a|an|the|your)\s+(?:\w+\s+)?{_EQUIPMENT}
                 \s+(?:problem|issue|failure|leak|short)\b"""
        ),
    ),
    _Rule(ClaimKind.LICENSED_DIAGNOSIS, _rx(r"\b(?:fuga\s+de\s+gas|cortocircuito)\b")),
)


def claims_scan(text: str) -> list[Finding]:
    """Every claim in `text`, in order of appearance.

    Overlapping matches of one kind count once (the first and longest), so
    "$1,299.99" is one price however many rules see it.
    """
    # Curly apostrophes as straight ones; one character for one, so the
    # excerpts still come from the text as written.
    plain = text.replace("\u2019", "'")
    spans: list[tuple[int, int, ClaimKind]] = []
    for rule in _RULES:
        for match in rule.pattern.finditer(plain):
            if rule.not_after is not None and rule.not_after.search(plain, 0, match.start()):
                continue
            spans.append((match.start(), match.end(), rule.kind))
    spans.sort(key=lambda span: (span[0], -span[1]))
    findings: list[Finding] = []
    reach: dict[ClaimKind, int] = {}
    for start, end, kind in spans:
        if start < reach.get(kind, -1):
            continue
        reach[kind] = end
        findings.append(Finding(kind=kind.value, excerpt=text[start:end].strip()))
    return findings


def claim_kinds(findings: list[Finding]) -> list[str]:
    """The distinct kinds found, in order of first appearance."""
    return list(dict.fromkeys(finding.kind for finding in findings))


# A diagnosis of the person's own equipment is never in a playbook: no fact backs one.
NEVER_BACKED = frozenset({ClaimKind.LICENSED_DIAGNOSIS.value})
_AMOUNT = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _squashed(text: str) -> str:
    """Lower case without spaces, commas or curly quotes: "$1,299.00" and
    "$1299.00", "8:00 AM" and "8:00am" read the same."""
    return re.sub(r"[\s,\u2019']+", "", text.lower())


def _amounts(text: str) -> set[Decimal]:
    found = set()
    for raw in _AMOUNT.findall(text):
        try:
            found.add(Decimal(raw.replace(",", "")).normalize())
        except InvalidOperation:
            continue
    return found


def claim_backed(finding: Finding, facts: list[str]) -> bool:
    """Whether one of `facts` (the text of approved playbook facts) states
    what `finding` claims: its words appear in the fact, or, for a price or
    a discount, its amount does. A diagnosis never is."""
    if finding.kind in NEVER_BACKED:
        return False
    words = _squashed(finding.excerpt)
    if any(words and words in _squashed(fact) for fact in facts):
        return True
    if finding.kind == ClaimKind.PRICE.value:
        # Amounts the fact states as prices, so "$1" is not backed by "1-year warranty".
        amounts = _amounts(finding.excerpt)
        return bool(amounts) and any(amounts <= _price_amounts(fact) for fact in facts)
    return False


def _price_amounts(text: str) -> set[Decimal]:
    return {a for f in claims_scan(text) if f.kind == ClaimKind.PRICE.value for a in _amounts(f.excerpt)}


def claims_unbacked(text: str, facts: list[str]) -> list[Finding]:
    """The claims in `text` that none of `facts` states (see `claim_backed`):
    what a model's draft promises beyond the approved playbook."""
    return [finding for finding in claims_scan(text) if not claim_backed(finding, facts)]
