"""Identity resolver, duplicate check and source stamper (invariant 2).

One person is one Contact; one need is one open Lead. Deliveries for the same
person may race (a form, a call and a text within seconds), so every capture
first takes transaction-scoped advisory locks on its normalized contact
points, in sorted order, then on every contact those points lead to, then
locks the contact's open leads; two captures of one person are serialized,
and the unique constraints on contact points and open leads back that up.
A merge of contacts takes the same contact locks, so a capture never acts
on a contact that a merge has just emptied (see `_contact_for`).

Which lead a touch joins depends only on the set of touches and the times
they were made, never on the order they arrive in (see `_home`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Max, Min, Q
from django.utils import timezone

from agents.ai.intents import intent_read
from agents.ai.urgency import message_urgent
from agents.capture.base import Capture
from agents.capture.merges import merge_propose
from agents.events import UNREACHABLE_TITLE, lead_event
from crm.locks import contacts_lock, xact_locks
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
from crm.selectors import business_manager, last_text_to, rows_in_hand
from crm.services import lead_sync
from crm.services.consent import consent_record
from crm.services.contact_numbers import number_refusal
from crm.services.merge import contact_root
from crm.services.receipts import receipt_write
from crm.services.records import lead_open, message_received_announce, task_create, touch_add

ACTOR = "agent:identity_resolver"
CONFLICT_POINTS = "the phone and the email belong to different contacts"
CONFLICT_SPLIT = "a new phone came with the email or handle of another contact: kept apart until a person decides"
# Channels where a known person writing again is a reply, not a new inquiry.
CONVERSATION_CHANNELS = ("sms", "dm")
# Channels whose messages keep the provider's time of writing.
TIMED_CHANNELS = ("dm", "thumbtack", "yelp")


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
    "anonymous",
    "restricted",
    "unknown",
    "unavailable",
    "blocked",
    "private",
    "withheld",
    "+266696687",
    "+7378742833",
    "+2562533",
    "+8656696",
    "+86282452253",
}


def _withheld(raw: str) -> bool:
    return raw.strip().lower() in WITHHELD_CALLER_IDS


def _lock(business: Business, keys: list[str]) -> None:
    # Sorted keys: two captures always take shared locks in the same order,
    # so they queue instead of deadlocking.
    xact_locks([f"identity:{business.pk}:{key}" for key in sorted(keys)])


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
    contact, created_contact, others, stored, made = _contact_for(business, capture, points)
    service_line = service_line_match(business, capture.service_hint, capture.request_text)
    # A contact made just now has no lead yet: nothing to look up or lock.
    choice = Choice(None) if created_contact else _open_lead_for(contact, service_line, capture)
    if not created_contact:
        # After the person's open leads are locked, never before: a follow-up
        # step or a booking holds a lead and then locks its contact (the order
        # of crm.locks), so writing the contact first deadlocked with them.
        _fill_blanks(contact, capture)
    existing_lead, reply = choice.lead, choice.reply
    touch_fields = {
        "channel": capture.channel,
        "answers": capture.answers,
        "line_unknown": service_line is None,
        **_touch_columns(capture),
    }
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
        touch = lead.touches.all()[0]  # its one touch, made with it
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
            reason=choice.reason,
            after={
                "channel": capture.channel,
                "source": source.key if source else None,
                **({"open_leads": choice.open_leads} if service_line is None else {}),
            },
        )
        if not lead.is_test:
            lead_event(lead, "touch.added", key=touch.public_id, data={"channel": capture.channel}, actor=ACTOR)
    if service_line is not None and choice.had_open_leads:
        _rehome_unknown_touches(contact, window=timedelta(days=business.dedupe_window_days))
    message = None
    if capture.message_body or capture.message_sid:
        # A new lead has no earlier text of ours for the message to answer.
        previous = last_text_to(lead) if existing_lead is not None else ""
        message = _inbound_message(lead, contact, points, capture, event, previous)
    refused = _consent(business, points, capture, event, stored, made)
    # A new contact that matched others is a new phone kept off a known person.
    _flags(lead, contact, points, capture, others, refused, event, split=created_contact and bool(others))
    return Applied(contact, lead, created_contact, existing_lead is None, touch, message)


TOUCH_COLUMNS = (
    "provider",
    "campaign_id",
    "adgroup_id",
    "ad_id",
    "form_id",
    "gclid",
    "fbclid",
    "gbraid",
    "wbraid",
    "meta_lead_id",
    "thread_id",
    "utm",
    "landing_page",
)
CLICK_COLUMNS = ("gclid", "fbclid", "gbraid", "wbraid")


def _touch_columns(capture: Capture) -> dict[str, object]:
    # Parsers may carry more in `touch` (the number a text was sent to…);
    # only the LeadTouch columns go to the touch, truncated to fit.
    columns: dict[str, object] = {}
    for key in TOUCH_COLUMNS:
        value = capture.touch.get(key)
        if value in (None, "", {}):
            continue
        if isinstance(value, str):
            value = value[
                : 1000
                if key == "landing_page"
                else 300
                if key in CLICK_COLUMNS
                else 32
                if key == "meta_lead_id"
                else 100
            ]
        columns[key] = value
    return columns


def _contact_for(
    business: Business, capture: Capture, points: list[Point]
) -> tuple[Contact, bool, list[Contact], dict[tuple[str, str], ContactPoint], set[int]]:
    """The contact (made when nobody matched), whether it was made, the other
    contacts the points matched, every valid point's stored row, and the
    pks of the points made now."""
    # Only valid (normalized) points identify a person; an unparseable phone is
    # kept on the contact but matches nobody.
    valid = [p for p in points if p.valid]
    existing, ranked = _matched(business, points, valid)
    if ranked:
        # Two captures reaching one person through different points (a phone,
        # an email) share no point lock; the contact locks serialize them
        # before either decides about leads, and a capture that matched two
        # people with a merge of them. Advisory rather than the rows': follow-up
        # steps lock a lead and then its contact's row, so a row lock here
        # would invert that order.
        contacts_lock(business.pk, [c.pk for c in ranked])
        if Contact.objects.filter(pk__in=[c.pk for c in ranked], merged_into__isnull=False).exists():
            # A merge committed while this capture waited: the points moved to
            # the contact it kept. Read again and lock that one too (a second
            # call, so PostgreSQL's deadlock check, not the order, covers the
            # rare capture that holds it and waits for one of these).
            existing, ranked = _matched(business, points, valid)
            contacts_lock(business.pk, [c.pk for c in ranked])
    others: list[Contact] = ranked[1:]
    if ranked and _new_phone_beside_known_points(valid, existing):
        # A form naming a known email (or handle) with a phone nobody has
        # never puts that phone on the known person: anyone can type
        # someone's email, and texts from "their" new number would then
        # count as theirs (reschedule, cancel, book). The phone gets a
        # contact of its own and a person is asked whether the two are one
        # (`_flags`, the merge question).
        others, ranked = ranked, []
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
        contact = ranked[0]  # what it lacks is filled in once its leads are locked (capture_apply)
    kept_invalid = set() if created else set(contact.points.filter(is_valid=False).values_list("value", flat=True))
    stored = dict(existing)
    new_points = ContactPoint.objects.bulk_create(
        [
            ContactPoint(
                business=business, contact=contact, kind=p.kind, value=p.value, raw_value=p.raw[:254], is_valid=p.valid
            )
            for p in points
            if (p.kind, p.value) not in existing and (p.valid or p.value not in kept_invalid)
        ]
    )
    for point in new_points:
        if point.is_valid:
            stored[(point.kind, point.value)] = point
    if created:
        # A contact made just now has exactly these points: the steps that
        # follow in this unit of work read them from here.
        rows_in_hand(contact, "points", new_points)
    return contact, created, others, stored, {point.pk for point in new_points}


def _new_phone_beside_known_points(valid: list[Point], existing: dict[tuple[str, str], ContactPoint]) -> bool:
    """The capture names a phone no contact has, and reaches a known contact
    only through its other points (an email, a handle)."""
    phones = [p for p in valid if p.kind == ContactPointKind.PHONE]
    return bool(phones) and all((p.kind, p.value) not in existing for p in phones)


def _matched(
    business: Business, points: list[Point], valid: list[Point]
) -> tuple[dict[tuple[str, str], ContactPoint], list[Contact]]:
    """The stored rows of the valid points, and the contacts they lead to
    (following merges), the one who decides who this is first."""
    match = Q()
    for p in valid:
        match |= Q(kind=p.kind, value=p.value)
    existing = (
        {
            (cp.kind, cp.value): cp
            for cp in ContactPoint.objects.filter(match, business=business, is_valid=True).select_related(
                "contact__business"
            )
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
        ContactPointKind.THUMBTACK,
        ContactPointKind.YELP,
    ):
        for p in points:
            cp = existing.get((p.kind, p.value))
            if p.kind == kind and cp is not None:
                contact = contact_root(cp.contact)
                if contact not in ranked:
                    ranked.append(contact)
    return existing, ranked


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


@dataclass
class Choice:
    lead: Lead | None  # None: open a new lead
    reply: bool = False
    reason: str = "same person and need: the open lead absorbs the touch"
    open_leads: int = 0  # the candidates an unknown-line touch chose among
    had_open_leads: bool = False


def _open_lead_for(contact: Contact, service_line: ServiceLine | None, capture: Capture) -> Choice:
    """The open lead that absorbs this capture (None: open a new one), and
    whether the capture is a reply in an existing conversation."""
    # Locked in primary-key order, so two captures never lock them crosswise.
    open_leads = list(
        Lead.objects.select_for_update(no_key=True)
        .filter(contact=contact)
        .exclude(stage__in=CLOSED_STAGES)
        .order_by("pk")
    )
    if thread := _thread_lead(open_leads, capture):
        # A message in a marketplace thread we hold belongs to that thread's
        # lead, whatever else the person has open.
        return Choice(thread, reply=True)
    if capture.channel in CONVERSATION_CHANNELS and service_line is None and open_leads:
        return Choice(max(open_leads, key=lambda lead: (lead.created_at, lead.pk)), reply=True)
    window = timedelta(days=contact.business.dedupe_window_days)
    if service_line is None:
        # Any open need of the person may be the one this touch is about.
        candidates = open_leads
    else:
        candidates = [lead for lead in open_leads if lead.service_line_id == service_line.pk][:1] or [
            lead for lead in open_leads if lead.service_line_id is None
        ][:1]
    fresh = []
    for lead in candidates:
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
        else:
            fresh.append(lead)
    had = bool(open_leads)
    if not fresh:
        return Choice(None, had_open_leads=had)
    if service_line is not None:
        lead = fresh[0]
        if lead.service_line_id is None:
            _set_service_line(lead, service_line)
        return Choice(lead, had_open_leads=had)
    lead = _home(fresh, capture.occurred_at)
    if len(fresh) == 1:
        reason = "no service line told: the person's one open lead absorbs the touch"
    else:
        reason = (
            f"no service line told: joined the newest of {len(fresh)} open leads "
            "(the need heard last before the touch was made, else the first heard after it)"
        )
    return Choice(lead, reason=reason, open_leads=len(fresh), had_open_leads=had)


def _thread_lead(open_leads: list[Lead], capture: Capture) -> Lead | None:
    """The open lead whose touches hold the capture's marketplace thread."""
    thread, provider = capture.touch.get("thread_id"), capture.touch.get("provider")
    if not thread or not open_leads:
        return None
    held = (
        LeadTouch.objects.filter(lead__in=open_leads, provider=provider, thread_id=str(thread)[:100])
        .order_by("-received_at", "-pk")
        .values_list("lead_id", flat=True)
        .first()
    )
    return next((lead for lead in open_leads if lead.pk == held), None)


