"""The demo business: `load_demo` (and `make run`) call `demo_load`.

It loads `demo/acme-hvac.yaml` through the business file loader, gives the
team demo logins, and builds a realistic book of leads, one or more in every
stage, entirely through the record and CRM Sync services, so each step has its
receipt and the chain verifies. Each lead has a story told by its people over
the days it took (`PEOPLE`): texts both ways, Instagram messages, calls that
connected, voicemails and missed calls, notes; some of it in Spanish.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.ai.intents import intent_by_rules
from agents.ai.urgency import message_urgent
from agents.routing.sla import sla_deadline, sla_minutes
from crm.models import (
    ALL_EVENTS,
    Business,
    Call,
    ContactPointKind,
    Estimate,
    Invoice,
    Job,
    Lead,
    LeadException,
    Message,
    MessageTemplate,
    Stage,
    Task,
    TeamMember,
    WebhookSubscription,
)
from crm.services.business_file import BusinessLoadResult, business_file_load
from crm.services.consent import consent_record
from crm.services.lead_sync import (
    lead_assign,
    lead_flag_exception,
    lead_set_next_action,
    lead_set_routing_reason,
    lead_set_sla,
    lead_transition,
)
from crm.services.receipts import receipt_write
from crm.services.records import (
    appointment_record,
    contact_create,
    estimate_record,
    invoice_record,
    job_record,
    lead_open,
    payment_record,
    refund_record,
    task_create,
    tasks_close,
    touch_add,
)
from crm.services.webhooks import webhook_subscription_save
from devtools.demo_health import health_week
from devtools.demo_reviews import demo_google_business_ensure, demo_reviews_ask
from devtools.demo_spend import demo_spend_ensure
from devtools.demo_sync import demo_sync_ensure

DEMO_FILE = Path(settings.BASE_DIR) / "demo" / "acme-hvac.yaml"
DEMO_SLUG = "acme-hvac"
ADMIN_URL = "http://127.0.0.1:8000/admin/"
ACTOR = "load_demo"
DEMO_WEBHOOK_URL = "https://hooks.agency.invalid/leadops"
# Public like the demo passwords: never a secret.
DEMO_WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"leadops-demo-webhook-secret-0001").decode()
# Who gets a demo login, in the order the logins are printed.
DEMO_USERS = ("olivia", "mia", "sam", "sara", "tom")


def demo_password(username: str) -> str:
    """The demo login's password: printed on every run, so never a secret."""
    return f"{username}-leadops-demo"


@dataclass(frozen=True)
class DemoLogin:
    role: str
    username: str
    password: str


@dataclass
class DemoResult:
    load: BusinessLoadResult
    logins: list[DemoLogin]
    leads_created: int
    leads_total: int


def demo_load(path: Path = DEMO_FILE) -> DemoResult:
    """Load the demo business, its logins and its records, in one transaction.

    Idempotent: the business file load changes only what differs, passwords
    are reset only when they no longer match the printed ones, and records are
    built only while the business has no leads at all, so a second run adds
    nothing.
    """
    with transaction.atomic():
        load = business_file_load(path)
        business = Business.objects.select_for_update().get(pk=load.business.pk)
        logins = _logins_ensure(business)
        # Before the records, so the demo's leads fill the delivery log (dry run).
        _webhook_ensure(business)
        created = 0
        if not Lead.objects.filter(business=business).exists():
            created = _records_create(business)
        total = Lead.objects.filter(business=business).count()
    # After the records' commit: the sync reads Jobber's records into them,
    # and the shop's Google reviews are read (one matched to a review request).
    demo_sync_ensure(load.business)
    demo_google_business_ensure(load.business)
    demo_spend_ensure(load.business)
    return DemoResult(load=load, logins=logins, leads_created=created, leads_total=total)


def _webhook_ensure(business: Business) -> None:
    """An agency's receiver for every event. Its host never resolves (the
    .invalid name is reserved): in dry run the delivery log shows what would
    be sent; live, each delivery fails until the URL is changed."""
    if not WebhookSubscription.objects.filter(business=business, url=DEMO_WEBHOOK_URL).exists():
        webhook_subscription_save(
            business=business,
            url=DEMO_WEBHOOK_URL,
            events=[ALL_EVENTS],
            secret=DEMO_WEBHOOK_SECRET,
            description="the demo agency's reporting flow",
            actor=ACTOR,
        )


def _logins_ensure(business: Business) -> list[DemoLogin]:
    members = {m.user.get_username(): m for m in TeamMember.objects.filter(business=business).select_related("user")}
    logins = []
    for username in DEMO_USERS:
        member = members.get(username)
        if member is None:
            continue
        user, password = member.user, demo_password(username)
        changed = []
        if not user.is_staff:
            user.is_staff = True
            changed.append("is_staff")
        # A fresh user's password is unusable; checking one still costs a full
        # hash (Django evens out timing), a second a user on a slow machine.
        if not user.has_usable_password() or not user.check_password(password):
            user.set_password(password)
            changed.append("password")
        if changed:
            user.save(update_fields=changed)
        logins.append(DemoLogin(role=member.role, username=username, password=password))
    return logins


