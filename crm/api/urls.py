"""`/api/v1/`: the read API's routes (its OpenAPI schema: /api/schema/)."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from crm.api import conversations, events, leads, money, revenue

router = DefaultRouter()
router.register("leads", leads.LeadViewSet, basename="lead")
router.register("contacts", leads.ContactViewSet, basename="contact")
router.register("messages", conversations.MessageViewSet, basename="message")
router.register("inbound-events", events.InboundEventViewSet, basename="inbound-event")
router.register("tasks", conversations.TaskViewSet, basename="task")
router.register("enrollments", conversations.EnrollmentViewSet, basename="enrollment")
# Money records: each its own record, money as string decimal + currency.
router.register("appointments", money.AppointmentViewSet, basename="appointment")
# Estimates: routed by leadops (leadops.estimates_api), whose viewset adds the
# writes (recording, sending, the decision) that call agents roles to these reads.
router.register("jobs", money.JobViewSet, basename="job")
router.register("invoices", money.InvoiceViewSet, basename="invoice")
router.register("payments", money.PaymentViewSet, basename="payment")
router.register("refunds", money.RefundViewSet, basename="refund")

urlpatterns = [
    path("reports/revenue/", revenue.RevenueReportView.as_view(), name="report-revenue"),
    *router.urls,
]
