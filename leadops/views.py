from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect

from agents.health import queue_health


def home(request: HttpRequest) -> HttpResponse:
    return redirect("admin:index")


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers: the web process answers and the database too."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


def healthz_queue(request: HttpRequest) -> JsonResponse:
    """For monitoring: when each periodic job last succeeded; 503 while any is overdue."""
    health = queue_health()
    return JsonResponse(health.as_dict(), status=200 if health.healthy else 503)