# --- records ------------------------------------------------------------------


# When something happened: minutes ago (today's news), or (days from today,
# "HH:MM") on the business's clock (history; days < 0).
When = int | tuple[int, str]


@dataclass(frozen=True)
class _Line:
    """One thing in a lead's history, as its people wrote it.

    kinds: `in` (the person texts), `dm` (the person writes on Instagram),
    `ack` (the approved acknowledgement, automated), `out` (a team member
    texts), `email` (a team member emails; `subject` first), `call` (a team
    member's call that connected; `text` is the call's summary), `voicemail`
    (one that reached voicemail), `missed` (the person called and nobody
    answered: a call-back task), `note` (a team member's note: a task done with
    its outcome, `title` first)."""

    at: When
    kind: str
    text: str = ""
    by: str = ""  # a team member's username; default the lead's setter
    seconds: int = 0
    title: str = ""


@dataclass(frozen=True)
class _Person:
    first: str
    last: str
    phone: str
    postal_code: str
    service: str
    source: str
    request: str
    setter: str | None
    stage: str
    amount: Decimal = Decimal("0.00")  # the estimate, where there is one
    refund: Decimal = Decimal("0.00")
    arrived: When = 60
    story: tuple[_Line, ...] = ()
    notes: str = ""  # what the team keeps on the contact
    # Another source the person came through first (a day before), e.g. a Meta lead form.
    also_from: str = ""


def _l(at: When, kind: str, text: str = "", **more: Any) -> _Line:
    return _Line(at, kind, text, **more)


