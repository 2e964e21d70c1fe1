"""`/api/v1/`: the read API (CONTRACT, "API")."""

from rest_framework.routers import DefaultRouter

from crm import api

router = DefaultRouter()
router.register("leads", api.LeadViewSet, basename="lead")
router.register("contacts", api.ContactViewSet, basename="contact")
router.register("messages", api.MessageViewSet, basename="message")
router.register("inbound-events", api.InboundEventViewSet, basename="inbound-event")
router.register("tasks", api.TaskViewSet, basename="task")

urlpatterns = router.urls