def _heard_at(lead: Lead) -> tuple[datetime, int]:
    # When the lead's need was first heard: its earliest touch that named a
    # service line (the provider's time, not our arrival time), ties broken
    # by the line so every capture ranks the leads alike.
    touches = lead.touches.all()
    first = touches.filter(line_unknown=False).aggregate(at=Min("received_at"))["at"]
    first = first or touches.aggregate(at=Min("received_at"))["at"] or lead.created_at
    return first, lead.service_line_id or 0


def _home(leads: Sequence[Lead], made_at: datetime) -> Lead:
    """The lead a touch that names no service line belongs to: of the open
    leads with a service line, the newest need heard no later than the touch
    was made; when none was heard before it, the first heard after it; with
    no line anywhere, the one open lead without one. It depends on the times
    the touches were made only, so every arrival order gives the same answer."""
    lined = sorted(((_heard_at(lead), lead) for lead in leads if lead.service_line_id), key=lambda p: p[0])
    if not lined:
        return leads[0]
    before = [lead for heard, lead in lined if heard[0] <= made_at]
    return before[-1] if before else lined[0][1]


def _rehome_unknown_touches(contact: Contact, *, window: timedelta) -> None:
    """A touch naming a service line may have been made before a touch that
    named none but arrived after it (a race, a late delivery): move each such
    touch to its home lead, as if they had arrived in the order they were made.
    The caller holds the person's locks and the open leads' rows."""
    open_leads = list(
        Lead.objects.filter(contact=contact)
        .exclude(stage__in=CLOSED_STAGES)
        .annotate(last_touch=Max("touches__received_at"))
        .order_by("pk")
    )
    if len(open_leads) < 2:
        return
    by_pk = {lead.pk: lead for lead in open_leads}
    floating = LeadTouch.objects.filter(lead__in=open_leads, line_unknown=True).order_by("received_at", "pk")
    for touch in floating:
        here = by_pk[touch.lead_id]
        # Only a need alive when the touch was made (within the dedupe window) can be its home.
        alive = [lead for lead in open_leads if (lead.last_touch or lead.created_at) >= touch.received_at - window]
        home = _home(alive, touch.received_at) if alive else here
        # A lead is never left without a touch (its line was set by a person).
        if home.pk == here.pk or not here.touches.exclude(pk=touch.pk).exists():
            continue
        LeadTouch.objects.filter(pk=touch.pk).update(lead=home)
        receipt_write(
            business=contact.business,
            lead=home,
            subject=touch.public_id,
            actor=ACTOR,
            action="lead.touch_moved",
            reason="a touch made earlier arrived later: the touch without a service line joins the need it belongs to",
            before={"lead": here.public_id},
            after={"lead": home.public_id},
        )


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
    lead: Lead, contact: Contact, points: list[Point], capture: Capture, event: InboundEvent | None, previous: str
) -> Message:
    # Written from a handle (a DM, a marketplace thread): the handle is the
    # sender, even when the capture also knows the person's phone.
    handles = {(kind, value) for kind, value in capture.handles}
    sender = next((p for p in points if (p.kind, p.value) in handles), None) or next(
        (p for p in points if p.kind != ContactPointKind.EMAIL), None
    )
    point = (
        ContactPoint.objects.filter(business=lead.business, kind=sender.kind, value=sender.value).first()
        if sender
        else None
    )
    intent = intent_read(capture.message_body, previous)
    message = Message.objects.create(
        business=lead.business,
        lead=lead,
        contact=contact,
        contact_point=point,
        inbound_event=event,
        direction="in",
        intent=intent.intent,
        intent_confidence=intent.confidence,
        intent_source=intent.source,
        urgent=message_urgent(lead.business, capture.message_body),
        channel="sms" if capture.channel == "sms" else capture.channel,
        status=Message.Status.RECEIVED,
        body=capture.message_body,
        from_number=sender.value if sender else "",
        to=str(capture.touch.get("to", ""))[:254],
        provider_sid=capture.message_sid or None,
        # A DM keeps Meta's time of it (never ahead of ours): the 24-hour
        # window to answer it runs from then, however late we process it. A
        # marketplace message keeps its time too: one held for its lead stays
        # where it was written in the thread.
        created_at=min(capture.occurred_at, timezone.now()) if capture.channel in TIMED_CHANNELS else timezone.now(),
    )
    receipt_write(
        business=lead.business,
        lead=lead,
        subject=message.public_id,
        actor=ACTOR,
        action="message.received",
        after={"channel": message.channel, "from": message.from_number, "intent": message.intent},
    )
    message_received_announce(message)
    return message


