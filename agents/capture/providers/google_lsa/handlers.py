"""Processing what the poller stored, as the intake loop does any webhook's
event: a Local Services lead becomes a touch (a call, or a form for a
message or booking request) through capture_apply; a person's message on it
becomes an inbound Message in that lead's thread."""

from __future__ import annotations

from django.utils import timezone

from agents.ai.intents import intent_read
from agents.ai.urgency import message_urgent
from agents.capture.base import json_object
from agents.capture.identity import capture_apply
from agents.capture.providers.google_lsa import rows
from crm.models import ContactPoint, ContactPointKind, InboundEvent, Lead, LeadTouch, Message, Provider, Source
from crm.phones import phone_to_e164
from crm.selectors import last_text_to
from crm.services import lead_sync
from crm.services.inbound_handlers import MalformedPayload, RetryLater, message_arrived
from crm.services.receipts import receipt_write
from crm.services.records import message_received_announce

ACTOR = "agent:google_lsa"
# Message.channel of a message written in a Local Services thread: not
# "dm", whose replies go back by Instagram; an answer goes by text or call.
CHANNEL = "google_lsa"


def _source(event: InboundEvent) -> Source:
    if event.source is None:
        raise MalformedPayload("a polled Local Services row is always stored with its source; this one has none")
    return event.source


def lead_process(event: InboundEvent) -> str:
    source = _source(event)
    lead = rows.lead_read(json_object(bytes(event.body)), rows.account_zone(source))
    capture_apply(business=source.business, capture=rows.lead_capture(lead), source=source, event=event)
    return InboundEvent.Status.PROCESSED


def conversation_process(event: InboundEvent) -> str:
    source = _source(event)
    row = rows.conversation_read(json_object(bytes(event.body)), rows.account_zone(source))
    if row.participant != "CONSUMER" or not row.text:
        # The business's own words (written in Google's app), or a call with
        # no words: nothing the person wrote.
        return InboundEvent.Status.IGNORED
    touch = (
        LeadTouch.objects.filter(
            inbound_event__provider=Provider.GOOGLE_LSA,
            inbound_event__accepted_by=source,
            inbound_event__external_id=row.lead,
        )
        .select_related("inbound_event")
        .order_by("pk")
        .first()
    )
    if touch is None:
        # The poller stores a lead before its messages, but the lead's event
        # may not be processed yet (or failed): this waits for it.
        raise RetryLater(f"the Local Services lead {row.lead} is not recorded yet")
    message_record(event, source, touch, row)
    return InboundEvent.Status.PROCESSED


def _phone_point(source: Source, lead: Lead, touch: LeadTouch) -> ContactPoint | None:
    """The phone the Local Services lead came with (the person's point a
    STOP written in the thread applies to), else the person's first phone
    (the lead's stored body may be pruned by now)."""
    phone = ""
    if touch.inbound_event is not None and touch.inbound_event.body:
        try:
            row = rows.lead_read(json_object(bytes(touch.inbound_event.body)), rows.account_zone(source))
        except MalformedPayload:
            row = None
        phone = row.phone if row is not None and not row.extension else ""
    e164 = phone_to_e164(phone, lead.business.region) if phone else None
    points = ContactPoint.objects.filter(contact=lead.contact, kind=ContactPointKind.PHONE).order_by("pk")
    return (points.filter(value=e164).first() if e164 else None) or points.first()


def _opening(lead: Lead, touch: LeadTouch) -> bool:
    """Whether the message is the person's first words on a lead this Local
    Services lead opened: the request itself, not a reply to us."""
    first = LeadTouch.objects.filter(lead=lead).order_by("received_at", "id").values_list("pk", flat=True).first()
    return first == touch.pk and not Message.objects.filter(lead=lead, direction="in", channel=CHANNEL).exists()


def message_record(event: InboundEvent, source: Source, touch: LeadTouch, row: rows.ConversationRow) -> Message | None:
    """Record the person's message on the lead the Local Services lead is a
    touch of, and hand it on as any inbound text is (consent keywords, the
    end of automated follow-up for a reply, the reading). Once per
    conversation row: a replay finds it recorded (None). Joins the
    processing transaction; locks the lead."""
    sid = f"{Provider.GOOGLE_LSA}:{row.resource_name}"[:255]
    if Message.objects.filter(provider_sid=sid).exists():
        return None
    lead = lead_sync.lead_for_update(touch.lead_id)
    point = _phone_point(source, lead, touch)
    opening = _opening(lead, touch)
    intent = intent_read(row.text, last_text_to(lead))
    message = Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=lead.contact,
        contact_point=point,
        inbound_event=event,
        direction="in",
        intent=intent.intent,
        intent_confidence=intent.confidence,
        intent_source=intent.source,
        urgent=message_urgent(lead.business, row.text),
        channel=CHANNEL,
        status=Message.Status.RECEIVED,
        body=row.text,
        from_number=point.value if point is not None else "",
        provider_sid=sid,
        # Google's time of it (never ahead of ours), however late it is read.
        created_at=min(row.occurred_at, timezone.now()),
    )
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=message.public_id,
        actor=ACTOR,
        action="message.received",
        after={"channel": CHANNEL, "from": message.from_number, "intent": message.intent},
    )
    message_received_announce(message)
    message_arrived(message, lead, created_lead=opening)
    return message
