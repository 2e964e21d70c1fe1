"""What an inbound message asks for: its intent, with a confidence.

Every inbound text, DM and email reply is read as it is recorded by
`intent_read`: the ledger's keywords first (certain), then the consent
check's reading (a revocation — the trained reader's recall-first model
included — or a complaint), then the trained intent model (agents/reader),
with its probability as the confidence; no network, English and Spanish.
The hand-written patterns (`intent_by_rules`) stay as the evaluation's
`rules` path, to compare against. When a language model is configured it
reads the message again (agents/ai/inbound.py), only where the reader's
confidence is low (`MODEL_BELOW`), and `intent_merged` decides what is kept:

- a revocation or a complaint the rules found stays, whatever the model
  says: the consent check has already paused automation and asked a person
  (agents/consent/keywords.py), and no model answer takes that back;
- the model may add a revocation the rules missed (its safe path then runs
  too), and otherwise refines the reading.

Revocations and complaints are the consent check's own reading
(`read_text`), so the intent and the safe path never disagree; the rules add
a wider net of dissatisfied words for `complaint` as an intent only (a
person answers it; no hold).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agents.consent.keywords import read_text, read_text_rules
from crm.models import INTENTS

BOOKING_REQUEST = "booking_request"
QUESTION = "question"
PRICE_QUESTION = "price_question"
RESCHEDULE = "reschedule"
COMPLAINT = "complaint"
REVOCATION = "revocation"
WRONG_NUMBER = "wrong_number"
SPAM = "spam"
OTHER = "other"
assert {
    BOOKING_REQUEST,
    QUESTION,
    PRICE_QUESTION,
    RESCHEDULE,
    COMPLAINT,
    REVOCATION,
    WRONG_NUMBER,
    SPAM,
    OTHER,
} == set(INTENTS)

# Intents that keep their safe path whatever a model says.
SAFE_PATH_INTENTS = frozenset({REVOCATION, COMPLAINT})
# Intents nobody drafts an answer to: the consent check, a person or nobody answers them.
NOT_DRAFTED = frozenset({REVOCATION, COMPLAINT, WRONG_NUMBER, SPAM})

RULES = "rules"
READER = "reader"
MODEL = "model"
# The reader's confidence under which a configured language model is asked too.
MODEL_BELOW = 0.75


@dataclass(frozen=True)
class IntentReading:
    intent: str
    confidence: float
    source: str = RULES


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.VERBOSE)


# Dissatisfaction the consent check does not put on hold, read as a
# complaint for the inbox (a person answers; no model drafts a reply).
_DISSATISFIED = _rx(
    r"""\b(?:ridiculous|unacceptable|terrible|worst|disgust\w*|horrible|awful|overcharg\w*|refund|rip[-\s]?off
           |never\s+showed|no\s?one\s+(?:showed|came)|nobody\s+(?:showed|came)|(?:1|one)[-\s]star|bad\s+review
           |damaged\s+my|complaint|speak\s+(?:to|with)\s+(?:a|your)\s+(?:manager|supervisor)|disput\w*|chargeback
           |police|attorney\s+general|inaceptable|p[ée]simo|mal\s+servicio|queja|reembolso|cobraron\s+de\s+m[áa]s
           |nunca\s+lleg[óo]|nunca\s+vino|qu[ée]\s+mal|rude|groser[oa]|disappoint\w*|decepcion\w*|unprofessional
           |better\s+business\s+bureau|charged\s+(?:me|my\s+card)\s+(?:twice|double)|still\s+(?:nothing|broken|not\s+fixed)
           |no\s?one\s+(?:is\s+)?answer\w*|nobody\s+answer\w*|already\s+(?:failed|broke)|poco\s+profesional|unhappy|hung\s+up\s+on|took\s+the\s+day\s+off|poner\s+una\s+demanda)\b"""
)
_WRONG_NUMBER = _rx(
    r"""\b(?:wrong\s+(?:number|person|\#)|who\s+is\s+this|who\s+dis|not\s+me\b|(?:didn'?t|did\s+not|never)\s+
           (?:fill\w*\s+out|request\w*|ask\w*\s+for|sign\w*\s+up)|no\s+one\s+here\s+by\s+that\s+name|this\s+isn'?t\s+\w+
           |must\s+have\s+the\s+wrong|texted\s+the\s+wrong|n[úu]mero\s+equivocado|se\s+equivoc\w*|qui[ée]n\s+es\b
           |yo\s+no\s+(?:ped[íi]|llen[ée]|solicit[ée])|no\s+soy\s+(?:la\s+persona|\w+)|aqu[íi]\s+no\s+vive
           |not\s+the\s+(?:person|one)\s+you|never\s+(?:contacted|called|texted|reached\s+out\s+to)\s+(?:you|your)
           |who\s+are\s+you|don'?t\s+know\s+(?:any(?:one|body)|a)\s+(?:named|called)|wrong\s+(?:guy|gal|lady|man)
           |no\s+conozco\s+a)"""
)
_LINK = _rx(r"(?:https?://|www\.|bit\.ly/|\b[a-z0-9-]+\.(?:example|com|net|org|io|ly|co)\b/?)")
_SPAM = _rx(
    r"""\b(?:congratulations|you'?ve\s+won|you\s+have\s+been\s+selected|gift\s+card|claim\s+(?:your|now)|click\s+here
           |seo|google\s+ranking|\#1\s+on\s+google|crypto|bitcoin|btc|earn\s+\$|work\s+from\s+home|from\s+home
           |merchant\s+cash|business\s+loans?|cash\s+advance|followers|virtual\s+assistant|social\s+media
           |more\s+leads|book\s+a\s+demo|5-star\s+reviews|new\s+website|build\s+you\s+a|hot\s+singles|we\s+buy\s+houses
           |free\s+cruise|tax\s+refund|account\s+(?:has\s+been\s+)?suspended|payment\s+failed|verify\s+(?:at|here|your)
           |limited\s+offer|felicidades|gan[óo]\s+(?:un|dinero)|gane\s+dinero|premio|pr[ée]stamos|desde\s+casa
           |cuenta\s+bancaria|haga\s+clic|oferta\s+exclusiva|ranking|boost\s+your|extended\s+warranty
           |investment\s+opportunity|double\s+your\s+money|tap\s+the\s+link|tarjeta\s+de\s+regalo|enlace
           |act\s+now|mortgage|more\s+customers|your\s+business\s+online|order\s+has\s+been\s+shipped
           |confirm\s+delivery)\b"""
)
_RESCHEDULE = _rx(
    r"""\b(?:re-?schedul\w*|postpone|push\s+(?:it|the\s+\w+)?\s*back|move\s+(?:my|the|it|our|thursday'?s|\w+'s)?\s*
           (?:appointment|appt|visit|install|it)?|change\s+(?:my|the)\s+(?:appointment|appt|time|visit|date)
           |another\s+day|different\s+day|other\s+day|pick\s+another|can'?t\s+make\s+it|won'?t\s+be\s+home
           |instead\s+of|(?:cancel|cancelling|canceling)\s+(?:my|the|tomorrow'?s|our)\s+(?:appointment|appt|visit)
           |something\s+came\s+up|schedule\s+changed|later\s+in\s+the\s+day
           |cambiar\s+(?:mi|la)\s+(?:cita|hora)|mover\s+la\s+cita|reprogramar|posponer|otro\s+d[íi]a|cancelar\s+mi\s+cita
           |cancelen\s+la\s+cita|la\s+podemos\s+cambiar|no\s+voy\s+a\s+poder|bump\s+(?:my|the|our)|call\s+off
           |rebook|won'?t\s+work\s+(?:any\s?more|now)|dejarlo\s+para|instead\?|another\s+time|otra\s+fecha
           |have\s+to\s+cancel)"""
)
_PRICE = _rx(
    r"""\$|\b(?:how\s+much|price[sd]?|pricing|cost(?:s|ing)?|charges?|fees?|rates?|quotes?|expensive|cheap\w*
           |afford\w*|budget|discounts?|specials?|estimate\s+free|free\s+estimate|ballpark|trip\s+charge
           |cu[áa]nto\s+(?:cuesta|cobran|me\s+sale|me\s+saldr[íi]a|por|sale|costar[íi]a|es)|precios?|cuesta|costo
           |cobran|cobrar[íi]an|cotizaci[óo]n|descuentos?|caro|going\s+rate|price\s+match|what\s+(?:does|do|would)\s+.{1,40}\s+go\s+for)\b"""
)
_BOOKING = _rx(
    r"""\b(?:schedul\w*|book(?:ing)?|appointment|appt|openings?|available|availability|come\s+(?:out|by|over|today|tomorrow|look)
           |can\s+(?:you|someone|u|a\s+tech)\s+(?:come|stop\s+by|send|pass)|send\s+(?:someone|a\s+tech\w*|a\s+plumber)
           |need\s+(?:someone|a\s+plumber|a\s+tech\w*|service)|someone\s+(?:out|to\s+(?:come|fix|look))|how\s+soon
           |earliest|asap|right\s+away|get\s+on\s+your\s+schedule|put\s+me\s+down|works\s+for\s+me|is\s+fine\s+for
           |let'?s\s+book|this\s+(?:afternoon|weekend)|tonight|stop\s+by
           |cita|agend\w*|vengan|venir|manden\s+a\s+alguien|disponibilidad|programar|necesito\s+un\s+plomero
           |lo\s+antes\s+posible|pasar\s+esta|look\s+at\s+(?:my|the|our)|check\s+(?:out\s+)?(?:my|the|our)
           |fit\s+(?:me|us)\s+in|need\s+(?:help|service|someone)|come\s+(?:fix|check|look)|let'?s\s+do
           |\d{1,2}\s?(?:am|pm)|pronto\s+posible|pueden\s+venir|qu[ée]\s+d[íi]a|necesito\s+(?:servicio|ayuda|un\s+t[ée]cnico)
           |swing\s+by|looked\s+at|on\s+the\s+calendar|hurry|if\s+you\s+can\s+come|mandar\s+a\s+alguien|ag[eé]nd\w*
           |can\s+(?:we|you)\s+do\s+(?:\w+day|tomorrow|today|\d))\b"""
)
# A reply that picks a time ("saturday morning is fine for us", "Friday
# works, any time before noon"): the person is booking.
_WHEN = r"""(?:(?:mon|tues|wednes|thurs|fri|satur|sun)day|tomorrow|today|tonight|mornings?|afternoons?|evenings?|weekend
           |noon|\d{1,2}(?::\d\d)?\s?(?:am|pm)|lunes|martes|mi[ée]rcoles|jueves|viernes|s[áa]bado|domingo|ma[ñn]ana
           |(?:la|en\s+la)\s+(?:tarde|noche|ma[ñn]ana))"""
_AGREE = r"""(?:works|work\s+for|is\s+(?:fine|good|ok|okay|perfect|great|better)|sounds\s+(?:good|great|perfect)
           |would\s+be\s+(?:great|good|perfect|fine)|(?:i'?m|we'?re|we\s+are|i\s+am|someone\s+is)\s+(?:free|home|available|around)
           |any\s?time|est[áa]\s+bien|me\s+(?:sirve|funciona|queda\s+bien)|nos\s+(?:sirve|funciona|queda\s+bien)
           |puedo|podemos|perfecto|please|por\s+favor)"""
_SCHEDULING = _rx(rf"""\b{_WHEN}\b[^.?!]{{0,30}}?\b{_AGREE}|\b{_AGREE}\b[^.?!]{{0,20}}?\b{_WHEN}\b""")
_QUESTION = _rx(
    r"""\?|^\s*(?:do|does|are|is|can|could|what|who|which|how|should|will|would)\s+\w+\s+\w+|\b(?:wondering|curious)\b
           |^\s*¿|\b(?:hacen|tienen|ofrecen|aceptan|instalan|trabajan|hablan)\b"""
)


def intent_by_rules(text: str) -> IntentReading:
    """The rules' reading of one inbound message. A ledger keyword is certain
    (confidence 1); the consent check's revocations and complaints are next;
    then the first of wrong number, spam, reschedule, price, booking and
    question that matches; else `other`."""
    body = text.strip()
    reading = read_text_rules(body)
    if reading.kind == "opt_out":
        return IntentReading(REVOCATION, 1.0)
    if reading.kind == "opt_in":
        return IntentReading(OTHER, 0.9)
    if reading.kind == "help":
        return IntentReading(QUESTION, 0.9)
    if reading.kind == "complaint":
        return IntentReading(COMPLAINT, 0.9)
    if reading.kind == "revocation":
        return IntentReading(REVOCATION, 0.9)
    if not body:
        return IntentReading(OTHER, 0.5)
    if _SPAM.search(body) or (_LINK.search(body) and not _BOOKING.search(body)):
        return IntentReading(SPAM, 0.7)
    if _DISSATISFIED.search(body):
        return IntentReading(COMPLAINT, 0.7)
    if _WRONG_NUMBER.search(body):
        return IntentReading(WRONG_NUMBER, 0.8)
    if _RESCHEDULE.search(body):
        return IntentReading(RESCHEDULE, 0.8)
    if _PRICE.search(body):
        return IntentReading(PRICE_QUESTION, 0.8)
    if _BOOKING.search(body) or _SCHEDULING.search(body):
        return IntentReading(BOOKING_REQUEST, 0.7)
    if _QUESTION.search(body):
        return IntentReading(QUESTION, 0.6)
    return IntentReading(OTHER, 0.4)


def intent_read(text: str, previous: str = "") -> IntentReading:
    """The intent production stores: keywords, then the consent check's
    revocation or complaint, then the trained reader's intent. `previous`:
    our last text before this one ("yes" answers it)."""
    body = text.strip()
    if not body:
        return IntentReading(OTHER, 0.5, READER)
    consent = read_text(body, previous)
    if consent.kind == "opt_out":
        return IntentReading(REVOCATION, 1.0, READER)
    if consent.kind == "opt_in":
        return IntentReading(OTHER, 0.9, READER)
    if consent.kind == "help":
        return IntentReading(QUESTION, 0.9, READER)
    if consent.kind == "revocation":
        return IntentReading(REVOCATION, round(max(consent.revocation, 0.9), 3), READER)
    if consent.kind == "complaint":
        return IntentReading(COMPLAINT, 0.9, READER)
    from agents.reader.model import reader

    reading = reader().read(body, previous)
    return IntentReading(reading.intent, reading.confidence, READER)


def is_ledger_keyword(text: str) -> bool:
    """The text is one of the ledger's opt-out keywords (STOP, UNSUBSCRIBE…):
    what the evaluation counts apart from revocations in plain words."""
    return read_text_rules(text).kind == "opt_out"


def intent_merged(rules: IntentReading, model: IntentReading | None) -> IntentReading:
    """What is kept when the model read the message too: the first reading's
    revocation or complaint stands whatever the model says; a trained
    reader's reading at MODEL_BELOW or above stands too; otherwise the
    model's reading (which may add a revocation). Without a model reading,
    the first one."""
    if model is None or rules.intent in SAFE_PATH_INTENTS:
        return rules
    if model.intent not in INTENTS:
        return rules
    if rules.source == READER and rules.confidence >= MODEL_BELOW and model.intent != REVOCATION:
        # The trained reader is sure: the model only drafts (a revocation it
        # adds still counts: recall before all).
        return rules
    return model


def keyword_text(text: str) -> bool:
    """A keyword the ledger acts on by itself (opt-out, opt-in, help): no
    model reads it, its meaning is fixed."""
    return read_text_rules(text).kind in ("opt_out", "opt_in", "help")
