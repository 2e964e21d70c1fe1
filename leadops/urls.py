from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from leadops import copilot, views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz/", views.healthz, name="healthz"),
    path("healthz/queue/", views.healthz_queue, name="healthz-queue"),
    path("admin/leads/<str:public_id>/copilot/", copilot.lead_copilot, name="lead-copilot"),
    path("admin/", admin.site.urls),
    path("", include("agents.urls")),
    path("api/v1/", include("crm.api_urls")),
    path("api/v1/", include("approvals.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]
