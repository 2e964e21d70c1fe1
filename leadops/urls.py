from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic.base import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter
from rest_framework.urlpatterns import format_suffix_patterns

from leadops import (
    booking_views,
    compliance,
    copilot_redirect,
    invitations,
    metrics,
    portfolio,
    reports,
    revenue,
    reviews,
    sync_views,
    two_factor,
    views,
    work,
)
from leadops.estimates_api import AppointmentHeldView, EstimateViewSet
from leadops.trace_api import LeadTraceView

# An error under /api/ or /hooks/ answers in the API's error shape (leadops.api);
# elsewhere Django's pages (templates/403.html, 404.html…).
handler400 = "leadops.api.bad_request"
handler403 = "leadops.api.permission_denied"
handler404 = "leadops.api.not_found"
handler500 = "leadops.api.server_error"

# Estimates are routed here alone: their writes call agents roles, which the
# crm API (routing every other record) may not import.
estimates_router = SimpleRouter()
estimates_router.register("estimates", EstimateViewSet, basename="estimate")
# The reads with format suffixes (estimates.json), as the crm API's router
# serves every other record; the writes without, as before.
_estimate_reads = [p for p in estimates_router.urls if getattr(p, "name", "") in ("estimate-list", "estimate-detail")]
estimate_urls = [
    *format_suffix_patterns(_estimate_reads),
    *(p for p in estimates_router.urls if p not in _estimate_reads),
]

urlpatterns = [
    path("", views.home, name="home"),
    # Browsers ask for /favicon.ico whatever the page links.
    path("favicon.ico", RedirectView.as_view(url=static("workspace/favicon.svg"), permanent=True)),
    path("healthz/", views.healthz, name="healthz"),
    path("account/two-factor/", two_factor.setup, name="two-factor-setup"),
    path("account/verify/", two_factor.verify, name="two-factor-verify"),
    # A new team member sets their password from the link in their invitation.
    path("account/invitation/<str:uidb64>/<str:token>/", invitations.invitation_page, name="invitation"),
    # Single sign-on (OpenID Connect, leadops/oidc.py): 404 while OIDC_ISSUER is empty.
    path("oidc/", include("leadops.oidc")),
    path("healthz/queue/", views.healthz_queue, name="healthz-queue"),
    # Prometheus' default path, without a slash; off unless METRICS_TOKEN is set.
    path("metrics", metrics.metrics_view, name="metrics"),
    path("app/", include("leadops.workspace.urls")),
    # The copilot's page is the workspace's thread now; old links land there.
    path("admin/leads/<str:public_id>/copilot/", copilot_redirect.lead_copilot, name="lead-copilot"),
    path("admin/leads/<str:public_id>/booking/", booking_views.lead_booking, name="lead-booking"),
    path("admin/my/next-actions/", work.my_next_actions, name="my-next-actions"),
    path("admin/my/tasks/<str:public_id>/complete/", work.task_complete_view, name="task-complete"),
    path("admin/revenue/", revenue.revenue_page, name="revenue"),
    path("admin/reports/brief/", reports.brief_page, name="report-brief"),
    path("admin/reports/exceptions/", reports.exceptions_page, name="report-exceptions"),
    path("admin/reports/funnel/", reports.funnel_page, name="report-funnel"),
    path("admin/reports/portfolio/", portfolio.portfolio_page, name="report-portfolio"),
    path("admin/reports/leaks/", reports.leaks_page, name="report-leaks"),
    path("admin/leads/<str:public_id>/trace/", reports.trace_page, name="lead-trace"),
    path("admin/compliance/evidence/", compliance.evidence_page, name="evidence-pack"),
    path("admin/reports/sms-health/", compliance.sms_health_page, name="sms-health"),
    path("admin/sequences/<str:public_id>/resume/", compliance.sequence_resume_view, name="sequence-resume"),
    path("admin/reviews/", reviews.reviews_page, name="reviews"),
    path("admin/reviews/location/", reviews.location_choose_view, name="reviews-location"),
    path("admin/reviews/<str:public_id>/reply/", reviews.reply_propose_view, name="review-reply"),
    path("admin/reviews/<str:public_id>/retry/", reviews.reply_retry_view, name="review-reply-retry"),
    path("admin/sync/", sync_views.sync_status_page, name="sync-status"),
    path("admin/sync/<slug:provider>/connect/", sync_views.sync_connect, name="sync-connect"),
    path("admin/sync/<slug:provider>/callback/", sync_views.sync_callback, name="sync-callback"),
    path("admin/sync/<slug:provider>/key/", sync_views.sync_key, name="sync-key"),
    path("admin/", admin.site.urls),
    path("", include("agents.urls")),
    # Before the crm API: the trace is agents code, which crm may not import.
    path("api/v1/leads/<str:id>/trace/", LeadTraceView.as_view(), name="lead-trace-api"),
    # Before the crm API too: writing estimates and visit outcomes calls agents roles.
    path("api/v1/appointments/<str:id>/held/", AppointmentHeldView.as_view(), name="appointment-held-api"),
    path("api/v1/", include(estimate_urls)),
    path("api/v1/", include("crm.api.urls")),
    path("api/v1/", include("approvals.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's setup as a script file: no inline script (CSP).
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
]
