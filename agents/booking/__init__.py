"""Appointments: Calendar Booking (slots, booking, reminders, reschedule and
cancel), the Booking Matcher for Calendly, No-Show Recovery, the step after a
held appointment, and the Technician Brief."""
