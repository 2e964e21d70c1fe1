"""`/api/v1/approvals/`: the approval queue and its decisions (its OpenAPI schema: /api/schema/).

A SimpleRouter: crm's DefaultRouter already serves the `/api/v1/` root.
"""

from rest_framework.routers import SimpleRouter

from approvals import api

router = SimpleRouter()
router.register("approvals", api.ApprovalViewSet, basename="approval")

urlpatterns = router.urls
