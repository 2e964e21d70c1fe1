from agents.capture.providers import PROVIDER_MODULES
from agents.followup.views import urlpatterns as followup_urlpatterns
from agents.reporting.call_scoring import urlpatterns as call_scoring_urlpatterns
from agents.reviews.views import urlpatterns as review_urlpatterns
from agents.sync.calendar_hooks import urlpatterns as calendar_urlpatterns
from agents.sync.webhooks import urlpatterns as sync_urlpatterns

urlpatterns = [pattern for module in PROVIDER_MODULES for pattern in module.urlpatterns]
urlpatterns += followup_urlpatterns
urlpatterns += call_scoring_urlpatterns  # /hooks/twilio/voice/recording/
urlpatterns += sync_urlpatterns  # /hooks/jobber/
urlpatterns += calendar_urlpatterns  # /hooks/google-calendar/, /hooks/microsoft-calendar/
urlpatterns += review_urlpatterns  # /r/<token>/, a review request's counted link
