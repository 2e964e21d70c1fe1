"""`/api/v1/`: the read API (its OpenAPI schema: /api/schema/)."""

from django.urls import path
from rest_framework.routers import DefaultRouter

from crm import api, api_money

router = DefaultRouter()
router.register("leads", api.LeadViewSet, basename="lead")
router.register("contacts", api.ContactViewSet, basename="contact")
router.register("messages", api.MessageViewSet, basename="message")
router.register("inbound-events", api.InboundEventViewSet, basename="inbound-event")
router.register("tasks", api.TaskViewSet, basename="task")
router.register("enrollments", api.EnrollmentViewSet, basename="enrollment")
# Money records: each its own record, money as string decimal + currency.
router.register("appointments", api_money.AppointmentViewSet, basename="appointment")
# Estimates: routed by leadops (leadops.estimates_api), whose viewset adds the
# writes (recording, sending, the decision) that call agents roles to these reads.
router.register("jobs", api_money.JobViewSet, basename="job")
router.register("invoices", api_money.InvoiceViewSet, basename="invoice")
router.register("payments", api_money.PaymentViewSet, basename="payment")
router.register("refunds", api_money.RefundViewSet, basename="refund")

urlpatterns = [
    path("reports/revenue/", api_money.RevenueReportView.as_view(), name="report-revenue"),
    *router.urls,
]