# One lead per stage (two won: one with a partial refund, and a second engaged
# one), spread over both setters; people who write differently, some in Spanish.
PEOPLE = [
    _Person(
        "Nora",
        "Quinn",
        "+13125550121",
        "60614",
        "hvac",
        "site",
        "Furnace bangs when it starts up.",
        None,
        Stage.NEW,
        arrived=25,
        story=(_l(12, "missed"),),
    ),
    _Person(
        "Omar",
        "Haddad",
        "+13125550122",
        "60622",
        "plumbing",
        "gads-main",
        "Water heater leaking in the basement.",
        "sam",
        Stage.ASSIGNED,
        arrived=95,
        story=(
            _l(70, "missed"),
            _l(64, "in", "Hi, I just tried calling. Water is pooling under the heater, can someone come today?"),
        ),
    ),
    _Person(
        "Priya",
        "Patel",
        "+13125550123",
        "60657",
        "hvac",
        "tf-quote",
        "Quote for a new heat pump.",
        "sara",
        Stage.CONTACTED,
        arrived=(-1, "16:40"),
        story=(
            _l((-1, "16:41"), "ack"),
            _l((-1, "17:05"), "voicemail", "Left a voicemail: asked for a good time to talk about the heat pump."),
            _l(
                (-1, "17:07"),
                "out",
                "Hi Priya, Sara from Acme Heating & Air. I just left you a voicemail about "
                "your heat pump quote. When is a good time to talk?",
            ),
        ),
    ),
    _Person(
        "Lucas",
        "Meyer",
        "+13125550124",
        "60640",
        "hvac",
        "fb",
        "AC blows warm air.",
        "sam",
        Stage.ENGAGED,
        arrived=(-2, "11:20"),
        story=(
            _l((-2, "11:21"), "ack"),
            _l((-2, "12:02"), "in", "It's a Carrier, maybe 12 years old. Blowing warm air since Saturday."),
            _l(
                (-2, "12:10"),
                "out",
                "Thanks Lucas. When the thermostat calls for cooling, is the fan on the outside unit spinning?",
            ),
            _l((-1, "08:15"), "in", "Fan spins but sounds weak. Also there's ice on the copper line??"),
            _l(
                (-1, "08:31"),
                "out",
                "Ice on the line usually means an airflow or refrigerant problem, worth a "
                "visit. Are mornings good for you?",
            ),
            _l(150, "in", "mornings work. thursday if you can"),
        ),
    ),
    _Person(
        "Grace",
        "Kim",
        "+13125550125",
        "60618",
        "plumbing",
        "site",
        "Kitchen drain keeps clogging.",
        "sara",
        Stage.QUALIFIED,
        arrived=(-3, "09:05"),
        story=(
            _l((-3, "09:06"), "ack"),
            _l((-3, "09:40"), "in", "Kitchen sink backs up every week. We've tried Drano twice."),
            _l(
                (-3, "10:02"), "out", "Sorry to hear that, Grace. Do you own the home, and is it only the kitchen sink?"
            ),
            _l(
                (-3, "12:18"),
                "in",
                "We own it. Only the kitchen, but the basement floor drain gurgles when the dishwasher runs.",
            ),
            _l(
                (-2, "10:30"),
                "call",
                "Went through the symptoms: likely a partial blockage in the main line. "
                "She wants a camera inspection, weekday mornings.",
                seconds=312,
            ),
            _l(
                (-2, "10:36"),
                "note",
                "Owner-occupied two-flat; main line suspected; wants a camera inspection, mornings only.",
                title="Qualify the drain job",
            ),
        ),
        notes="Two-flat; the cleanout is in the basement behind the laundry.",
    ),
    _Person(
        "Diego",
        "Ramírez",
        "+13125550126",
        "60608",
        "hvac",
        "gads-main",
        "Furnace tune-up before winter.",
        "sara",
        Stage.BOOKED,
        arrived=(-4, "18:30"),
        story=(
            _l((-4, "18:31"), "ack"),
            _l(
                (-4, "19:02"),
                "in",
                "Hola, ¿hacen mantenimiento de calefacción? Quiero revisar el calentador antes del invierno.",
            ),
            _l(
                (-3, "08:12"),
                "out",
                "¡Hola Diego! Soy Sara de Acme. Sí, claro. Tenemos visitas por la mañana "
                "(9 a 11) o por la tarde (1 a 3). ¿Qué prefiere?",
            ),
            _l((-3, "08:40"), "in", "Por la mañana, por favor."),
            _l((-3, "08:52"), "out", "Listo, Diego. Le llega un mensaje con la fecha y la hora de la visita."),
        ),
        notes="Prefiere español. Entrada por el callejón.",
    ),
    _Person(
        "Hannah",
        "Scott",
        "+13125550127",
        "60613",
        "hvac",
        "ig",
        "Thermostat not reaching set temperature.",
        "sam",
        Stage.NO_SHOW,
        arrived=(-5, "20:15"),
        story=(
            _l(
                (-5, "20:15"),
                "dm",
                "Hi! Our thermostat says 68 but upstairs is freezing. Do you service Nest thermostats?",
            ),
            _l(
                (-4, "08:30"),
                "out",
                "Hi Hannah, Sam from Acme Heating & Air. Yes, and it is often airflow rather "
                "than the thermostat. Want a visit? Afternoons 1 to 3 are open.",
            ),
            _l((-4, "09:10"), "in", "Afternoon is great, thanks!"),
            _l((-1, "13:25"), "note", "Rang twice, nobody home; left a door hanger.", by="tom", title="Visit"),
            _l(
                (-1, "13:40"),
                "out",
                "Hi Hannah, Tom stopped by at 1:00 but nobody was home. Want to pick another time?",
            ),
        ),
    ),
    _Person(
        "Ethan",
        "Brooks",
        "+13125550128",
        "60625",
        "plumbing",
        "site",
        "Replace a 40-gallon water heater.",
        "sam",
        Stage.APPOINTMENT_HELD,
        arrived=(-3, "10:10"),
        story=(
            _l((-3, "10:11"), "ack"),
            _l((-3, "10:45"), "in", "It's a gas 40 gallon from 2009. Water is only lukewarm now."),
            _l(
                (-3, "11:00"),
                "out",
                "Thanks Ethan. At 15+ years replacing usually beats repairing. Tom can look "
                "at it and give you options. Mornings or afternoons?",
            ),
            _l((-3, "11:20"), "in", "Mornings"),
            _l(
                (-1, "10:55"),
                "note",
                "Tank corroded at the base, relief valve weeping. Recommend a 50-gallon "
                "replacement; estimate to follow.",
                by="tom",
                title="Visit",
            ),
        ),
    ),
    _Person(
        # Her visit, quote, job, invoice and payment live in the shop's Jobber:
        # they come back through the sync (devtools/demo_sync.py).
        "Rosa",
        "Delgado",
        "+13125550140",
        "60640",
        "plumbing",
        "gads-main",
        "Sump pump stopped running.",
        "sara",
        Stage.APPOINTMENT_HELD,
        arrived=(-5, "08:20"),
        story=(
            _l((-5, "08:21"), "ack"),
            _l((-5, "08:40"), "in", "Basement is damp and the sump pump doesn't kick on anymore. Can someone look?"),
            _l((-5, "09:05"), "out", "Hi Rosa, Sara from Acme. Tom can come tomorrow at 10. Does that work?"),
            _l((-5, "09:12"), "in", "Yes, 10 works. Thank you!"),
        ),
    ),
    _Person(
        "Maya",
        "Johnson",
        "+13125550129",
        "60647",
        "hvac",
        "tf-quote",
        "Central air for a two-flat.",
        "sara",
        Stage.ESTIMATE_SENT,
        Decimal("8450.00"),
        arrived=(-9, "14:00"),
        story=(
            _l((-9, "14:01"), "ack"),
            _l((-9, "14:30"), "in", "Two-flat, both units need central air. Ductwork exists upstairs only."),
            _l(
                (-9, "15:02"),
                "out",
                "Got it, Maya. Tom can measure both units. Would a weekday morning work for a visit?",
            ),
            _l((-9, "15:10"), "in", "Yes, mornings."),
            _l(
                (-5, "16:01"),
                "email",
                "Your estimate from Acme Heating & Air\n\nHi Maya,\n\nHere is the estimate "
                "for central air in both units, as Tom measured them. Reply with any question.\n\nSara",
            ),
            _l(
                (-4, "19:22"),
                "in",
                "Got the estimate, thanks. Does it include the permit and hauling away the old window units?",
            ),
            _l(
                (-3, "09:05"),
                "out",
                "It includes the permit and the haul-away. Happy to walk you through it by phone anytime.",
            ),
        ),
    ),
    _Person(
        "Robert",
        "Chen",
        "+13125550130",
        "60611",
        "hvac",
        "gads-main",
        "Full furnace and AC replacement.",
        "sam",
        Stage.WON,
        Decimal("12400.00"),
        arrived=(-10, "08:50"),
        # Answered a Meta lead ad the day before: his paid job goes back to Google and Meta.
        also_from="fb",
        story=(
            _l((-10, "08:51"), "ack"),
            _l(
                (-10, "09:05"),
                "call",
                "22-year-old furnace and AC; another company found a cracked heat "
                "exchanger. Wants both replaced together.",
                seconds=540,
            ),
            _l((-4, "10:02"), "in", "Let's do it. When can your crew start?"),
            _l(
                (-4, "10:15"),
                "out",
                "Great news, Robert! Tom's crew will be there at 8 a.m.; we'll text you the day before.",
            ),
            _l((-3, "17:40"), "in", "Crew was great and the house is warm again. Thank you!"),
        ),
    ),
    _Person(
        "Linda",
        "García",
        "+13125550131",
        "60616",
        "plumbing",
        "site",
        "Sump pump replacement.",
        "sara",
        Stage.WON,
        Decimal("1850.00"),
        Decimal("150.00"),
        arrived=(-11, "13:15"),
        story=(
            _l((-11, "13:16"), "ack"),
            _l((-11, "13:30"), "in", "¿Cuánto cuesta cambiar la bomba de sumidero? La mía hace mucho ruido."),
            _l(
                (-11, "13:40"),
                "out",
                "Hola Linda, soy Sara de Acme. La visita es gratis y el técnico le da el "
                "precio exacto. ¿Le queda bien una mañana de esta semana?",
            ),
            _l((-11, "14:05"), "in", "Sí, por la mañana. ¿Me puedo quedar con la bomba vieja? Mi hijo la recicla."),
            _l((-11, "14:12"), "out", "¡Claro que sí! Se lo anoto al técnico."),
            _l((-2, "12:30"), "in", "Muchas gracias, todo funciona perfecto."),
        ),
        notes="Habla español. Se queda con la bomba vieja (la recicla su hijo).",
    ),
    _Person(
        "Kevin",
        "O'Brien",
        "+13125550132",
        "60630",
        "hvac",
        "fb",
        "Second opinion on a cracked heat exchanger.",
        "sam",
        Stage.LOST,
        arrived=(-7, "17:45"),
        story=(
            _l((-7, "17:46"), "ack"),
            _l(
                (-7, "18:10"),
                "in",
                "Another company says my heat exchanger is cracked and quoted $3,900. Can you take a look?",
            ),
            _l(
                (-7, "18:25"),
                "out",
                "Happy to give a second opinion, Kevin. We can't quote without seeing it. "
                "Would tomorrow afternoon work?",
            ),
            _l((-6, "09:30"), "in", "Thanks, but we decided to go with them. Appreciate it."),
        ),
    ),
    _Person(
        "Tina",
        "Walsh",
        "+13175550133",
        "46201",
        "plumbing",
        "site",
        "Bathroom remodel plumbing.",
        "sara",
        Stage.DISQUALIFIED,
        arrived=(-5, "10:00"),
        story=(
            _l((-5, "10:20"), "in", "Do you cover Indianapolis? We're redoing our bathroom."),
            _l((-5, "10:34"), "out", "Sorry Tina, we only work in the Chicago area. Good luck with the remodel!"),
        ),
    ),
    _Person(
        "Marcus",
        "Lee",
        "+13125550134",
        "60660",
        "hvac",
        "ig",
        "Ductless mini-split quote.",
        "sam",
        Stage.UNRESPONSIVE,
        arrived=(-15, "21:10"),
        story=(
            _l((-15, "21:10"), "dm", "how much for a mini split"),
            _l(
                (-14, "09:00"),
                "out",
                "Hi Marcus, Sam from Acme Heating & Air. Happy to help with a mini-split. How many rooms?",
            ),
            _l((-13, "12:00"), "voicemail", "Left a voicemail about the mini-split quote."),
            _l((-12, "16:30"), "out", "Still interested in a mini-split quote? Reply anytime."),
            _l((-10, "11:00"), "voicemail", "Second voicemail; no reply to two texts."),
        ),
    ),
    _Person(
        "Sofía",
        "Torres",
        "+13125550135",
        "60623",
        "hvac",
        "ig",
        "Minisplit para un departamento.",
        "sara",
        Stage.ENGAGED,
        arrived=300,
        story=(
            _l(300, "dm", "¡Hola! Vi su anuncio. ¿Instalan minisplits? Mi departamento no tiene aire."),
            _l(
                281, "out", "¡Hola Sofía! Soy Sara de Acme. Sí, instalamos minisplits. ¿Cuántos cuartos quiere enfriar?"
            ),
            _l(35, "dm", "Dos cuartos y la sala. ¿Pueden venir a ver el espacio?"),
        ),
    ),
]

