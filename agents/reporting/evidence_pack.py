"""The 10DLC evidence pack: what a carrier's brand and campaign registration
asks for, assembled from what LeadOps already holds, with a pre-flight that
names what is missing or likely to be refused before anyone submits it.

A registration (The Campaign Registry, through Twilio) is refused most often
for thin opt-in evidence, and for sample messages that do not say who is
texting or how to stop. So the pack holds:

- the business: its name, legal name, website and privacy policy URL (the
  business file's `business:` keys);
- how people opt in: each form source and the consent text it shows;
- sample messages: the approved SMS templates, rendered with sample values;
- the STOP and HELP answers LeadOps sends (agents/consent/keywords.py);
- message volume: texts sent per local day over the last 30 days;
- consent evidence: the latest SMS grants, each with its basis, time, source
  and the words the person agreed to (phone numbers masked).

The pre-flight (`preflight`) is a list of findings, each `missing` (the
registration cannot be filed) or `risky` (likely refused): no legal name,
website or privacy policy; a form source without consent text, or consent
text that does not name the business, texts, or STOP; a sample without the
business name; no sample with opt-out language; a URL shortener in a sample;
no consent evidence on record.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Count, Q
from django.db.models.functions import TruncDate

from agents.consent.keywords import confirmation_text
from agents.playbook.templates import TemplateRenderError, text_render
from crm.models import Business, ConsentEvent, Message, MessageTemplate, Source

VOLUME_DAYS = 30
CONSENT_SAMPLE = 10
FORM_PROVIDERS = ("hosted_form", "website", "typeform")
# Link shorteners carriers filter: a registration's samples must show the
# business's own domain.
SHORTENERS = re.compile(
    r"\b(bit\.ly|tinyurl\.com|goo\.gl|t\.co|ow\.ly|is\.gd|buff\.ly|rebrand\.ly|cutt\.ly|shorturl\.at|tiny\.cc|rb\.gy)/",
    re.IGNORECASE,
)
OPT_OUT_WORDS = re.compile(r"\b(STOP|unsubscribe|opt[ -]?out)\b", re.IGNORECASE)
TEXT_WORDS = re.compile(r"\b(text|texts|SMS|messages?)\b", re.IGNORECASE)
# What a sample template's placeholders read as in the pack.
SAMPLE_VALUES = {
    "first_name": "Jordan",
    "last_name": "Lee",
    "owner_first_name": "Sam",
    "service": "furnace repair",
    "business_phone": "(312) 555-0100",
    "appointment_time": "Tue, Dec 8 at 9:00 AM",
    "slot_options": "Tue 9-11 AM or Wed 1-3 PM",
}

MISSING, RISKY = "missing", "risky"


@dataclass(frozen=True)
class Finding:
    level: str  # missing | risky
    what: str  # where: "business", "form <key>", "template <key>", "consent"
    why: str


@dataclass(frozen=True)
class FormEvidence:
    source: str
    provider: str
    consent_text: str
    url: str
    # The form as a phone shows it (a PNG beside the JSON), when the command took it.
    screenshot: str = ""


@dataclass(frozen=True)
class Sample:
    template: str
    body: str


@dataclass(frozen=True)
class ConsentSample:
    at: datetime
    phone: str  # masked
    basis: str
    source: str
    text: str


@dataclass
class Pack:
    business: dict[str, str]
    forms: list[FormEvidence]
    samples: list[Sample]
    stop_help: dict[str, str]
    volume: list[tuple[str, int]]  # (local date, texts sent)
    consent: list[ConsentSample]
    made_at: datetime
    findings: list[Finding] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["made_at"] = self.made_at.isoformat()
        data["consent"] = [{**c, "at": c["at"].isoformat()} for c in data["consent"]]
        data["volume"] = [{"day": day, "texts": n} for day, n in self.volume]
        return data


def _mask(phone: str) -> str:
    digits = [c for c in phone if c.isdigit()]
    return "•" * max(len(digits) - 4, 0) + "".join(digits[-4:])


def _forms(business: Business, base_url: str) -> list[FormEvidence]:
    """Each form source and the consent text it shows: the hosted form's
    own; for a form on the business's site (or Typeform), the words the
    latest person who opted in through it saw, as its capture recorded them."""
    sources = Source.objects.filter(business=business, provider__in=FORM_PROVIDERS, is_active=True).order_by("key")
    forms = []
    for s in sources:
        text = str((s.config or {}).get("consent_text") or "")
        if not text:
            seen = (
                ConsentEvent.objects.filter(business=business, action="grant", channel="sms")
                .filter(Q(inbound_event__source=s) | Q(contact_point__contact__leads__touches__source=s))
                .exclude(evidence={})
                .order_by("-at", "-pk")
                .values_list("evidence", flat=True)
                .first()
            )
            text = _evidence_text(seen or {})
        url = f"{base_url}/f/{s.key}/" if s.provider == "hosted_form" else ""
        forms.append(FormEvidence(source=s.key, provider=s.provider, consent_text=text, url=url))
    return forms


def _samples(business: Business) -> list[Sample]:
    context = {
        **SAMPLE_VALUES,
        "business": business.name,
        "booking_url": f"https://{business.slug}.example/book",
        # The review request's link is LeadOps' own redirect, never a public shortener.
        "review_url": f"https://{business.slug}.example/r/Xk3b9QpL",
    }
    samples = []
    for template in MessageTemplate.objects.filter(business=business, channel="sms", approved=True).order_by("key"):
        try:
            body = text_render(template.body, context)
        except TemplateRenderError:
            body = template.body
        samples.append(Sample(template.key, body))
    return samples


def _volume(business: Business, now: datetime) -> list[tuple[str, int]]:
    zone = ZoneInfo(business.timezone)
    rows = (
        Message.objects.filter(
            business=business, channel="sms", direction="out", created_at__gte=now - timedelta(days=VOLUME_DAYS)
        )
        .annotate(day=TruncDate("created_at", tzinfo=zone))
        .values("day")
        .annotate(n=Count("id"))
        .order_by("day")
    )
    return [(row["day"].isoformat(), row["n"]) for row in rows]


def _consent(business: Business) -> list[ConsentSample]:
    events = (
        ConsentEvent.objects.filter(business=business, channel="sms", action="grant")
        .select_related("contact_point")
        .order_by("-at", "-pk")[:CONSENT_SAMPLE]
    )
    return [
        ConsentSample(
            at=e.at,
            phone=_mask(e.contact_point.value),
            basis=e.basis,
            source=str((e.evidence or {}).get("page_url") or (e.evidence or {}).get("source") or ""),
            text=_evidence_text(e.evidence or {}),
        )
        for e in events
    ]


def _evidence_text(evidence: dict[str, Any]) -> str:
    # The words the person agreed to, as each capture records them.
    return str(evidence.get("text_shown") or evidence.get("consent_text") or evidence.get("text") or "")


def evidence_pack(business: Business, *, now: datetime, base_url: str) -> Pack:
    """The pack for one business, with its pre-flight findings."""
    registration = business.registration or {}
    pack = Pack(
        business={
            "name": business.name,
            "legal_name": str(registration.get("legal_name") or ""),
            "website": str(registration.get("website") or ""),
            "privacy_policy_url": str(registration.get("privacy_policy_url") or ""),
            "timezone": business.timezone,
        },
        forms=_forms(business, base_url),
        samples=_samples(business),
        stop_help={kind: confirmation_text(kind, business.name) for kind in ("opt_out", "help", "opt_in")},
        volume=_volume(business, now),
        consent=_consent(business),
        made_at=now,
    )
    pack.findings = preflight(pack)
    return pack


def preflight(pack: Pack) -> list[Finding]:
    """What is missing or likely to be refused, most serious first."""
    found: list[Finding] = []
    name = pack.business["name"]
    for key, label in (
        ("legal_name", "the legal name"),
        ("website", "a website"),
        ("privacy_policy_url", "a privacy policy URL"),
    ):
        if not pack.business[key]:
            found.append(Finding(MISSING, "business", f"no {label}: add `{key}` to the business file's business:"))
    if not pack.forms:
        found.append(Finding(MISSING, "forms", "no form source: the registration must show where people opt in"))
    for form in pack.forms:
        where = f"form {form.source}"
        text = form.consent_text
        if not text:
            found.append(Finding(MISSING, where, "the form shows no consent text next to the phone field"))
            continue
        if name.lower() not in text.lower():
            found.append(Finding(RISKY, where, f"the consent text does not name {name}"))
        if not TEXT_WORDS.search(text):
            found.append(Finding(RISKY, where, "the consent text does not say the person will get texts"))
        if not OPT_OUT_WORDS.search(text):
            found.append(Finding(RISKY, where, "the consent text does not say how to stop (Reply STOP)"))
    if not pack.samples:
        found.append(Finding(MISSING, "templates", "no approved SMS template to show as a sample message"))
    for sample in pack.samples:
        where = f"template {sample.template}"
        if name.lower() not in sample.body.lower():
            found.append(Finding(RISKY, where, f"the sample does not say it is {name} texting"))
        if SHORTENERS.search(sample.body):
            found.append(Finding(RISKY, where, "the sample uses a link shortener: carriers filter them"))
    if pack.samples and not any(OPT_OUT_WORDS.search(s.body) for s in pack.samples):
        found.append(Finding(RISKY, "templates", "no sample says how to opt out (Reply STOP)"))
    if not pack.consent:
        found.append(Finding(RISKY, "consent", "no SMS consent on record to show as opt-in evidence"))
    return sorted(found, key=lambda f: (f.level != MISSING, f.what))
