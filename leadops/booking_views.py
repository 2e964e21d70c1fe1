"""The lead's booking page (`/admin/leads/<id>/booking/`): the approved slots
for this lead, its appointments with their confirmation and technician
brief, and the buttons a setter needs — book, reschedule, cancel, held,
no-show, and the next state after a held visit.

Thin: it reads through the selectors and `slots_offer`, and each button
calls one service of `agents.booking`; a refusal (a full slot, a time that
is not a slot…) is shown as the service worded it, and nothing is written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django import forms
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from agents.booking.no_show import no_show_outreach_preview, no_show_record
from agents.booking.services import (
    HOLDING,
    NEXT_STATES,
    BookingError,
    appointment_book,
    appointment_cancel,
    appointment_mark_held,
    appointment_next_state,
    appointment_reschedule,
)
from agents.booking.slots import NotASlot, Slot, slot_key_parse, slots_offer, when_label, window_label
from crm.localtime import zone_label
from crm.models import Appointment, Availability, Lead, Message, Stage
from crm.permissions import can
from crm.selectors import lead_list_visible


class BookForm(forms.Form):
    slot = forms.CharField()
    notes = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


class AppointmentForm(forms.Form):
    appointment = forms.CharField()


class RescheduleForm(AppointmentForm):
    slot = forms.CharField()


class CancelForm(AppointmentForm):
    reason = forms.CharField(max_length=300)


class NextStateForm(forms.Form):
    state = forms.ChoiceField(choices=[(s, s.replace("_", " ")) for s in NEXT_STATES])
    reason = forms.CharField(required=False, max_length=300)
    follow_up_at = forms.DateTimeField(required=False, help_text="your time zone (named on the page)")
    follow_up_title = forms.CharField(required=False, max_length=300)


def _lead(request: HttpRequest, public_id: str) -> Lead:
    lead = (
        lead_list_visible(request.user)
        .select_related("business", "contact", "owner__user", "service_line")
        .filter(public_id=public_id)
        .first()
    )
    if lead is None:
        raise Http404("no such lead")
    return lead


def _actor(request: HttpRequest) -> str:
    return str(request.user.get_username())


def _slot(lead: Lead, key: str) -> tuple[Availability, datetime]:
    public_id, starts_at = slot_key_parse(key)
    rule = Availability.objects.filter(business_id=lead.business_id, public_id=public_id).first()
    if rule is None:
        raise NotASlot(f"no availability rule {public_id!r} in this business")
    return rule, starts_at


def _appointment(lead: Lead, form: forms.Form) -> Appointment:
    appointment = lead.appointments.filter(public_id=form.cleaned_data["appointment"]).first()
    if appointment is None:
        raise BookingError(f"{lead.public_id} has no appointment {form.cleaned_data['appointment']!r}")
    return appointment


def _valid(form: forms.Form) -> forms.Form:
    if not form.is_valid():
        raise BookingError(f"incomplete form: {form.errors.as_text()}")
    return form


def _act(request: HttpRequest, lead: Lead) -> str:
    """Run the one service the pressed button names; returns what to tell the setter."""
    action, data, actor = request.POST.get("action", ""), request.POST, _actor(request)
    if action == "book":
        form = _valid(BookForm(data))
        rule, starts_at = _slot(lead, form.cleaned_data["slot"])
        booked = appointment_book(
            lead, availability=rule, starts_at=starts_at, actor=actor, notes=form.cleaned_data["notes"]
        )
        return f"Booked {booked.appointment.public_id} for {_when(booked.appointment)}. " + _confirmation(
            booked.confirmation
        )
    if action == "reschedule":
        form = _valid(RescheduleForm(data))
        rule, starts_at = _slot(lead, form.cleaned_data["slot"])
        moved = appointment_reschedule(_appointment(lead, form), availability=rule, starts_at=starts_at, actor=actor)
        return f"Moved to {_when(moved.appointment)} ({moved.appointment.public_id}). " + _confirmation(
            moved.confirmation
        )
    if action in ("cancel", "no_show") and data.get("confirmed") != "yes":
        raise BookingError("nothing done: confirm first (the page says what it will send)")
    if action == "cancel":
        form = _valid(CancelForm(data))
        canceled = appointment_cancel(_appointment(lead, form), actor=actor, reason=form.cleaned_data["reason"])
        return f"Canceled {canceled.public_id}; the owner gets a rebooking task."
    if action == "held":
        held = appointment_mark_held(_appointment(lead, _valid(AppointmentForm(data))), actor=actor)
        return f"{held.public_id} held: set the lead's next state."
    if action == "no_show":
        missed = no_show_record(_appointment(lead, _valid(AppointmentForm(data))), actor=actor)
        return f"{missed.public_id} marked a no-show: recovery has started."
    if action == "next_state":
        form = _valid(NextStateForm(data))
        # Read in the viewer's zone (the one the page names), made aware by the form.
        follow_up_at = form.cleaned_data["follow_up_at"]
        moved_on = appointment_next_state(
            lead,
            form.cleaned_data["state"],
            actor=actor,
            reason=form.cleaned_data["reason"],
            follow_up_at=follow_up_at,
            follow_up_title=form.cleaned_data["follow_up_title"],
        )
        return f"{moved_on.public_id}: {moved_on.stage}" + (
            f", next: {moved_on.next_action}" if moved_on.next_action else ""
        )
    raise BookingError(f"unknown action {action!r}")


def _when(appointment: Appointment) -> str:
    """When a visit is, in the viewer's zone, the zone's abbreviation after it
    (the customer's confirmation says it in the business's zone)."""
    zone = timezone.get_current_timezone()
    return f"{when_label(appointment.starts_at, appointment.ends_at, zone)} {appointment.ends_at.astimezone(zone):%Z}"


def _confirmation(message: Message | None) -> str:
    if message is None:
        return "No confirmation sent: a task asks you to confirm yourself."
    reason = f" ({message.block_reason})" if message.block_reason else ""
    return f"Confirmation {message.public_id}: {message.status}{reason}."


def slot_days(slots: list[Slot], zone: ZoneInfo) -> list[tuple[str, list[dict[str, Any]]]]:
    days: dict[str, list[dict[str, Any]]] = {}
    for slot in slots:
        start = slot.starts_at.astimezone(zone)
        days.setdefault(f"{start:%A, %b} {start.day}", []).append(
            {
                "key": slot.key,
                "label": window_label(slot.starts_at, slot.ends_at, zone),
                "remaining": slot.remaining,
                "capacity": slot.capacity,
                "members": ", ".join(str(m) for m in slot.members),
            }
        )
    return list(days.items())


@staff_member_required
def lead_booking(request: HttpRequest, public_id: str) -> HttpResponse:
    lead = _lead(request, public_id)
    may_book = can(request.user, "appointment.book", lead.business_id)
    if request.method == "POST":
        if not may_book:
            raise PermissionDenied("your role in this business may not book or record visits")
        try:
            messages.success(request, _act(request, lead))
        except BookingError as exc:
            messages.error(request, f"Not done ({exc.code}): {exc}")
        return redirect("lead-booking", public_id=lead.public_id)

    # Slots are the business's hours, shown on the viewer's clock.
    zone = timezone.get_current_timezone()
    appointments = list(lead.appointments.select_related("assigned_to__user").order_by("-starts_at", "-pk"))
    confirmations = {
        str(m.idempotency_key).rsplit(":", 1)[1]: m
        for m in Message.objects.filter(lead=lead, idempotency_key__startswith="appointment.confirmation:")
    }
    rows = [
        {
            "appointment": a,
            "when": _when(a),
            "holding": a.status in HOLDING,
            "confirmation": confirmations.get(a.public_id),
        }
        for a in appointments
    ]
    current = next((r for r in rows if r["holding"]), rows[0] if rows else None)
    slots = slots_offer(lead)
    name = lead.contact.first_name or "the customer"
    context: dict[str, Any] = {
        "lead": lead,
        "zone": zone_label(zone),
        "rows": rows,
        "current": current,
        "days": slot_days(slots, zone),
        "slot_choices": [(s.key, f"{s.local_label(zone)} ({s.remaining} left)") for s in slots],
        "may_book": may_book,
        "needs_next_state": lead.stage == Stage.APPOINTMENT_HELD,
        "next_states": NextStateForm().fields["state"].choices,  # type: ignore[attr-defined]
        "title": f"Booking — {lead.contact.name or lead.public_id}",
        # What each outcome sends, said before the setter confirms it.
        "cancel_says": f"Nothing is texted to {name}: the reminders of the visit are withdrawn, and the owner gets "
        "a task to rebook.",
        "no_show_says": f"For {name}, {no_show_outreach_preview(lead)}." if current and current["holding"] else "",
    }
    return render(request, "leadops/booking.html", context)
