"""Technician Brief: what the technician needs for one booked visit, quoted
from the record and nothing else.

Every line is a field of the record (request text, source touch, answers,
customer notes, property, flags) named with the id it came from; what the
record lacks becomes an open question for the technician to ask, never a
guess. The brief is stored on `Appointment.brief` (shown on the appointment
page and the booking page) and emailed to the assigned technician once.
"""

from __future__ import annotations

import logging
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.urls import reverse

from agents.booking.slots import moment_label, when_label
from agents.notify import notice_enqueue
from crm.models import Appointment, ContactPointKind
from crm.services.receipts import receipt_write, receipt_written

log = logging.getLogger(__name__)
ACTOR = "agent:technician_brief"
EMAILED = "appointment.brief_emailed"
# Answer keys that only carry tracking, not anything the customer said.
TRACKING_ANSWERS = ("_hidden", "nonce", "consent", "consent_text", "page_url", "website_url")


def _quote(text: str) -> str:
    return "“" + " ".join(text.split()) + "”"


def _answer_lines(answers: dict[str, Any]) -> list[str]:
    lines = []
    for key, value in answers.items():
        if key in TRACKING_ANSWERS or key.startswith("utm_"):
            continue
        if isinstance(value, dict):
            question, said = str(value.get("title") or key), value.get("value")
        else:
            question, said = key, value
        if isinstance(said, list):
            said = ", ".join(str(v) for v in said if v not in (None, ""))
        if said in (None, "", {}):
            continue
        lines.append(f"  - {question}: {_quote(str(said))}")
    return lines


def _url(name: str, pk: int) -> str:
    return settings.PUBLIC_BASE_URL + reverse(name, args=[pk])


def brief_build(appointment: Appointment) -> str:
    """The brief for one appointment, as plain text (email and page alike)."""
    lead = appointment.lead
    contact, business = lead.contact, lead.business
    zone = ZoneInfo(business.timezone)
    points = list(contact.points.filter(is_valid=True).order_by("kind", "created_at"))
    phones = [p.value for p in points if p.kind == ContactPointKind.PHONE]
    emails = [p.value for p in points if p.kind == ContactPointKind.EMAIL]
    touches = list(lead.touches.select_related("source").order_by("received_at", "id"))
    tech = appointment.assigned_to
    questions: list[str] = []

    lines = [
        f"Technician brief — {appointment.public_id} for {lead.public_id} (quoted from the record)",
        f"When: {when_label(appointment.starts_at, appointment.ends_at, zone)} ({business.timezone})",
        f"Technician: {tech.display_name or tech.user.get_username() if tech else 'not assigned'}",
        f"Customer: {contact.name or 'no name on record'} ({contact.public_id})",
        f"Phone: {', '.join(phones) or '—'}",
        f"Email: {', '.join(emails) or '—'}",
    ]
    if not contact.name:
        questions.append("Ask the customer's name: the record has none.")
    if not phones:
        questions.append("No valid phone on record: ask for a number to call on the day.")
    where = ", ".join(part for part in (contact.address, contact.postal_code) if part)
    if appointment.location:
        lines.append(f"Location (booking): {appointment.location}")
    lines.append(f"Property: {where or 'not on record'}")
    if not contact.address:
        questions.append("No property address on record: confirm the address before driving out.")
    lines.append(f"Service: {lead.service_line.name if lead.service_line else 'not identified'}")
    if lead.service_line is None:
        questions.append("The service is not identified: ask what the job is.")
    if lead.request_text.strip():
        lines.append(f"Request ({lead.public_id}): {_quote(lead.request_text)}")
    else:
        questions.append("The customer wrote no request: ask what they need done.")
    for touch in touches:
        where_from = touch.source.key if touch.source else touch.provider
        extra = [f"campaign {touch.campaign_id}"] if touch.campaign_id else []
        extra += [f"{k}={v}" for k, v in sorted((touch.utm or {}).items()) if v]
        suffix = f", {', '.join(extra)}" if extra else ""
        lines.append(
            f"Source ({touch.public_id}): {touch.channel} via {where_from} on "
            f"{moment_label(touch.received_at, zone)}{suffix}"
        )
        answers = _answer_lines(touch.answers or {})
        if answers:
            lines.append(f"Answers ({touch.public_id}):")
            lines.extend(answers)
    if contact.notes.strip():
        lines.append(f"Customer notes ({contact.public_id}): {_quote(contact.notes)}")
    if appointment.notes.strip():
        lines.append(f"Booking notes ({appointment.public_id}): {_quote(appointment.notes)}")
    if lead.exceptions:
        lines.append(f"Flags on the lead: {', '.join(lead.exceptions)}")
    lines.append("Open questions:")
    lines.extend(f"  - {q}" for q in questions or ["none: the record answers the basics"])
    lines.append(f"Lead record: {_url('admin:crm_lead_change', lead.pk)}")
    lines.append(f"Appointment: {_url('admin:crm_appointment_change', appointment.pk)}")
    return "\n".join(lines)


def brief_store(appointment: Appointment) -> str:
    """Write the brief on the appointment (a rebuilt brief replaces the old)."""
    text = brief_build(appointment)
    if text != appointment.brief:
        Appointment.objects.filter(pk=appointment.pk).update(brief=text)
        appointment.brief = text
    return text


def brief_email(appointment: Appointment) -> str:
    """Email the brief to the assigned technician, once per appointment.

    The receipt is the claim: it is written in the caller's transaction and
    the mail goes out after commit, so a redelivered step finds the receipt
    and sends nothing. Returns what happened, for the step's outcome.
    """
    tech = appointment.assigned_to
    if tech is None:
        return "no technician assigned"
    address = tech.email or tech.user.email
    if not address:
        return f"{tech} has no email"
    if receipt_written(subject=appointment.public_id, action=EMAILED):
        return "already emailed"
    text = appointment.brief or brief_store(appointment)
    receipt_write(
        business=appointment.lead.business,
        lead=appointment.lead,
        subject=appointment.public_id,
        actor=ACTOR,
        action=EMAILED,
        after={"to": address, "technician": tech.public_id},
    )
    subject = f"Brief: {appointment.lead.contact.name or appointment.lead.public_id}, {appointment.public_id}"
    # A task of its own, after commit: a slow mail server never holds the booking or the timer loop.
    notice_enqueue(address, subject, text)
    return f"emailed to {address}"
