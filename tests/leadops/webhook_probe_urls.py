"""Test-only URLs: one probe view under the webhook prefix and one outside
it, each reporting which browser-session machinery reached it."""

from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt


def probe(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        {
            name: hasattr(request, attr)
            for name, attr in (
                ("session", "session"),
                ("user", "user"),
                ("messages", "_messages"),
            )
        }
    )


# Under the prefix the probe is csrf_exempt, as every webhook view is (Django's
# CSRF middleware stays in place for every URL); outside it, not.
urlpatterns = [path("hooks/probe/", csrf_exempt(probe)), path("probe/", probe)]
