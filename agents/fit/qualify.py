"""Service-area check, job-scope qualifier, ICP/fit scorer and offer matcher.

They gather only the facts routing needs and never guess: a lead without a
postal code is `unknown` territory (the owner is asked to get one), a request
matching no service line keeps none. Every point of the fit score carries its
reason, stored on the lead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from crm.models import ConsentState, ConsentStatus, Lead, LeadException, ServiceArea, ServiceLine
from crm.selectors import message_templates

# Words that mark a request for a person's decision before any booking, merged
# under the business's own `scope_keywords`.
BUILT_IN_SCOPE: dict[str, tuple[str, ...]] = {
    LeadException.EMERGENCY: (
        "emergency",
        "urgent",
        "asap",
        "no heat",
        "no ac",
        "no cooling",
        "flooding",
        "flooded",
        "burst",
        "gas smell",
        "smell gas",
        "smoke",
        "sparking",
    ),
    LeadException.COMMERCIAL: ("commercial", "office building", "restaurant", "warehouse", "retail", "storefront"),
    LeadException.WARRANTY: ("warranty", "under guarantee", "you installed", "recall"),
    LeadException.LICENSED_DIAGNOSIS: ("gas line", "electrical panel", "breaker", "carbon monoxide", "permit"),
}
# These take the exception path: a person decides before any booking.
EXCEPTION_PATH = (LeadException.OUT_OF_AREA, LeadException.EMERGENCY, LeadException.COMMERCIAL, LeadException.WARRANTY)

BUILT_IN_RULES: tuple[dict[str, Any], ...] = (
    {"rule": "in_area", "points": 30},
    {"rule": "out_of_area", "points": -40},
    {"rule": "service_matched", "points": 25},
    {"rule": "has_phone", "points": 15},
    {"rule": "has_email", "points": 10},
    {"rule": "sms_consent", "points": 10},
    {"rule": "paid_click", "points": 5},
    {"rule": "emergency", "points": 10},
    {"rule": "commercial", "points": 0},
    {"rule": "warranty", "points": -10},
)
RULE_NAMES = frozenset(r["rule"] for r in BUILT_IN_RULES)


@dataclass(frozen=True)
class Territory:
    status: str  # in_area, out_of_area, unknown, unrestricted
    postal_code: str = ""
    areas: tuple[str, ...] = ()


@dataclass
class Fit:
    territory: Territory
    service_line: ServiceLine | None
    flags: list[str] = field(default_factory=list)
    matched: dict[str, list[str]] = field(default_factory=dict)
    score: int = 0
    reasons: list[dict[str, Any]] = field(default_factory=list)
    offer: dict[str, Any] = field(default_factory=dict)

    @property
    def urgent(self) -> bool:
        return LeadException.EMERGENCY in self.flags

    def facts(self) -> dict[str, Any]:
        return {
            "postal_code": self.territory.postal_code,
            "territory": self.territory.status,
            "areas": list(self.territory.areas),
            "service_line": self.service_line.slug if self.service_line else None,
            "flags": self.flags,
            "matched": self.matched,
            "urgent": self.urgent,
            "offer": self.offer,
        }


def postal_normalize(value: str) -> str:
    value = (value or "").strip().upper().replace(" ", "")
    # US ZIP+4 routes by its first five digits.
    return value[:5] if re.fullmatch(r"\d{5}-?\d{4}", value) else value


def postal_matches(code: str, patterns: Iterable[str]) -> bool:
    for pattern in patterns:
        pattern = postal_normalize(str(pattern))
        if pattern.endswith("*") and code.startswith(pattern[:-1]):
            return True
        if code == pattern:
            return True
    return False


def lead_postal_code(lead: Lead) -> str:
    """The postal code the record states: the contact's, a form answer, or the
    lead's recorded facts — never one inferred from a phone number."""
    if lead.contact.postal_code:
        return postal_normalize(lead.contact.postal_code)
    if lead.facts.get("postal_code"):
        return postal_normalize(str(lead.facts["postal_code"]))
    for touch in lead.touches.all():
        for key in ("postal_code", "zip", "zip_code", "postcode"):
            if touch.answers.get(key):
                return postal_normalize(str(touch.answers[key]))
    return ""


