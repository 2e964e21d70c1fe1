"""Identity resolver, duplicate check and source stamper (invariant 2).

One person is one Contact; one need is one open Lead. Deliveries for the same
person may race (a form, a call and a text within seconds), so every capture
first takes transaction-scoped advisory locks on its normalized contact
points, in sorted order; two captures sharing any point are serialized, and
the unique constraints on contact points and open leads back that up.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from agents.capture.base import Capture
from agents.orchestrator import lead_event
from approvals.services import approval_request_open
from crm.models import (
    CLOSED_STAGES,
    Business,
    Contact,
    ContactPoint,
    ContactPointKind,
    InboundEvent,
    Lead,
    LeadException,
    LeadTouch,
    Message,
    ServiceLine,
    Source,
    Stage,
)
from crm.phones import email_normalize, phone_to_e164
from crm.selectors import business_manager
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.contact_numbers import number_refusal
from crm.services.receipts import receipt_write
from crm.services.records import lead_open, task_create, touch_add

ACTOR = "agent:identity_resolver"
# Channels where a known person writing again is a reply, not a new inquiry.
CONVERSATION_CHANNELS = ("sms", "dm")


@dataclass(frozen=True)
class Point:
    kind: str
    value: str
    raw: str
    valid: bool


@dataclass
class Applied:
    contact: Contact
    lead: Lead
    created_contact: bool
    created_lead: bool
    touch: LeadTouch | None = None
    message: Message | None = None


def points_of(business: Business, capture: Capture) -> list[Point]:
    """Normalize every way to reach the person; an unparseable phone is kept
    as typed and marked invalid, never dropped."""
    points: dict[tuple[str, str], Point] = {}
    for raw in capture.phones:
        if not (raw or "").strip() or _withheld(raw):
            continue
        e164 = phone_to_e164(raw, business.region)
        point = Point(ContactPointKind.PHONE, e164 or raw.strip(), raw, e164 is not None)
        points.setdefault((point.kind, point.value), point)
    for raw in capture.emails:
        value = email_normalize(raw)
        if value:
            valid = "@" in value and "." in value.rsplit("@", 1)[-1]
            points.setdefault((ContactPointKind.EMAIL, value), Point(ContactPointKind.EMAIL, value, raw, valid))
    for kind, value in capture.handles:
        if value:
            points.setdefault((kind, value), Point(kind, value, value, True))
    return sorted(points.values(), key=lambda p: (p.kind, p.value))


# What carriers send for a withheld caller ID (words, and Twilio's spelled-out
# placeholder numbers): not a number, and never a way to match two callers.
WITHHELD_CALLER_IDS = {
    "anonymous", "restricted", "unknown", "unavailable", "blocked", "private", "withheld",
    "+266696687", "+7378742833", "+2562533", "+8656696", "+86282452253",
}  # fmt: skip


def _withheld(raw: str) -> bool:
    return raw.strip().lower() in WITHHELD_CALLER_IDS


def _lock(business: Business, keys: list[str]) -> None:
    # Sorted keys: two captures always take shared locks in the same order,
    # so they queue instead of deadlocking.
    with connection.cursor() as cursor:
        for key in sorted(keys):
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"identity:{business.pk}:{key}"])


def service_line_match(business: Business, *texts: str) -> ServiceLine | None:
    haystack = " ".join(t for t in texts if t).lower()
    if not haystack:
        return None
    for line in ServiceLine.objects.filter(business=business).order_by("pk"):
        needles = [line.slug.replace("-", " "), line.name, *line.keywords]
        if any(n and n.lower() in haystack for n in needles):
            return line
    return None


@transaction.atomic
def capture_apply(
    *, business: Business, capture: Capture, source: Source | None = None, event: InboundEvent | None = None
) -> Applied:
    """Turn one capture into records: find or create the contact, find or
    open the lead, stamp the touch, record consent evidence and any inbound
    message, and flag what a person must look at. One transaction."""
    points = points_of(business, capture)
    _lock(business, [f"{p.kind}:{p.value}" for p in points if p.valid])
    if capture.message_sid:
        # The same inbound message again (a replay): it is already recorded.
        seen = Message.objects.filter(provider_sid=capture.message_sid).select_related("lead", "contact").first()
        if seen is not None and seen.lead is not None and seen.contact is not None:
            return Applied(seen.contact, seen.lead, False, False, None, seen)
    contact, created_contact, others = _contact_for(business, capture, points)
    service_line = service_line_match(business, capture.service_hint, capture.request_text)
    existing_lead, reply = _open_lead_for(contact, service_line, capture)
    touch_fields = {"channel": capture.channel, "answers": capture.answers, **_touch_columns(capture)}
    touch = None
    if existing_lead is None:
        lead = lead_open(
            contact=contact,
            actor=ACTOR,
            service_line=service_line,
            request_text=capture.request_text,
            source=source,
            inbound_event=event,
            touch=touch_fields,
            received_at=capture.occurred_at,
        )
        if capture.is_test:
            # Stored and visible, but kept out of operations (routing, sends, reports).
            Lead.objects.filter(pk=lead.pk).update(is_test=True)
            lead.is_test = True
        else:
            lead_event(lead, "lead.new", key=lead.public_id, actor=ACTOR)
        touch = lead.touches.first()
    else:
        lead = existing_lead
    if existing_lead is not None and not reply:
        touch = touch_add(
            lead=lead, source=source, inbound_event=event, received_at=capture.occurred_at, **touch_fields
        )
        receipt_write(
            business=business,
            lead=lead,
            subject=touch.public_id,
            actor=ACTOR,
            action="lead.touch_added",
            reason="same person and need: the open lead absorbs the touch",
            after={"channel": capture.channel, "source": source.key if source else None},
        )
        if not lead.is_test:
            lead_event(lead, "touch.added", key=touch.public_id, data={"channel": capture.channel}, actor=ACTOR)
    message = None
    if capture.message_body or capture.message_sid:
        message = _inbound_message(lead, contact, points, capture, event)
    refused = _consent(business, points, capture, event)
    _flags(lead, points, capture, others, refused)
    return Applied(contact, lead, created_contact, existing_lead is None, touch, message)


TOUCH_COLUMNS = ("provider", "campaign_id", "adgroup_id", "ad_id", "form_id", "gclid", "fbclid", "utm", "landing_page")


def _touch_columns(capture: Capture) -> dict[str, object]:
    # Parsers may carry more in `touch` (the number a text was sent to…);
    # only the LeadTouch columns go to the touch, truncated to fit.
    columns: dict[str, object] = {}
    for key in TOUCH_COLUMNS:
        value = capture.touch.get(key)
        if value in (None, "", {}):
            continue
        if isinstance(value, str):
            value = value[: 1000 if key == "landing_page" else 300 if key in ("gclid", "fbclid") else 100]
        columns[key] = value
    return columns


def _contact_for(business: Business, capture: Capture, points: list[Point]) -> tuple[Contact, bool, list[Contact]]:
    # Only valid (normalized) points identify a person; an unparseable phone is
    # kept on the contact but matches nobody.
    valid = [p for p in points if p.valid]
    match = Q()
    for p in valid:
        match |= Q(kind=p.kind, value=p.value)
    existing = (
        {
            (cp.kind, cp.value): cp
            for cp in ContactPoint.objects.filter(match, business=business, is_valid=True).select_related("contact")
        }
        if valid
        else {}
    )
    # The phone decides who this is; then email, then social handles.
    ranked: list[Contact] = []
    for kind in (
        ContactPointKind.PHONE,
        ContactPointKind.EMAIL,
        ContactPointKind.INSTAGRAM,
        ContactPointKind.MESSENGER,
    ):
        for p in points:
            cp = existing.get((p.kind, p.value))
            if p.kind == kind and cp is not None:
                contact = cp.contact
                while contact.merged_into_id:
                    contact = Contact.objects.get(pk=contact.merged_into_id)
                if contact not in ranked:
                    ranked.append(contact)
    created = not ranked
    if created:
        contact = Contact.objects.create(
            business=business,
            first_name=capture.first_name[:100],
            last_name=capture.last_name[:100],
            postal_code=capture.postal_code[:16],
            address=capture.address[:300],
        )
        receipt_write(
            business=business,
            subject=contact.public_id,
            actor=ACTOR,
            action="contact.created",
            after={"name": contact.name, "points": [p.value for p in points]},
        )
    else:
        contact = ranked[0]
        _fill_blanks(contact, capture)
    kept_invalid = set() if created else set(contact.points.filter(is_valid=False).values_list("value", flat=True))
    for p in points:
        if (p.kind, p.value) not in existing and (p.valid or p.value not in kept_invalid):
            ContactPoint.objects.create(
                business=business, contact=contact, kind=p.kind, value=p.value, raw_value=p.raw[:254], is_valid=p.valid
            )
    return contact, created, ranked[1:]


def _fill_blanks(contact: Contact, capture: Capture) -> None:
    # A later touch may know more (a call gives a number, a form the name):
    # fill what is empty, never overwrite what a person or an earlier touch set.
    changed = []
    for field, value in (
        ("first_name", capture.first_name),
        ("last_name", capture.last_name),
        ("postal_code", capture.postal_code),
        ("address", capture.address),
    ):
        if value and not getattr(contact, field):
            setattr(contact, field, value[: Contact._meta.get_field(field).max_length])  # type: ignore[union-attr]
            changed.append(field)
    if changed:
        contact.save(update_fields=[*changed, "updated_at"])


def _open_lead_for(contact: Contact, service_line: ServiceLine | None, capture: Capture) -> tuple[Lead | None, bool]:
    """The open lead that absorbs this capture (None: open a new one), and
    whether the capture is a reply in an existing conversation."""
    open_leads = Lead.objects.select_for_update().filter(contact=contact).exclude(stage__in=CLOSED_STAGES)
    if capture.channel in CONVERSATION_CHANNELS and service_line is None:
        lead = open_leads.order_by("-created_at").first()
        if lead is not None:
            return lead, True
    lead = open_leads.filter(service_line=service_line).first()
    if lead is None and service_line is not None:
        lead = open_leads.filter(service_line__isnull=True).first()
        if lead is not None:
            _set_service_line(lead, service_line)
    if lead is None:
        return None, False
    window = timedelta(days=contact.business.dedupe_window_days)
    last_touch = lead.touches.aggregate(last=Max("received_at"))["last"] or lead.created_at
    if capture.occurred_at - last_touch > window:
        # An open lead untouched for longer than the dedupe window is a past
        # need; close it so the new inquiry opens its own lead.
        lead_sync.lead_transition(
            lead,
            Stage.LOST,
            actor=ACTOR,
            reason=f"superseded by a new inquiry after {window.days} days without a touch",
        )
        return None, False
    return lead, False


def _set_service_line(lead: Lead, service_line: ServiceLine) -> None:
    Lead.objects.filter(pk=lead.pk).update(service_line=service_line)
    lead.service_line = service_line
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=lead.public_id,
        actor=ACTOR,
        action="lead.service_line_set",
        reason="a later touch named the service",
        before={"service_line": None},
        after={"service_line": service_line.slug},
    )


def _inbound_message(
    lead: Lead, contact: Contact, points: list[Point], capture: Capture, event: InboundEvent | None
) -> Message:
    sender = next((p for p in points if p.kind != ContactPointKind.EMAIL), None)
    point = (
        ContactPoint.objects.filter(business=lead.business, kind=sender.kind, value=sender.value).first()
        if sender
        else None
    )
    message = Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=contact,
        contact_point=point,
        inbound_event=event,
        direction="in",
        channel="sms" if capture.channel == "sms" else capture.channel,
        status=Message.Status.RECEIVED,
        body=capture.message_body,
        from_number=sender.value if sender else "",
        to=str(capture.touch.get("to", ""))[:254],
        provider_sid=capture.message_sid or None,
    )
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=message.public_id,
        actor=ACTOR,
        action="message.received",
        after={"channel": message.channel, "from": message.from_number},
    )
    return message


def _consent(business: Business, points: list[Point], capture: Capture, event: InboundEvent | None) -> list[str]:
    """Record the form's grant per point and channel; returns why a grant was
    refused for a number the business may not text or call (the lead is kept)."""
    evidence = capture.consent
    if evidence is None or not evidence.granted:
        return []  # an unticked box is no permission, and no revocation of an earlier one
    phones = [p for p in points if p.kind == ContactPointKind.PHONE and p.valid]
    emails = [p for p in points if p.kind == ContactPointKind.EMAIL and p.valid]
    refused: list[str] = []
    for channel in evidence.channels:
        for p in emails if channel == "email" else phones:
            refusal = number_refusal(business, p.value, channel)
            if refusal:
                refused.append(f"no {channel} consent recorded: {refusal}")
                continue
            point = ContactPoint.objects.get(business=business, kind=p.kind, value=p.value)
            consent_record(
                contact_point=point,
                channel=channel,
                granted=True,
                basis="form_disclosure",
                actor=ACTOR,
                evidence=evidence.as_evidence(capture.occurred_at),
                inbound_event=event,
                at=capture.occurred_at,
            )
    return refused


def _flags(lead: Lead, points: list[Point], capture: Capture, others: list[Contact], refused: list[str]) -> None:
    wanted = []
    if refused:
        wanted.append((LeadException.NUMBER_NOT_ALLOWED, "; ".join(refused)[:300]))
    if not points:
        wanted.append((LeadException.MISSING_IDENTITY, "no phone, email or handle to reach the person"))
    if any(p.kind == ContactPointKind.PHONE and not p.valid for p in points):
        wanted.append((LeadException.INVALID_PHONE, "a phone number that could not be parsed, kept as typed"))
    if capture.is_test:
        wanted.append((LeadException.TEST_LEAD, "the provider marked this a test lead"))
    if others:
        wanted.append((LeadException.MERGE_CONFLICT, "the phone and the email belong to different contacts"))
    for flag, reason in wanted:
        if flag not in lead.exceptions:
            lead_sync.lead_flag_exception(lead, flag, actor=ACTOR, reason=reason)
    if not points and not lead.tasks.filter(kind="exception", status="open").exists():
        _manager_task(lead, "Lead without a phone, email or handle: find a way to reach them")
    if others:
        approval_request_open(
            business=lead.business,
            lead=lead,
            kind="merge_contacts",
            summary=f"Same person? {lead.contact.public_id} and {', '.join(c.public_id for c in others)}",
            proposed_by=ACTOR,
            payload={"keep": lead.contact.public_id, "merge": [c.public_id for c in others]},
        )


def _manager_task(lead: Lead, title: str) -> None:
    task_create(
        lead=lead,
        title=title,
        due_at=timezone.now(),
        actor=ACTOR,
        kind="exception",
        owner=lead.owner or business_manager(lead.business_id),
        reason="exception for a person",
    )
