from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect

from agents.health import queue_health
from crm.permissions import can_anywhere


def home(request: HttpRequest) -> HttpResponse:
    return redirect("admin:index")


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers: the web process answers and the database too."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


def healthz_queue(request: HttpRequest) -> JsonResponse:
    """For monitoring: 200 while every periodic job keeps succeeding, 503
    while any is overdue. Who runs the server (a signed-in owner or manager,
    or staff) also reads each job's last success and error; anyone else
    gets the verdict only: job names and error text tell an outsider what
    runs here and what fails."""
    health = queue_health()
    status = 200 if health.healthy else 503
    if can_anywhere(request.user, "timer.view"):
        return JsonResponse(health.as_dict(), status=status)
    return JsonResponse({"status": "ok" if health.healthy else "not ok"}, status=status)
