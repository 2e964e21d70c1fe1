"""Booking from the thread (`/app/leads/<id>/book/`): the approved slots on
the viewer's clock, the service address to confirm, a warning when a visit
(booked here or on Calendly) already holds the lead, and back to the thread
with what happened in words. Rescheduling, cancelling and the visit's
outcome stay on the lead's booking page, linked from here.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone

from agents.booking.services import HOLDING, BookingError, appointment_book, appointment_when
from agents.booking.slots import NotASlot, slot_key_parse, slots_offer
from crm.models import Appointment, Availability, Message
from crm.permissions import can
from leadops.booking_views import slot_days
from leadops.workspace.views import Viewer, _lead, workspace


class BookForm(forms.Form):
    slot = forms.CharField(error_messages={"required": "pick a time"})
    address = forms.CharField(
        max_length=300, error_messages={"required": "confirm the service address (or ask the customer first)"}
    )
    notes = forms.CharField(required=False, max_length=2000)


# What the confirmation text did, as the setter reads it.
CONFIRMATION_WORDS: dict[str, str] = {
    Message.Status.DRY_RUN: "the confirmation text is recorded (dry run: nothing is sent)",
    Message.Status.QUEUED: "the confirmation text is on its way",
    Message.Status.SENDING: "the confirmation text is on its way",
    Message.Status.DEFERRED: "the confirmation text goes out when quiet hours end",
    Message.Status.PENDING_APPROVAL: "the confirmation text waits for a manager's approval",
    Message.Status.BLOCKED: "the confirmation text was blocked: a task asks you to confirm yourself",
}


def _holding(lead_pk: int) -> Appointment | None:
    return Appointment.objects.filter(lead_id=lead_pk, status__in=HOLDING).order_by("starts_at").first()


@workspace
def book(request: HttpRequest, viewer: Viewer, public_id: str) -> HttpResponse:
    lead = _lead(request, public_id)
    if not can(request.user, "appointment.book", lead.business_id):
        raise PermissionDenied("your role in this business may not book visits")
    thread = reverse("workspace:thread", args=[lead.public_id])
    if request.method == "POST":
        form = BookForm(request.POST)
        if form.is_valid():
            try:
                rule_id, starts_at = slot_key_parse(form.cleaned_data["slot"])
                rule = Availability.objects.filter(business_id=lead.business_id, public_id=rule_id).first()
                if rule is None:
                    raise NotASlot("that time is no longer offered: pick another")
                booked = appointment_book(
                    lead,
                    availability=rule,
                    starts_at=starts_at,
                    actor=str(request.user.get_username()),
                    notes=form.cleaned_data["notes"],
                    location=form.cleaned_data["address"],
                )
            except BookingError as exc:
                messages.error(request, f"Not booked: {exc}")
            else:
                sent = booked.confirmation
                said = CONFIRMATION_WORDS.get(sent.status, "") if sent else "no confirmation text: confirm it yourself"
                messages.success(request, f"Booked: {appointment_when(booked.appointment)}; {said}.")
                return redirect(thread)
    else:
        form = BookForm(
            initial={"address": ", ".join(p for p in (lead.contact.address, lead.contact.postal_code) if p)}
        )
    zone = timezone.get_current_timezone()
    holding = _holding(lead.pk)
    context = {
        "lead": lead,
        "form": form,
        "days": slot_days(slots_offer(lead), zone),
        "holding": holding,
        "holding_when": appointment_when(holding) if holding else "",
        "thread_url": thread,
        "title": f"Book a visit — {lead.contact.name or lead.public_id}",
        "viewer": viewer,
    }
    return render(request, "workspace/book.html", context)
