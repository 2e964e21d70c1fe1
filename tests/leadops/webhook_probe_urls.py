"""Test-only URLs: one probe view under the webhook prefix and one outside
it, each reporting which browser-session machinery reached it."""

from django.http import HttpRequest, JsonResponse
from django.urls import path


def probe(request: HttpRequest) -> JsonResponse:
    # Not csrf_exempt on purpose: outside the prefix the CSRF check refuses a tokenless POST.
    return JsonResponse({name: hasattr(request, attr) for name, attr in (
        ("session", "session"), ("user", "user"), ("messages", "_messages"),
    )})  # fmt: skip


urlpatterns = [path("hooks/probe/", probe), path("probe/", probe)]
