"""The claims guard: finds the promises only a person may make (invariant 9).

`claims_scan(text)` returns every price, discount, warranty, arrival or
completion time, and diagnosis of licensed work it finds in a draft, in the
order they appear. It is a pure function (no database, no network) so every
drafter, rules or language model, is checked by the same words.

It leans towards finding: a false alarm costs a person a glance, a missed
promise costs the business a price or a visit it never agreed to. The
negatives it must leave alone are the playbook's ordinary sentences ("Reply
STOP to opt out", "We got your request", "What time works for you?").
English and Spanish.

Numbers written in words are read as numbers first (text2num's
`alpha2digit`, English then Spanish: "one hundred fifty dollars" is "150
dollars", "ciento cincuenta" is "150"), so one set of rules sees both; an
excerpt then shows the number in digits. Besides amounts with a currency, a
bare amount after "pay", "cost", "only", "just", "for"… is a price unless a
word that is not money follows it ("just 2 questions"). Measured on the
corpus in tests/agents/samples (scripts/claims_corpus.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from text_to_num import alpha2digit


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
# What may follow a bare amount that is still money ("150 for the visit",
# "89 flat", "15 a month"); any other word makes it a count ("2 questions").
_MONEY_NEXT = (
    r"(?:dollars?|bucks|grand|even|flat|total|plus|for|per|each|installed|up\s*front|upfront|today|and|to\s+come"
    r"|a\s+(?:month|year|hour|visit|week)|an\s+hour|the\s+hour|al\s+mes|la\s+hora|por|por\s+todo|d[óo]lares|pesos"
    r"|now|but|down|la\s+visita|el\s+servicio|la\s+revisi[óo]n|the\s+visit|monthly|weekly|yearly|a\s+year)"
)
# Words after which a bare amount is a price: "pay just 150", "it's only 99",
# "costs 350", "for 300", "cobramos 50", "sale en 120".
_PRICE_CUE = (
    r"(?:pay|pays|paying|cost|costs|costing|charge|charges|fee|fees|price|rate|rates|total|estimate|quote|deposit"
    r"|only|just|runs?|run\s+you|comes?\s+to|looking\s+at|for|be|membership|flush|visit|cuesta|cuestan|cobramos"
    r"|cobra|paga|pague|pagas|solo|s[óo]lo|sale\s+en|dejamos\s+en|tarifa|precio|total\s+es|special|por|hacemos)"
)
# An amount without a currency: two digits at least ("reply 1 for mornings"
# is no price), or "1 50" (how "one fifty" reads once in digits).
_BARE_AMOUNT = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d{1,2})?|\d{2,}(?:\.\d{1,2})?|\d\s\d{2}\b)"
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
    r"|refrigerant|freon|ductwork|ducts?|flue|vent\s+pipe|chimney|igniter|ignitor|flame\s+sensor|inducer(?:\s+motor)?"
    r"|control\s+board|circuit\s+board|board|transformer|contactor|expansion\s+valve|trap|drain\s+line|line"
    r"|(?:sump\s+)?pump|thermocouple|pilot(?:\s+assembly|\s+light)?|tank|pipe|flue\s+pipe|disposal)"
)
_FAULT = (
    r"(?:dead|bad|broken|shot|faulty|failing|failed|blown|cracked|leaking|fried|gone|damaged|burnt|burned(?:\s+out)?"
    r"|clogged|corroded|frozen|toast|unsafe|dangerous|overloaded|undersized|shorted|low|done\s+for|beyond\s+repair"
    r"|blocked|plugged|gone\s+bad|rusted(?:\s+out)?|worn(?:\s+out)?|swollen|bulging|seized|shorted\s+out"
    r"|stuck(?:\s+(?:open|closed|shut))?|went\s+out|gone\s+out|a\s+(?:fire\s+|safety\s+)?hazard"
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
    # The net under the rules: a statement (not a question) that speaks of
    # paying, charging or saving names terms only a person sets, amount or
    # not ("we'll only charge you for the part", "veterans save 10
    # percent", "no paga nada").
    _Rule(
        ClaimKind.PRICE,
        _rx(
            r"""\b(?:pay|pays|paying|owe|owes|charge|charges|charged|charging|save|saves|saving|savings|dime|penny
                   |percent|monthly|paga|pagas|pague|pagar|cobra|cobramos|cobrar|cobro|regalamos|regala)\b
                 (?!\s+attention)(?=[^?]*(?:[.!]|$))"""
        ),
        not_after=_rx(r"(?:\bin|\bwhat\s+did\s+you|\bdid\s+you|\bcu[áa]nto\s+(?:le|te)|\bhow\s+much\s+did\s+you)\s*$"),
    ),
    _Rule(
        ClaimKind.PRICE,
        _rx(
            rf"""\b{_PRICE_CUE}\s+(?:(?:about|around|roughly|only|just|you|us|it|of|de|es|en|is|a|at|the|job|visit
                   |whole|thing|call|first|flat|probably|maybe|between)\s+){{0,3}}
                 (?:\d{{1,2}}\s+to\s+)?{_BARE_AMOUNT}(?!\s*(?:%|:|-?\d|(?!{_MONEY_NEXT}\b|we\b|we'll\b)[a-z]))"""
        ),
    ),
    _Rule(
        ClaimKind.PRICE,
        _rx(rf"\b{_BARE_AMOUNT}(?=\s+(?:{_MONEY_NEXT})\b)"),
        not_after=_rx(r"(?:\bat|\bby|\bin|\bwithin|\bunder|:|\bstep|\boption|\bunit|\bof\s+the)\s*$"),
    ),
    _Rule(
        ClaimKind.PRICE,
        _rx(r"\b(?:a|one|two|three|four|five|six|seven|eight|nine|ten|\d+)\s+grand\b"),
    ),
    # "The tune-up special is 79." (not "your ticket number is 88").
    _Rule(
        ClaimKind.PRICE,
        _rx(rf"\b(?:is|are|es|son)\s+{_BARE_AMOUNT}(?=\s*[.!]?\s*$)"),
        not_after=_rx(
            r"\b(?:number|code|zip|ticket|reference|unit|step|option|ext|apartment|apt|suite|order|id|confirmation"
            r"|n[úu]mero|referencia|c[óo]digo|pedido|confirmaci[óo]n)\b[^.?!]*$"
        ),
    ),
    # --- discounts and free offers ---------------------------------------------
    _Rule(ClaimKind.DISCOUNT, _rx(r"\b\d{1,3}\s?(?:%|percent\b|por\s+ciento\b)\s*(?:off\b|discount|descuento)")),
    _Rule(
        ClaimKind.DISCOUNT,
        _rx(
            r"""\b(?:discount(?:s|ed)?|coupons?|promo(?:tion)?(?:\s+code)?|special\s+offer|rebates?|half[-\s]price
                   |half\s+off|bogo|complimentary|free\s+of\s+charge|no\s+(?:extra\s+)?charge|at\s+no\s+(?:extra\s+)?cost
                   |gratis|gratuit[oa]s?|descuentos?|oferta\s+especial
                   |waive[sd]?|waiving|on\s+the\s+house|money\s+off|(?:won'?t|will\s+not|don'?t|do\s+not)\s+charge
                   |pay\s+nothing|refund(?:s|ed)?|comp\s+(?:the|your)|credit\s+(?:the|your)\s+\w+\s+(?:fee|charge)
                   |match\s+(?:any|their|a)\s+[\w']*\s*(?:quote|price|offer)
                   |we'?ll\s+cover\s+(?:the|your)|sin\s+(?:costo|cargo)|ning[úu]n\s+costo|no\s+(?:le|te|les)\s+cobramos
                   |por\s+cuenta\s+de\s+la\s+casa|de\s+regalo|(?:le|te|les)\s+regalamos
                   |knock(?:ing)?\s+(?:off|\d+\s+off|(?:the|your)\s+\w+\s+off)|on\s+us
                   |(?:won'?t|will\s+not|doesn'?t|does\s+not)\s+cost\s+(?:you\s+)?(?:a\s+thing|anything|a\s+dime|a\s+penny|extra)
                   |credit\s+(?:the|your)\s+(?:\w+\s+)?(?:fee|charge|deposit|call|visit)
                   |no\s+(?:\w+\s+)?(?:fee|charge|cost)s?|we'?ll\s+cover\s+(?:it|that|the|your)|\$?\d+\s+off
                   |no\s+tiene\s+(?:ning[úu]n\s+)?costo)\b"""
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
                   |garant[íi]as?|garantizad[oa]s?|garantizamos)\b
                 (?!\s+(?:compan|de\s+hogar|card|paperwork|info|number|provider|claim|registration))"""
        ),
        not_after=_rx(r"\bhome\s*$"),
    ),
    _Rule(
        ClaimKind.WARRANTY,
        _rx(
            r"""\b(?:covered|protected|good|stand\s+behind\s+(?:it|our\s+work)|backed|cubiert[oa]s?|protegid[oa]s?)
                 \s+(?:for|por)\s+(?:a\s+full\s+|a\s+|one\s+|un\s+|(?:\d+|two|three|four|five|six|seven|eight|nine|ten)\s+(?:full\s+)?)?
                 (?:years?|yrs?|months?|a[ñn]os?|meses)\b"""
        ),
    ),
    _Rule(
        ClaimKind.WARRANTY,
        _rx(r"\b(?:years?|yrs?|months?|a[ñn]os?|meses)\s+(?:of\s+|de\s+)?(?:coverage|protection|cobertura)\b"),
    ),
    _Rule(
        ClaimKind.WARRANTY,
        _rx(
            r"""\b(?:covered|protected|guaranteed|backe?d?|stand\s+behind|cubiert[oa]s?|garantizamos)\b[^.?!]{0,30}?\b(?:for|por)\s+
                 (?:a\s+full\s+|a\s+|one\s+|un\s+|(?:\d+|two|three|four|five|six|seven|eight|nine|ten)\s+(?:full\s+)?)?
                 (?:years?|yrs?|months?|a[ñn]os?|meses)\b"""
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
    _Rule(
        ClaimKind.ARRIVAL_TIME,
        _rx(
            rf"""\b(?:take|takes|taking)\s+(?:about|around|roughly|only|just)?\s*
                 (?:\d+(?:\s*(?:-|to|or)\s*\d+)?|a\s+few|a\s+couple(?:\s+of)?)\s+{_DURATION}\b"""
        ),
    ),
    _Rule(ClaimKind.ARRIVAL_TIME, _rx(r"\b(?:at|by)\s+(?:1[0-2]|[1-9]|noon|midnight)\b(?!\s*(?:%|-|:|\d|[a-z]{2,}))")),
    _Rule(
        ClaimKind.ARRIVAL_TIME,
        _rx(
            rf"""\b(?:set\s+for|comes?\s+in|gets?\s+there|(?:we|i)'?ll\s+install
                   |(?:someone|we|they|he|she|(?:the\s+|a\s+|our\s+)?tech(?:nician)?)(?:'s|'re|\s+is|\s+are)\s+coming\s+(?:out|over|by))
                 (?:\s+{_WEEKDAY}\b)?"""
        ),
    ),
    _Rule(
        ClaimKind.ARRIVAL_TIME,
        _rx(
            r"""\b(?:pull(?:ing)?\s+up|head(?:ing|ed)\s+(?:your\s+way|over|out|to\s+you)|on\s+(?:their|its)\s+way
                   |en\s+route|wrap(?:ping)?\s+up\s+(?:by|around|before|at)|around\s+noon|(?:estamos|vamos|va)\s+en\s+camino
                   |\d+\s+(?:minutes?|mins?|hours?)\s+(?:away|out)|around\s+\d{1,2}(?:\s+in\s+the\s+(?:morning|afternoon|evening))?\b
                   (?!\s*(?:%|\d|dollars|bucks|people|times))|va\s+llegando|va\s+para\s+all[áa])"""
        ),
    ),
    # Spanish: today, tomorrow, at a time, within a duration, we arrive.
    _Rule(
        ClaimKind.ARRIVAL_TIME,
        _rx(
            r"""\b(?:hoy|(?<!la\s)ma[ñn]ana(?!\s+o\b)|esta\s+(?:tarde|noche|semana)|a\s+las\s+\d{1,2}(?::\d{2})?|(?:en|dentro\s+de)\s+(?:\d+|una?|dos|tres)\s+(?:minutos?|horas?|d[íi]as?)
                   |llegamos|llegaremos|llegar[áa]|llega|llegan|estar[ée]mos\s+(?:ah[íi]|all[íi])|estar[áa]\s+(?:ah[íi]|all[íi])
                   |vamos\s+en\s+camino|lo\s+tenemos\s+listo|terminamos)\b"""
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
                 (?:gas\s+leak|refrigerant\s+leak|freon\s+leak|carbon\s+monoxide(?:\s+leak)?(?!\s+(?:detector|alarm|monitor))|co\s+leak|short(?:ed)?\s+circuit
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
    _Rule(
        ClaimKind.LICENSED_DIAGNOSIS,
        _rx(rf"\b(?:probably|likely|definitely)\s+(?:the|your)\s+(?:\w+\s+)?{_EQUIPMENT}\s+{_FAULT}\b"),
    ),
    _Rule(
        ClaimKind.LICENSED_DIAGNOSIS,
        _rx(
            rf"""\b(?:{_EQUIPMENT}\s+(?:has|have|has\s+got|'s\s+got)\s+(?:a|an)\s+(?:crack|leak|short|hole|clog|break)
                   |(?:a|an)\s+(?:leak|crack|clog|break|short)\s+in\s+(?:the|your)\s+(?:\w+\s+)?{_EQUIPMENT}
                   |(?:it'?s|that'?s)\s+(?:the|your)\s+(?:\w+\s+)?{_EQUIPMENT}(?=\s*[,;]|\s+(?:that|causing|failing|going))
                   |{_EQUIPMENT}\s+(?:has|have)\s+(?:failed|died|gone\s+bad|burned\s+out|quit)
                   |(?:that'?s|it'?s)\s+(?:a|an)\s+{_FAULT}\s+(?:\w+\s+)?{_EQUIPMENT}
                   |(?:that'?s|it'?s|this\s+is)\s+(?:the|your|what'?s\s+causing\s+the)\s+(?:real\s+)?
                     (?:problem|issue|culprit|cause|noise|smell|leak|sound)
                   |(?:sounds|looks)\s+like\s+(?:the|your)\s+(?:\w+\s+)?{_EQUIPMENT}\s+{_FAULT}
                   |(?:is|are|was)\s+(?:a|an)\s+(?:loose|bad|broken|cracked|failing|failed|worn|seized|dirty)\s+(?:\w+\s+)?{_EQUIPMENT}
                   |needs?\s+(?:upgrading|replacing|rewiring|repiping|rebuilding|recharging)
                   |(?:froze|fried|burned|burnt|cracked|shorted|killed|blew)\s+(?:the|your)\s+(?:\w+\s+)?{_EQUIPMENT}
                   |(?:your|the)\s+\w+(?:\s+\w+)?\s+(?:is|are|looks|seems)\s+(?:\w+\s+)?
                     (?:dead|broken|shot|faulty|failing|blown|cracked|fried|burnt|corroded|toast|swollen|done\s+for
                     |beyond\s+repair))\b"""
        ),
    ),
    _Rule(
        ClaimKind.LICENSED_DIAGNOSIS,
        _rx(
            r"""\b(?:fuga\s+de\s+(?:gas|refrigerante)|cortocircuito
                   |(?:est[áa]|es)\s+(?:da[ñn]ad[oa]|rot[oa]|quemad[oa]|descompuest[oa]|mal[oa]|fallando|inflad[oa]
                     |peligros[oa]|tapad[oa]|oxidad[oa])
                   |necesita\s+(?:ser\s+)?(?:reemplazad[oa]|cambiad[oa]|reemplazar|cambiar))\b"""
        ),
    ),
)


def claims_scan(text: str) -> list[Finding]:
    """Every claim in `text`, in order of appearance.

    Overlapping matches of one kind count once (the first and longest), so
    "$1,299.99" is one price however many rules see it.
    """
    # Numbers in words as digits (see the module's docstring), and curly
    # apostrophes as straight ones.
    text = _numbers_as_digits(text)
    plain = text.replace("\u2019", "'")  # one character for one: excerpts come from `text`
    spans: list[tuple[int, int, ClaimKind]] = []
    for rule in _RULES:
        for match in rule.pattern.finditer(plain):
            if rule.not_after is not None and rule.not_after.search(plain, 0, match.start()):
                continue
            spans.append((match.start(), match.end(), rule.kind))
    spans.sort(key=lambda span: (span[0], -span[1]))
    # Overlapping spans of one kind are one claim, their union ("be 199" and
    # "199 dollars" are "be 199 dollars").
    merged: list[list[Any]] = []
    open_by_kind: dict[ClaimKind, list[Any]] = {}
    for start, end, kind in spans:
        current = open_by_kind.get(kind)
        if current is not None and start < current[1]:
            current[1] = max(current[1], end)
            continue
        current = [start, end, kind]
        open_by_kind[kind] = current
        merged.append(current)
    findings = [Finding(kind=kind.value, excerpt=text[start:end].strip()) for start, end, kind in merged]
    return findings


def _numbers_as_digits(text: str) -> str:
    """`text` with numbers written in words in digits, English then Spanish.
    Single small words stay ("one more question", "una pregunta"); a text
    the parser cannot read is scanned as written."""
    try:
        return str(alpha2digit(alpha2digit(text, "en"), "es"))
    except (ValueError, RuntimeError):
        return text


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
