"""Google Local Services Ads leads, by polling: LSA sends no webhook.

A `google_lsa` source names its Google Ads account (`customer_id` in its
config; `timezone` when the account's differs from the business's, and
`login_customer_id` when it is reached through a manager account). Every
minute the `leadops.google_lsa` job (agents.tasks) polls each active one
through the Google Ads API (`poll`): GAQL over `local_services_lead` and
`local_services_lead_conversation`, each row stored first as an InboundEvent
and processed by the intake loop like any webhook's (`handlers`). A phone
lead is a call touch, a message or booking lead a form touch, and the
person's messages join the lead's thread. When a lead is booked, or closed as
not a job, Google is told once (`feedback`).
"""

from __future__ import annotations

from django.urls import URLPattern

from agents.capture.providers.google_lsa import feedback
from agents.capture.providers.google_lsa.handlers import conversation_process, lead_process
from agents.capture.providers.google_lsa.poll import CONVERSATION, LEAD
from crm.models import Provider
from crm.services.inbound_handlers import handler_register

# Polled, never posted to: no URL of its own.
urlpatterns: list[URLPattern] = []

handler_register(Provider.GOOGLE_LSA, LEAD, lead_process)
handler_register(Provider.GOOGLE_LSA, CONVERSATION, conversation_process)
feedback.register()
