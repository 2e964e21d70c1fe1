from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect


def home(request: HttpRequest) -> HttpResponse:
    return redirect("admin:index")


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers: the database answers."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})