_FUNNEL: list[str] = [Stage.CONTACTED, Stage.ENGAGED, Stage.QUALIFIED, Stage.BOOKED]
# The stages each demo lead passes through after being assigned, in order.
PATHS: dict[str, list[str]] = {
    Stage.NEW: [],
    Stage.ASSIGNED: [],
    Stage.CONTACTED: _FUNNEL[:1],
    Stage.ENGAGED: _FUNNEL[:2],
    Stage.QUALIFIED: _FUNNEL[:3],
    Stage.BOOKED: _FUNNEL,
    Stage.NO_SHOW: [*_FUNNEL, Stage.NO_SHOW],
    Stage.APPOINTMENT_HELD: [*_FUNNEL, Stage.APPOINTMENT_HELD],
    Stage.ESTIMATE_SENT: [*_FUNNEL, Stage.APPOINTMENT_HELD, Stage.ESTIMATE_SENT],
    Stage.WON: [*_FUNNEL, Stage.APPOINTMENT_HELD, Stage.ESTIMATE_SENT, Stage.WON],
    Stage.LOST: [Stage.CONTACTED, Stage.ENGAGED, Stage.LOST],
    Stage.DISQUALIFIED: [Stage.DISQUALIFIED],
    Stage.UNRESPONSIVE: [Stage.CONTACTED, Stage.UNRESPONSIVE],
}

