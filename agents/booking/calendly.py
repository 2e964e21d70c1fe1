"""Calendly's deliveries, acted on: a booking books the lead it matches (or
asks a person which lead), a cancellation cancels the visit and gives its
owner the rebooking, a no-show starts recovery. Capture stores and parses
the delivery (agents/capture/providers/calendly.py); booking, which owns
appointments, processes it, registered by kind at startup.

Every lookup is within the business whose source accepted the event: an
event accepted on one business's endpoint never reaches another's visits.
"""

from __future__ import annotations

from agents.booking.matcher import UNMATCHED, booking_exception, booking_exception_resolve, booking_match
from agents.booking.no_show import no_show_record
from agents.booking.services import (
    HOLDING,
    BookingError,
    appointment_cancel,
    appointment_record_external,
    appointment_release_rescheduled,
)
from agents.capture.base import json_object
from agents.capture.processing import event_process
from agents.capture.providers.calendly import (
    CANCELED,
    CREATED,
    IGNORED_KINDS,
    NO_SHOW,
    Invitee,
    invitee_parse,
)
from crm.models import Appointment, Business, ExceptionItem, InboundEvent, Provider, TeamMember
from crm.services.inbound_handlers import MalformedPayload, handler_register

ACTOR = "agent:booking_matcher"


def _event_invitee(event: InboundEvent) -> Invitee:
    _kind, invitee = invitee_parse(json_object(bytes(event.body)))
    return invitee


def _appointment(business_id: int, invitee_uri: str) -> Appointment | None:
    """The business's appointment of an invitee: an event accepted on one
    business's source never reaches another's visits, whatever invitee it
    names."""
    return (
        Appointment.objects.select_related("lead__business", "lead__contact")
        .filter(provider=Provider.CALENDLY, external_id=invitee_uri, business_id=business_id)
        .first()
    )


def _booking_of(event: InboundEvent, invitee_uri: str) -> Appointment | None:
    """The appointment of an invitee in the event's business, recording its
    booking first when that delivery is stored but not processed yet:
    Calendly does not promise order, and workers take events in parallel."""
    assert event.business_id is not None  # a Calendly event is stored with its source's business
    appointment = _appointment(event.business_id, invitee_uri)
    if appointment is not None:
        return appointment
    booking = InboundEvent.objects.filter(
        provider=Provider.CALENDLY, external_id=f"{CREATED}:{invitee_uri}", business_id=event.business_id
    ).first()
    if booking is None:
        return None
    if booking.status == InboundEvent.Status.PROCESSING:
        raise LookupError(f"its booking {booking.public_id} is being processed right now: replay this event")
    if booking.status in (InboundEvent.Status.RECEIVED, InboundEvent.Status.FAILED):
        event_process(booking.pk)
    return _appointment(event.business_id, invitee_uri)


def _host(business: Business, invitee: Invitee) -> TeamMember | None:
    if not invitee.host_emails:
        return None
    return (
        TeamMember.objects.filter(business=business, is_active=True, email__in=invitee.host_emails)
        .order_by("pk")
        .first()
    )


def _notes(invitee: Invitee) -> str:
    lines = [f"Calendly: {invitee.event_name}"] if invitee.event_name else []
    lines += [f"{q}: {a}" for q, a in invitee.answers]
    return "\n".join(lines)


def _created(event: InboundEvent) -> str:
    business, invitee = event.business, _event_invitee(event)
    assert business is not None
    if _appointment(business.pk, invitee.uri) is not None:
        return InboundEvent.Status.PROCESSED  # a replay: the booking is already recorded
    if invitee.starts_at is None or invitee.ends_at is None:
        raise MalformedPayload("the booking has no scheduled_event start_time and end_time")
    match = booking_match(business, emails=invitee.emails, phones=invitee.phones, tracking=invitee.tracking)
    if match.lead is None:
        booking_exception(
            business,
            subject=event.public_id,
            title=f"Calendly booking matches no lead: {invitee.label()}",
            detail=f"{match.detail}; invitee {invitee.uri}",
        )
        return InboundEvent.Status.PROCESSED
    old = _appointment(business.pk, invitee.old_invitee) if invitee.old_invitee else None
    try:
        appointment_record_external(
            match.lead,
            starts_at=invitee.starts_at,
            ends_at=invitee.ends_at,
            provider=Provider.CALENDLY,
            external_id=invitee.uri,
            actor=ACTOR,
            assigned_to=_host(business, invitee),
            location=invitee.location,
            notes=_notes(invitee),
            rescheduled_from=old,
        )
    except BookingError as exc:
        booking_exception(
            business,
            subject=event.public_id,
            lead=match.lead,
            title=f"Calendly booking for {match.lead.public_id} needs a person: {invitee.label()}",
            detail=f"matched by {match.how}, but {exc}; invitee {invitee.uri}",
        )
    return InboundEvent.Status.PROCESSED


def _canceled(event: InboundEvent) -> str:
    invitee = _event_invitee(event)
    appointment = _booking_of(event, invitee.uri)
    if appointment is None:
        # Booked while unmatched: the person's exception for it can close.
        for item in ExceptionItem.objects.filter(
            business=event.business, kind=UNMATCHED, status=ExceptionItem.Status.OPEN, detail__contains=invitee.uri
        ):
            booking_exception_resolve(item, actor=ACTOR, how="canceled in Calendly before it was matched")
        return InboundEvent.Status.IGNORED
    if appointment.status not in HOLDING:
        return InboundEvent.Status.IGNORED
    if invitee.rescheduled:
        appointment_release_rescheduled(appointment, actor=ACTOR)
        return InboundEvent.Status.PROCESSED
    by = f" by {invitee.canceled_by}" if invitee.canceled_by else ""
    appointment_cancel(
        appointment, actor=ACTOR, reason=f"canceled in Calendly{by}: {invitee.cancel_reason or 'no reason given'}"
    )
    return InboundEvent.Status.PROCESSED


def _no_show(event: InboundEvent) -> str:
    invitee = _event_invitee(event)
    appointment = _booking_of(event, invitee.uri)
    if appointment is None:
        assert event.business is not None
        booking_exception(
            event.business,
            subject=event.public_id,
            title="Calendly no-show for a booking not on record",
            detail=f"no appointment for invitee {invitee.uri}",
        )
        return InboundEvent.Status.PROCESSED
    if appointment.status not in (*HOLDING, Appointment.Status.NO_SHOW):
        return InboundEvent.Status.IGNORED
    no_show_record(appointment, actor=ACTOR)
    return InboundEvent.Status.PROCESSED


def _ignore(event: InboundEvent) -> str:
    return InboundEvent.Status.IGNORED


def register() -> None:
    handler_register(Provider.CALENDLY, CREATED, _created)
    handler_register(Provider.CALENDLY, CANCELED, _canceled)
    handler_register(Provider.CALENDLY, NO_SHOW, _no_show)
    for kind in IGNORED_KINDS:
        handler_register(Provider.CALENDLY, kind, _ignore)