def _consent(
    business: Business,
    points: list[Point],
    capture: Capture,
    event: InboundEvent | None,
    stored: dict[tuple[str, str], ContactPoint],
    made: set[int],
) -> list[str]:
    """Record the form's grant per point and channel; returns why a grant was
    refused for a number the business may not text or call (the lead is kept).
    `stored` holds the points' rows as the resolver read or made them."""
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
            point = stored[(p.kind, p.value)]
            consent_record(
                contact_point=point,
                channel=channel,
                granted=True,
                basis="form_disclosure",
                actor=ACTOR,
                evidence=evidence.as_evidence(capture.occurred_at),
                inbound_event=event,
                at=capture.occurred_at,
                new_point=point.pk in made,
            )
    return refused


def _flags(
    lead: Lead,
    contact: Contact,
    points: list[Point],
    capture: Capture,
    others: list[Contact],
    refused: list[str],
    event: InboundEvent | None,
    *,
    split: bool,
) -> None:
    wanted = []
    if refused:
        wanted.append((LeadException.NUMBER_NOT_ALLOWED, "; ".join(refused)[:300]))
    if not points:
        wanted.append((LeadException.MISSING_IDENTITY, "no phone, email or handle to reach the person"))
    if any(p.kind == ContactPointKind.PHONE and not p.valid for p in points):
        wanted.append((LeadException.INVALID_PHONE, "a phone number that could not be parsed, kept as typed"))
    if capture.is_test:
        wanted.append((LeadException.TEST_LEAD, "the provider marked this a test lead"))
    # A pair a person kept apart asks nothing and flags nothing; a pair a
    # pending request already asks about extends that request.
    if others and merge_propose(lead, contact, others, event=event) is not None:
        wanted.append((LeadException.MERGE_CONFLICT, CONFLICT_SPLIT if split else CONFLICT_POINTS))
    for flag, reason in wanted:
        if flag not in lead.exceptions:
            lead_sync.lead_flag_exception(lead, flag, actor=ACTOR, reason=reason)
    if not points and not lead.tasks.filter(kind="exception", status="open").exists():
        _manager_task(lead, UNREACHABLE_TITLE)


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