REASONS: dict[str, str] = {
    Stage.CONTACTED: "first call placed, left a voicemail and a text",
    Stage.ENGAGED: "the lead replied",
    Stage.QUALIFIED: "in the service area, owns the home, wants a visit",
    Stage.BOOKED: "visit booked",
    Stage.NO_SHOW: "nobody home at the visit time",
    Stage.APPOINTMENT_HELD: "technician visit done",
    Stage.ESTIMATE_SENT: "estimate emailed",
    Stage.WON: "estimate accepted",
    Stage.LOST: "chose another contractor on price",
    Stage.DISQUALIFIED: "outside the service area (Indianapolis)",
    Stage.UNRESPONSIVE: "no answer after five attempts",
}

NEXT_ACTIONS: dict[str, tuple[str, timedelta]] = {
    Stage.NEW: ("Assign an owner and call within 5 minutes", timedelta(minutes=5)),
    Stage.ASSIGNED: ("First call", timedelta(minutes=10)),
    Stage.CONTACTED: ("Call again if there is no reply", timedelta(hours=3)),
    Stage.ENGAGED: ("Ask about the system's age and the home's size", timedelta(hours=1)),
    Stage.QUALIFIED: ("Offer two visit times", timedelta(hours=2)),
    Stage.BOOKED: ("Confirm the visit the day before", timedelta(days=1)),
    Stage.NO_SHOW: ("Call to rebook the visit", timedelta(hours=1)),
    Stage.APPOINTMENT_HELD: ("Send the estimate", timedelta(days=1)),
    Stage.ESTIMATE_SENT: ("Follow up on the estimate", timedelta(days=2)),
}

# Where each demo lead came from, beyond the source itself.
TOUCHES: dict[str, dict[str, Any]] = {
    "gads-main": {
        "channel": "form",
        "campaign_id": "20412345678",
        "adgroup_id": "152345678901",
        "ad_id": "689012345678",
        "form_id": "gads-lead-form-1",
        "gclid": "EAIaIQobChMI-demo-acme-hvac",
        "utm": {
            "utm_source": "google",
            "utm_medium": "cpc",
            "utm_campaign": "furnace-repair-chicago",
            "utm_term": "furnace repair near me",
        },
        "landing_page": "https://acme-hvac.example/furnace-repair",
    },
    "fb": {
        "channel": "form",
        "campaign_id": "120210000000001",
        "ad_id": "120210000000777",
        "form_id": "987654321000001",
        "utm": {"utm_source": "facebook", "utm_medium": "paid_social", "utm_campaign": "fall-tune-up"},
    },
    "site": {
        "channel": "form",
        "utm": {"utm_source": "google", "utm_medium": "organic"},
        "landing_page": "https://acme-hvac.example/contact",
    },
    "tf-quote": {
        "channel": "form",
        "form_id": "tf-quote-v2",
        "answers": {"property": "house", "age_of_system": "15+ years"},
    },
    "ig": {"channel": "dm", "utm": {"utm_source": "instagram", "utm_medium": "dm"}},
}


