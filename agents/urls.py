from agents.capture.providers import PROVIDER_MODULES

urlpatterns = [pattern for module in PROVIDER_MODULES for pattern in module.urlpatterns]
