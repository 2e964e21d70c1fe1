"""Booking Matcher: which lead an outside booking (a Calendly invitee) belongs to.

In order of certainty: a lead (or contact) id carried in the booking link's
UTM parameters (`booking_link` adds `utm_content=<lead id>` to a Calendly
link, and Calendly hands UTM parameters back in `tracking`), then
the invitee's email, then a phone (the SMS-reminder number, an
outbound-call location, a phone answer), all normalized as capture does.
Contacts merged into another follow the merge. Email and phone naming two
different people is ambiguous and goes to a person, as does a booking that
matches nobody: an `ExceptionItem` with the manager as owner and an
exception task, never a guess and never a new lead made up from a calendar.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.db import IntegrityError, transaction
from django.utils import timezone

from crm.models import (
    CLOSED_STAGES,
    Business,
    Contact,
    ContactPoint,
    ContactPointKind,
    ExceptionItem,
    Lead,
    Stage,
    Task,
)
from crm.phones import email_normalize, phone_to_e164
from crm.selectors import business_manager
from crm.services.receipts import receipt_write
from crm.services.records import task_create, tasks_close

ACTOR = "agent:booking_matcher"
UNMATCHED = "booking_unmatched"
_LEAD_ID = re.compile(r"lead_[0-9A-Z]{26}")
_CONTACT_ID = re.compile(r"cont_[0-9A-Z]{26}")
UTM_FIELDS = ("utm_content", "utm_term", "salesforce_uuid", "utm_campaign", "utm_source", "utm_medium")
# Closed leads a booking may reopen (the person came back); won and
# disqualified leads are a new need or a mistake: a person decides.
REOPENABLE = (Stage.LOST, Stage.UNRESPONSIVE)


@dataclass(frozen=True)
class Match:
    lead: Lead | None
    how: str  # utm, email, phone; "" when unmatched
    detail: str = ""


def booking_link(url: str, lead: Lead) -> str:
    """A Calendly scheduling link that names the lead, so its booking matches
    with certainty whatever email or phone the person types."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "utm_content"]
    query.append(("utm_content", lead.public_id))
    return urlunsplit(parts._replace(query=urlencode(query)))


def _root(contact: Contact) -> Contact:
    while contact.merged_into_id:
        contact = Contact.objects.get(pk=contact.merged_into_id)
    return contact


def _contacts(business: Business, kind: str, values: Iterable[str]) -> list[Contact]:
    values = [v for v in values if v]
    if not values:
        return []
    points = ContactPoint.objects.filter(business=business, kind=kind, value__in=values, is_valid=True)
    found: list[Contact] = []
    for point in points.select_related("contact").order_by("created_at"):
        contact = _root(point.contact)
        if contact not in found:
            found.append(contact)
    return found


def lead_of_contact(contact: Contact) -> tuple[Lead | None, str]:
    """The contact's open lead (the most recently active one), else its latest
    lost or unresponsive lead (a booking reopens it); else none, with why."""
    leads = Lead.objects.filter(contact=contact).order_by("-updated_at", "-pk")
    open_lead = leads.exclude(stage__in=CLOSED_STAGES).first()
    if open_lead is not None:
        return open_lead, ""
    latest = leads.first()
    if latest is None:
        return None, f"{contact.public_id} has no lead"
    if latest.stage in REOPENABLE:
        return latest, ""
    return None, f"{contact.public_id}'s latest lead {latest.public_id} is {latest.stage}: a new need, or a mistake"


def booking_match(
    business: Business, *, emails: Iterable[str], phones: Iterable[str], tracking: dict[str, str]
) -> Match:
    for key in UTM_FIELDS:
        value = str(tracking.get(key) or "").strip()
        if _LEAD_ID.fullmatch(value):
            lead = Lead.objects.filter(business=business, public_id=value).first()
            if lead is not None:
                return Match(lead, "utm", f"{key}={value}")
        if _CONTACT_ID.fullmatch(value):
            contact = Contact.objects.filter(business=business, public_id=value).first()
            if contact is not None:
                lead, why = lead_of_contact(_root(contact))
                return Match(lead, "utm" if lead else "", why or f"{key}={value}")
    by_email = _contacts(business, ContactPointKind.EMAIL, (email_normalize(e) for e in emails))
    by_phone = _contacts(business, ContactPointKind.PHONE, (phone_to_e164(p, business.region) or "" for p in phones))
    people = list(dict.fromkeys([*by_email, *by_phone]))
    if not people:
        return Match(None, "", "no contact has this email or phone")
    if len(people) > 1:
        ids = ", ".join(c.public_id for c in people)
        return Match(None, "", f"ambiguous: the email and phone belong to different contacts ({ids})")
    lead, why = lead_of_contact(people[0])
    return Match(lead, ("email" if by_email else "phone") if lead else "", why)


@transaction.atomic
def booking_exception(
    business: Business, *, subject: str, title: str, detail: str, lead: Lead | None = None
) -> ExceptionItem:
    """One open exception per booking (its inbound event id), owned by the
    manager, with an exception task for them."""
    existing = ExceptionItem.objects.filter(
        business=business, kind=UNMATCHED, subject=subject, status=ExceptionItem.Status.OPEN
    ).first()
    if existing is not None:
        return existing
    manager = business_manager(business.pk)
    now = timezone.now()
    try:
        with transaction.atomic():
            item = ExceptionItem.objects.create(
                business=business,
                lead=lead,
                owner=manager,
                kind=UNMATCHED,
                subject=subject,
                detail=detail[:500],
                detected_at=now,
            )
    except IntegrityError:
        # A concurrent replay opened it first (crm_exceptionitem_one_open_per_subject).
        return ExceptionItem.objects.get(business=business, kind=UNMATCHED, subject=subject, status="open")
    # The booking's id ends the title, so resolving the item closes its task.
    task = task_create(
        business=business,
        lead=lead,
        owner=manager,
        kind=Task.Kind.EXCEPTION,
        title=f"{title[:270]} ({subject})",
        due_at=now,
        actor=ACTOR,
        reason=detail[:300],
    )
    receipt_write(
        business=business,
        lead=lead,
        subject=item.public_id,
        actor=ACTOR,
        action="exception.opened",
        reason=detail[:300],
        after={
            "kind": UNMATCHED,
            "booking": subject,
            "task": task.public_id,
            "owner": manager.user.get_username() if manager else None,
        },
    )
    return item


def booking_exception_resolve(item: ExceptionItem, *, actor: str, how: str) -> bool:
    resolved = ExceptionItem.objects.filter(pk=item.pk, status=ExceptionItem.Status.OPEN).update(
        status=ExceptionItem.Status.RESOLVED, resolved_at=timezone.now(), resolved_by=actor
    )
    if resolved:
        # The booking's id ends the task's title (the item names no task).
        its_task = Task.objects.filter(
            business_id=item.business_id, kind=Task.Kind.EXCEPTION, title__endswith=f"({item.subject})"
        )
        tasks_close(item.lead, its_task, actor=actor, outcome=how)
        receipt_write(
            business=item.business,
            lead=item.lead,
            subject=item.public_id,
            actor=actor,
            action="exception.resolved",
            reason=how,
            before={"status": "open"},
            after={"status": "resolved"},
        )
    return bool(resolved)