# The sources whose forms carry a consent box the person ticked.
CONSENT_SOURCES = {"site", "gads-main", "tf-quote", "fb"}
CONSENT_TEXT = (
    "By ticking this box you agree that Acme Heating & Air may call and text you about your request. "
    "Reply STOP to opt out."
)


class _Builder:
    """Builds the demo book for one business; `now` fixes the clock once."""

    def __init__(self, business: Business) -> None:
        self.business = business
        self.now = timezone.now()
        self.zone = ZoneInfo(business.timezone)
        self.team = {
            m.user.get_username(): m for m in TeamMember.objects.filter(business=business).select_related("user")
        }
        self.lines = {line.slug: line for line in business.service_lines.all()}
        self.sources = {source.key: source for source in business.sources.all()}
        self.templates = {t.key: t for t in MessageTemplate.objects.filter(business=business)}
        self.invoice_number = 1000
        self.meta_leads = 0

    def at(self, days: int, hour: int, minute: int = 0) -> datetime:
        """A wall-clock time in the business's zone, `days` from today."""
        day = self.now.astimezone(self.zone).date() + timedelta(days=days)
        return datetime(day.year, day.month, day.day, hour, minute, tzinfo=self.zone)

    def when(self, when: When) -> datetime:
        if isinstance(when, int):
            return self.now - timedelta(minutes=when)
        days, clock = when
        hour, minute = (int(part) for part in clock.split(":"))
        # History only: a clock time later than now would be a future past.
        return min(self.at(days, hour, minute), self.now - timedelta(minutes=1))

    def lead(self, person: _Person) -> Lead:
        arrived = self.when(person.arrived)
        contact = contact_create(
            business=self.business,
            actor=ACTOR,
            first_name=person.first,
            last_name=person.last,
            phones=[person.phone],
            emails=[f"{person.first}.{person.last}@example.com".lower().replace("'", "")],
            postal_code=person.postal_code,
            notes=person.notes,
        )
        source = self.sources.get(person.source)
        lead = lead_open(
            contact=contact,
            actor=ACTOR,
            service_line=self.lines.get(person.service),
            request_text=person.request,
            source=source,
            touch=self.touch(person.source),
            received_at=arrived,
        )
        if person.also_from:
            touch_add(
                lead=lead,
                source=self.sources[person.also_from],
                received_at=arrived - timedelta(days=1),
                **self.touch(person.also_from),
            )
        if person.source in CONSENT_SOURCES:
            self.consent(lead, TOUCHES[person.source], arrived)
        if person.setter:
            lead_assign(lead, self.team[person.setter], actor=ACTOR, reason="demo: round-robin between the setters")
        else:
            # The manager queue: never an unowned lead (invariant 3), the reason on the lead.
            why = "demo: no setter covered this lead when it arrived"
            lead_set_routing_reason(lead, why, actor=ACTOR)
            lead_flag_exception(lead, LeadException.NO_ELIGIBLE_OWNER, actor=ACTOR, reason=why)
            lead_assign(lead, self.team["mia"], actor=ACTOR, reason=f"manager_queue: {why}", advance=False)
        if person.stage in (Stage.NEW, Stage.ASSIGNED):
            # Nobody has reached them yet: their first-response clock runs
            # from their arrival, as the new-lead step starts it.
            minutes = sla_minutes(lead)
            reason = f"first response within {minutes} business minutes"
            lead_set_sla(lead, sla_deadline(lead, arrived, minutes=minutes), actor=ACTOR, reason=reason)
        for n, line in enumerate(person.story):
            self.happened(lead, person, n, line)
        for stage in PATHS[person.stage]:
            self.before_stage(lead, person, stage)
            lead_transition(lead, stage, actor=person.setter or ACTOR, reason=REASONS[stage])
        if lead.is_open:
            action, due_in = NEXT_ACTIONS[person.stage]
            due_at = self.now + due_in
            if person.stage == Stage.BOOKED:
                due_at = self.at(1, 9)
            lead_set_next_action(lead, action, due_at, actor=person.setter or ACTOR, reason="demo")
            task_create(lead=lead, title=action, due_at=due_at, actor=person.setter or ACTOR)
        return lead

    def touch(self, source: str) -> dict[str, Any]:
        """Where the lead came from; a Meta lead form's touch with its own lead id, as Meta gives one."""
        touch = dict(TOUCHES.get(source, {"channel": "form"}))
        if source == "fb":
            self.meta_leads += 1
            touch["meta_lead_id"] = f"{1200000000000000 + self.meta_leads}"
        return touch

    def consent(self, lead: Lead, touch: dict[str, Any], at: datetime) -> None:
        """The form's ticked box: calls and texts about the request."""
        point = lead.contact.points.filter(kind=ContactPointKind.PHONE).first()
        if point is None:
            return
        evidence = {"text_shown": CONSENT_TEXT, "checkbox_value": "yes", "page_url": touch.get("landing_page", "")}
        for channel in ("sms", "voice"):
            consent_record(
                contact_point=point,
                channel=channel,
                granted=True,
                basis="form_disclosure",
                actor=ACTOR,
                evidence={**evidence, "at": at.isoformat()},
                at=at,
            )

    def happened(self, lead: Lead, person: _Person, n: int, line: _Line) -> None:
        """One line of the lead's story, at its time, by its person."""
        at = self.when(line.at)
        by = line.by or person.setter or "mia"
        key = f"demo:{lead.public_id}:{n}"
        if line.kind == "ack":
            status = Message.Status.DRY_RUN if person.stage == Stage.CONTACTED else Message.Status.DELIVERED
            self.message_out(lead, self.acknowledgement(lead), at, key, status=status, template_key="ack_sms")
        elif line.kind == "out":
            self.message_out(lead, line.text, at, key, actor=by)
        elif line.kind == "email":
            subject, _, body = line.text.partition("\n\n")
            email = lead.contact.points.filter(kind=ContactPointKind.EMAIL).first()
            self.message_out(
                lead, body, at, key, actor=by, channel="email", subject=subject, to=email.value if email else ""
            )
        elif line.kind in ("in", "dm"):
            self.message_in(lead, line.text, at, channel="sms" if line.kind == "in" else "dm")
        elif line.kind in ("call", "voicemail"):
            self.call_out(lead, line, at, by)
        elif line.kind == "missed":
            self.call_missed(lead, at)
        elif line.kind == "note":
            member = self.team[by]
            task = task_create(lead=lead, title=line.title, due_at=at, actor=by, kind=Task.Kind.FOLLOW_UP, owner=member)
            tasks_close(lead, Task.objects.filter(pk=task.pk), actor=by, outcome=line.text)
        else:
            raise ValueError(f"unknown story line kind {line.kind!r}")

    def before_stage(self, lead: Lead, person: _Person, stage: str) -> None:
        """The records that make a stage true, written just before the move."""
        actor = person.setter or ACTOR
        tech = self.team.get("tom")
        if stage == Stage.BOOKED:
            if person.stage == Stage.BOOKED:
                start, status = self.at(2, 9), "scheduled"
            elif person.stage == Stage.NO_SHOW:
                start, status = self.at(-1, 13), "no_show"
            elif person.stage == Stage.APPOINTMENT_HELD:
                start, status = self.at(-1, 9), "held"
            else:
                start, status = self.at(-6, 9), "held"
            appointment_record(
                lead=lead,
                starts_at=start,
                ends_at=start + timedelta(hours=2),
                actor=actor,
                assigned_to=tech,
                status=status,
                location=f"{person.postal_code} (home visit)",
            )
        elif stage == Stage.ESTIMATE_SENT:
            won = person.stage == Stage.WON
            estimate_record(
                lead=lead,
                amount=person.amount,
                currency=self.business.currency,
                actor=actor,
                status=Estimate.Status.ACCEPTED if won else Estimate.Status.SENT,
                description=person.request,
                sent_at=self.at(-5, 16),
                decided_at=self.at(-4, 10) if won else None,
            )
        elif stage == Stage.WON:
            self.job_and_payment(lead, person)

    def job_and_payment(self, lead: Lead, person: _Person) -> None:
        """A completed job, its paid invoice and the payment, then any partial refund."""
        estimate = lead.estimates.get()
        job = job_record(
            lead=lead,
            actor=ACTOR,
            estimate=estimate,
            technician=self.team.get("tom"),
            status=Job.Status.COMPLETED,
            scheduled_for=self.at(-3, 8),
            completed_at=self.at(-3, 15),
        )
        self.invoice_number += 1
        invoice = invoice_record(
            lead=lead,
            amount=estimate.amount,
            currency=estimate.currency,
            actor=ACTOR,
            job=job,
            number=f"INV-{self.invoice_number}",
            status=Invoice.Status.PAID,
            issued_at=self.at(-3, 16),
            due_at=self.at(11, 16),
        )
        payment = payment_record(
            lead=lead,
            amount=estimate.amount,
            currency=estimate.currency,
            actor=ACTOR,
            received_at=self.at(-2, 11),
            invoice=invoice,
        )
        if person.refund:
            refund_record(
                payment=payment,
                amount=person.refund,
                actor="mia",
                refunded_at=self.at(-1, 10),
                reason="Disposal fee waived: the old pump was recycled by the customer",
            )

    def acknowledgement(self, lead: Lead) -> str:
        template = self.templates["ack_sms"]
        owner = lead.owner.display_name.split()[0] if lead.owner and lead.owner.display_name else "our team"
        return template.body.format_map(
            _Blanks(first_name=lead.contact.first_name, business=self.business.name, owner_first_name=owner)
        )

    def message_out(
        self,
        lead: Lead,
        body: str,
        at: datetime,
        key: str,
        *,
        status: str = Message.Status.DELIVERED,
        actor: str = ACTOR,
        channel: str = "sms",
        template_key: str = "",
        subject: str = "",
        to: str = "",
    ) -> Message:
        point = lead.contact.points.filter(kind=ContactPointKind.PHONE).first()
        sent = status != Message.Status.DRY_RUN
        return Message.objects.create(
            business=self.business,
            lead=lead,
            contact=lead.contact,
            contact_point=point if channel == "sms" else None,
            direction="out",
            channel=channel,
            status=status,
            body=body,
            subject=subject,
            template_key=template_key,
            from_number=self.twilio_number() if channel == "sms" else "",
            to=to or (point.value if point else ""),
            idempotency_key=key,
            actor=actor,
            automated=bool(template_key),
            created_at=at,
            sent_at=at if sent else None,
            delivered_at=at + timedelta(seconds=4) if status == Message.Status.DELIVERED else None,
        )

    def message_in(self, lead: Lead, body: str, at: datetime, *, channel: str = "sms") -> Message:
        point = lead.contact.points.filter(kind=ContactPointKind.PHONE).first()
        # Read as capture reads every message in: the inbox shows what each asks for.
        intent = intent_by_rules(body)
        return Message.objects.create(
            business=self.business,
            lead=lead,
            contact=lead.contact,
            contact_point=point if channel == "sms" else None,
            direction="in",
            channel=channel,
            status=Message.Status.RECEIVED,
            body=body,
            from_number=(point.value if point else "") if channel == "sms" else "",
            to=self.twilio_number() if channel == "sms" else "",
            intent=intent.intent,
            intent_confidence=intent.confidence,
            intent_source=intent.source,
            urgent=message_urgent(self.business, body),
            created_at=at,
        )

    def call_out(self, lead: Lead, line: _Line, at: datetime, by: str) -> Call:
        point = lead.contact.points.filter(kind=ContactPointKind.PHONE).first()
        answered = line.kind == "call"
        call = Call.objects.create(
            business=self.business,
            lead=lead,
            contact=lead.contact,
            direction="out",
            status="completed",
            from_number=self.twilio_number(),
            to=point.value if point else "",
            duration_seconds=line.seconds or (None if answered else 28),
            answered_by="human" if answered else "machine_end_beep",
            transcript=line.text,
            started_at=at,
        )
        receipt_write(
            business=self.business,
            lead=lead,
            subject=call.public_id,
            actor=by,
            action="call.logged",
            after={"direction": "out", "answered_by": call.answered_by, "duration": call.duration_seconds},
        )
        return call

    def call_missed(self, lead: Lead, at: datetime) -> Call:
        """A call nobody answered, and the call-back task it leaves the owner
        (the demo business texts back a missed call: here that stays unsent,
        so loading the demo sends nothing)."""
        point = lead.contact.points.filter(kind=ContactPointKind.PHONE).first()
        call = Call.objects.create(
            business=self.business,
            lead=lead,
            contact=lead.contact,
            direction="in",
            status="no-answer",
            from_number=point.value if point else "",
            to=self.twilio_number(),
            started_at=at,
        )
        task = task_create(
            lead=lead,
            title=f"Call back {call.from_number or 'the caller'} (missed call)",
            due_at=at + timedelta(minutes=self.business.first_response_minutes),
            actor=ACTOR,
            kind=Task.Kind.CALL_BACK,
            reason="missed call",
        )
        receipt_write(
            business=self.business,
            lead=lead,
            subject=call.public_id,
            actor=ACTOR,
            action="call.missed",
            reason="nobody answered the main line",
            after={"status": call.status, "from": call.from_number, "task": task.public_id},
        )
        return call

    def twilio_number(self) -> str:
        source = self.sources.get("main-line")
        return str(source.config.get("phone_number", "")) if source else ""


class _Blanks(dict[str, str]):
    """Template values; a placeholder the demo does not know stays as written."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _records_create(business: Business) -> int:
    builder = _Builder(business)
    for person in PEOPLE:
        builder.lead(person)
    demo_reviews_ask(business)
    return len(PEOPLE) + health_week(builder)
