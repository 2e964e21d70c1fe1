"""The demo shop's last week of texts to the people who went no further: the
volume the SMS health page reads (agents/reporting/sms_health.py), with one
automation it catches.

Forty-four leads came in over the last six days and never got past the first
texts: each got the acknowledgement and, fifteen minutes later, the no-reply
path's nudge. A few numbers could not take them (unreachable, a landline, one
filtered by the carrier); some people wrote back that they were sorted; three
answered the nudge with STOP. Three opt-outs on 44 nudges is 6.8 per 100, past
the default limit of 1: the health check run at the end of the load pauses
the no_reply sequence and tells the manager — what the demo's SMS health page,
exception report and brief then show.

Built as the rest of the demo book is (devtools/demo.py): each lead through
the CRM services with its receipts, the texts as the dispatcher leaves them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Protocol

from agents.reporting.sms_health import sms_health_check
from crm.models import Business, Enrollment, Lead, Message, Sequence, Source, Stage, TeamMember
from crm.services.consent import consent_record
from crm.services.lead_sync import lead_assign, lead_close
from crm.services.records import contact_create, lead_open


class Book(Protocol):
    """What this takes of the demo's builder (devtools/demo.py), which calls it."""

    business: Business
    now: datetime
    team: dict[str, TeamMember]
    sources: dict[str, Source]

    def touch(self, source: str) -> dict[str, Any]: ...
    def consent(self, lead: Lead, touch: dict[str, Any], at: datetime) -> None: ...
    def acknowledgement(self, lead: Lead) -> str: ...
    def message_out(
        self, lead: Lead, body: str, at: datetime, key: str, *, status: str = ..., template_key: str = ...
    ) -> Message: ...
    def message_in(self, lead: Lead, body: str, at: datetime) -> Message: ...


ACTOR = "load_demo"
PEOPLE = 44
FIRST = [
    "Aaron",
    "Bianca",
    "Caleb",
    "Dana",
    "Eli",
    "Fatima",
    "Gus",
    "Hana",
    "Ivan",
    "Jade",
    "Kurt",
    "Lena",
    "Marco",
    "Nia",
    "Otto",
    "Paula",
    "Quinn",
    "Rhea",
    "Saul",
    "Tess",
    "Umar",
    "Vera",
    "Wade",
    "Xena",
    "Yusuf",
    "Zoe",
]
LAST = [
    "Abbott",
    "Barnes",
    "Castro",
    "Dunn",
    "Ellis",
    "Flores",
    "Grant",
    "Hayes",
    "Ibarra",
    "Jensen",
    "Khan",
    "Lowe",
    "Moss",
    "Novak",
    "Ortiz",
    "Price",
]
SOURCES = ("gads-main", "site", "fb", "tf-quote")
ZIPS = ("60614", "60622", "60657", "60618", "60640", "60608", "60625", "60647")
# Who could not be reached, and how Twilio said so: (person, status, code).
CARRIER_ERRORS = {
    5: (Message.Status.UNDELIVERED, "30003"),
    17: (Message.Status.UNDELIVERED, "30003"),
    23: (Message.Status.FAILED, "30006"),
    31: (Message.Status.UNDELIVERED, "30007"),
}
# Errors of the number itself (unreachable, a landline): every text to it fails.
NUMBER_ERRORS = ("30003", "30006")
STOPPED = (8, 21, 37)  # answered the nudge with STOP
SORTED_OUT = {
    3: "Thanks, we got it fixed already.",
    12: "No thanks, went with someone closer.",
    19: "We're all set, thank you.",
    28: "Not needed anymore",
    34: "Got a quote elsewhere, thanks",
    41: "all good now",
}
NUDGE = (
    "Hi {first}, Sam from Acme Heating & Air here. Is now a good time to talk about your request? "
    "Reply STOP to opt out."
)


def health_week(b: Book) -> int:
    """The week's texts; returns how many leads it added."""
    no_reply = Sequence.objects.get(business=b.business, key="no_reply")
    sam = b.team["sam"]
    for i in range(PEOPLE):
        arrived = b.now - timedelta(days=6) + timedelta(minutes=i * 190 + 7)
        first, last = FIRST[i % len(FIRST)], LAST[(i * 7) % len(LAST)]
        contact = contact_create(
            business=b.business,
            actor=ACTOR,
            first_name=first,
            last_name=last,
            phones=[f"+1312555{3000 + i:04d}"],
            postal_code=ZIPS[i % len(ZIPS)],
        )
        source = SOURCES[i % len(SOURCES)]
        touch = b.touch(source)
        lead = lead_open(
            contact=contact,
            actor=ACTOR,
            source=b.sources[source],
            touch=touch,
            request_text="Furnace or AC service request.",
            received_at=arrived,
        )
        b.consent(lead, touch, arrived)
        lead_assign(lead, sam, actor=ACTOR, reason="demo: round-robin between the setters")
        status, code = CARRIER_ERRORS.get(i, (Message.Status.DELIVERED, ""))
        ack = b.message_out(
            lead, b.acknowledgement(lead), arrived + timedelta(minutes=1), f"demo-week-ack-{i}", template_key="ack_sms"
        )
        enrollment = Enrollment.objects.create(
            business=b.business,
            lead=lead,
            contact=contact,
            sequence=no_reply,
            status=Enrollment.Status.STOPPED,
            stop_reason="stage_left",
            next_step_index=1,
            ended_at=arrived + timedelta(days=1),
        )
        nudge = b.message_out(
            lead,
            NUDGE.format(first=first),
            arrived + timedelta(minutes=16),
            f"seq:{enrollment.public_id}:0",
            template_key="nudge_sms",
            status=status,
        )
        Message.objects.filter(pk=nudge.pk).update(enrollment=enrollment, error_code=code)
        if code in NUMBER_ERRORS:
            # A number that cannot take texts failed the acknowledgement too; a
            # carrier's filter judges each text's words and let the ack through.
            Message.objects.filter(pk=ack.pk).update(status=status, error_code=code, delivered_at=None)
        if i in STOPPED:
            said = arrived + timedelta(minutes=24)
            b.message_in(lead, "STOP", said)
            point = contact.points.get()
            consent_record(contact_point=point, channel="sms", granted=False, basis="keyword", actor=ACTOR, at=said)
            lead_close(lead, Stage.LOST, actor=ACTOR, reason="texted STOP", lost_reason="opted out of texts")
        elif i in SORTED_OUT:
            b.message_in(lead, SORTED_OUT[i], arrived + timedelta(hours=2))
            lead_close(lead, Stage.LOST, actor="sam", reason="demo", lost_reason=SORTED_OUT[i])
        else:
            lead_close(lead, Stage.UNRESPONSIVE, actor=ACTOR, reason="no answer to the first texts")
    sms_health_check(b.business, now=b.now)
    return PEOPLE