def territory_check(lead: Lead) -> Territory:
    areas = list(ServiceArea.objects.filter(business_id=lead.business_id))
    code = lead_postal_code(lead)
    if not areas:
        return Territory("unrestricted", code)
    if not code:
        return Territory("unknown")
    inside = tuple(a.name for a in areas if postal_matches(code, a.postal_codes))
    return Territory("in_area" if inside else "out_of_area", code, inside)


def _request_text(lead: Lead) -> str:
    parts = [lead.request_text]
    for touch in lead.touches.all():
        parts.extend(str(v) for v in touch.answers.values() if isinstance(v, (str, int)))
    return " ".join(parts).lower()


def _contains(text: str, word: str) -> bool:
    return re.search(rf"\b{re.escape(word.lower())}\b", text) is not None


def scope_qualify(lead: Lead) -> tuple[ServiceLine | None, list[str], dict[str, list[str]]]:
    """The service line (kept when set; else the one line whose keywords match)
    and the scope flags, with the words that raised each."""
    text = _request_text(lead)
    service_line = lead.service_line
    matched: dict[str, list[str]] = {}
    if service_line is None:
        hits = [
            line
            for line in ServiceLine.objects.filter(business_id=lead.business_id)
            if any(_contains(text, k) for k in [line.slug, line.name, *line.keywords])
        ]
        # Two lines matching is a question for a person, not a guess.
        service_line = hits[0] if len(hits) == 1 else None
        if len(hits) > 1:
            matched["service_lines"] = [line.slug for line in hits]
    custom = lead.business.scope_keywords or {}
    flags: list[str] = []
    for flag, words in BUILT_IN_SCOPE.items():
        found = [w for w in (*words, *custom.get(flag, ())) if _contains(text, w)]
        if found:
            flags.append(flag)
            matched[flag] = found
    return service_line, flags, matched


def fit_score(lead: Lead, fit: Fit) -> tuple[int, list[dict[str, Any]]]:
    rules = lead.business.fit_rules or list(BUILT_IN_RULES)
    points_kinds = {point.kind for point in lead.contact.points.all() if point.is_valid}
    sms_granted = ConsentState.objects.filter(
        contact_point__contact=lead.contact, channel="sms", status=ConsentStatus.GRANTED
    ).exists()
    paid = any(touch.gclid or touch.fbclid for touch in lead.touches.all())
    facts = {
        "in_area": (
            fit.territory.status == "in_area",
            f"postal code {fit.territory.postal_code} in {', '.join(fit.territory.areas)}",
        ),
        "out_of_area": (
            fit.territory.status == "out_of_area",
            f"postal code {fit.territory.postal_code} outside every service area",
        ),
        "service_matched": (
            fit.service_line is not None,
            f"service line {fit.service_line.slug if fit.service_line else ''}",
        ),
        "has_phone": ("phone" in points_kinds, "a valid phone number"),
        "has_email": ("email" in points_kinds, "a valid email address"),
        "sms_consent": (sms_granted, "SMS consent granted"),
        "paid_click": (paid, "arrived from a paid click (gclid/fbclid)"),
        "emergency": (LeadException.EMERGENCY in fit.flags, "emergency words in the request"),
        "commercial": (LeadException.COMMERCIAL in fit.flags, "commercial property"),
        "warranty": (LeadException.WARRANTY in fit.flags, "a warranty claim"),
    }
    score, reasons = 0, []
    for rule in rules:
        applies, why = facts.get(rule["rule"], (False, ""))
        if applies:
            points = int(rule["points"])
            score += points
            reasons.append({"rule": rule["rule"], "points": points, "why": why})
    return score, reasons


def offer_match(lead: Lead, service_line: ServiceLine | None) -> dict[str, Any]:
    """The approved offer and templates for the line; only approved templates count."""
    if service_line is None:
        return {}
    templates = message_templates(lead.business_id)
    approved = [key for key in service_line.offer_templates if key in templates and templates[key].approved]
    return {"service_line": service_line.slug, "offer": service_line.offer, "templates": sorted(approved)}


def lead_fit(lead: Lead) -> Fit:
    """Gather the fit facts for a lead (reads only; `fit_apply` writes them)."""
    territory = territory_check(lead)
    service_line, flags, matched = scope_qualify(lead)
    if territory.status == "out_of_area":
        flags.insert(0, LeadException.OUT_OF_AREA)
    fit = Fit(territory=territory, service_line=service_line, flags=flags, matched=matched)
    fit.score, fit.reasons = fit_score(lead, fit)
    fit.offer = offer_match(lead, service_line)
    return fit
