"""The demo business: `load_demo` (and `make run`) call `demo_load`.

It loads `demo/acme-hvac.yaml` through the business file loader, gives the
team demo logins, and builds a realistic book of leads, one or more in every
stage, entirely through the record and CRM Sync services, so each step has its
receipt and the chain verifies.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from crm.models import (
    Business,
    ContactPointKind,
    Estimate,
    Invoice,
    Job,
    Lead,
    LeadException,
    Message,
    MessageTemplate,
    Stage,
    TeamMember,
)
from crm.services.business_file import BusinessLoadResult, business_file_load
from crm.services.lead_sync import (
    lead_assign,
    lead_flag_exception,
    lead_set_next_action,
    lead_set_routing_reason,
    lead_transition,
)
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
)

DEMO_FILE = Path(settings.BASE_DIR) / "demo" / "acme-hvac.yaml"
DEMO_SLUG = "acme-hvac"
ADMIN_URL = "http://127.0.0.1:8000/admin/"
ACTOR = "load_demo"
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
        created = 0
        if not Lead.objects.filter(business=business).exists():
            created = _records_create(business)
        total = Lead.objects.filter(business=business).count()
    return DemoResult(load=load, logins=logins, leads_created=created, leads_total=total)


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
        if not user.check_password(password):
            user.set_password(password)
            changed.append("password")
        if changed:
            user.save(update_fields=changed)
        logins.append(DemoLogin(role=member.role, username=username, password=password))
    return logins


# --- records ------------------------------------------------------------------


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


# One lead per stage (two won: one with a partial refund), spread over both setters.
PEOPLE = [
    _Person(
        "Nora", "Quinn", "+13125550121", "60614", "hvac", "site", "Furnace bangs when it starts up.", None, Stage.NEW
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
    ),
    _Person("Lucas", "Meyer", "+13125550124", "60640", "hvac", "fb", "AC blows warm air.", "sam", Stage.ENGAGED),
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
    ),
    _Person(
        "Diego",
        "Ramirez",
        "+13125550126",
        "60608",
        "hvac",
        "gads-main",
        "Furnace tune-up before winter.",
        "sam",
        Stage.BOOKED,
    ),
    _Person(
        "Hannah",
        "Scott",
        "+13125550127",
        "60613",
        "hvac",
        "ig",
        "Thermostat not reaching set temperature.",
        "sara",
        Stage.NO_SHOW,
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
    ),
    _Person(
        "Linda",
        "Garcia",
        "+13125550131",
        "60616",
        "plumbing",
        "site",
        "Sump pump replacement.",
        "sara",
        Stage.WON,
        Decimal("1850.00"),
        Decimal("150.00"),
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
    ),
    _Person(
        "Marcus", "Lee", "+13125550134", "60660", "hvac", "ig", "Ductless mini-split quote.", "sam", Stage.UNRESPONSIVE
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

    def at(self, days: int, hour: int) -> datetime:
        """A wall-clock hour in the business's zone, `days` from today."""
        day = self.now.astimezone(self.zone).date() + timedelta(days=days)
        return datetime(day.year, day.month, day.day, hour, tzinfo=self.zone)

    def lead(self, index: int, person: _Person) -> Lead:
        contact = contact_create(
            business=self.business,
            actor=ACTOR,
            first_name=person.first,
            last_name=person.last,
            phones=[person.phone],
            emails=[f"{person.first}.{person.last}@example.com".lower().replace("'", "")],
            postal_code=person.postal_code,
        )
        source = self.sources.get(person.source)
        lead = lead_open(
            contact=contact,
            actor=ACTOR,
            service_line=self.lines.get(person.service),
            request_text=person.request,
            source=source,
            touch=dict(TOUCHES.get(person.source, {"channel": "form"})),
            received_at=self.now - timedelta(hours=2 * index + 1),
        )
        if person.setter:
            lead_assign(lead, self.team[person.setter], actor=ACTOR, reason="demo: round-robin between the setters")
        else:
            # The manager queue: never an unowned lead (invariant 3), the reason on the lead.
            why = "demo: no setter covered this lead when it arrived"
            lead_set_routing_reason(lead, why, actor=ACTOR)
            lead_flag_exception(lead, LeadException.NO_ELIGIBLE_OWNER, actor=ACTOR, reason=why)
            lead_assign(lead, self.team["mia"], actor=ACTOR, reason=f"manager_queue: {why}", advance=False)
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

    def before_stage(self, lead: Lead, person: _Person, stage: str) -> None:
        """The records that make a stage true, written just before the move."""
        actor = person.setter or ACTOR
        tech = self.team.get("tom")
        if stage == Stage.CONTACTED:
            self.message_out(
                lead, "ack_sms", Message.Status.DRY_RUN if person.stage == Stage.CONTACTED else Message.Status.DELIVERED
            )
        elif stage == Stage.ENGAGED:
            self.message_in(lead, "Yes please, mornings work best for me.")
        elif stage == Stage.BOOKED:
            if person.stage == Stage.BOOKED:
                start, status = self.at(2, 9), "scheduled"
            elif person.stage == Stage.NO_SHOW:
                start, status = self.at(-1, 13), "no_show"
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

    def message_out(self, lead: Lead, template_key: str, status: str) -> Message:
        template = self.templates[template_key]
        owner = lead.owner.display_name.split()[0] if lead.owner and lead.owner.display_name else "our team"
        body = template.body.format_map(
            _Blanks(first_name=lead.contact.first_name, business=self.business.name, owner_first_name=owner)
        )
        sent_at = self.now - timedelta(minutes=30)
        point = lead.contact.points.filter(kind=ContactPointKind.PHONE).first()
        return Message.objects.create(
            business=self.business,
            lead=lead,
            contact=lead.contact,
            contact_point=point,
            direction="out",
            channel=template.channel,
            status=status,
            body=body,
            template_key=template_key,
            from_number=self.twilio_number(),
            to=point.value if point else "",
            idempotency_key=f"demo:{lead.public_id}:{template_key}",
            actor=ACTOR,
            sent_at=sent_at if status != Message.Status.DRY_RUN else None,
            delivered_at=sent_at + timedelta(seconds=4) if status == Message.Status.DELIVERED else None,
        )

    def message_in(self, lead: Lead, body: str) -> Message:
        point = lead.contact.points.filter(kind=ContactPointKind.PHONE).first()
        return Message.objects.create(
            business=self.business,
            lead=lead,
            contact=lead.contact,
            contact_point=point,
            direction="in",
            channel="sms",
            status=Message.Status.RECEIVED,
            body=body,
            from_number=point.value if point else "",
            to=self.twilio_number(),
        )

    def twilio_number(self) -> str:
        source = self.sources.get("main-line")
        return str(source.config.get("phone_number", "")) if source else ""


class _Blanks(dict[str, str]):
    """Template values; a placeholder the demo does not know stays as written."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _records_create(business: Business) -> int:
    builder = _Builder(business)
    for index, person in enumerate(PEOPLE):
        builder.lead(index, person)
    return len(PEOPLE)
