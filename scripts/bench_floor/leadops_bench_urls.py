"""The production URLs plus `/bench/floor/`: the floor a webhook's
acceptance is measured against — a bare DRF endpoint (no authentication, no
permission checks, no throttles) that parses the JSON body and inserts one
row, served by the same gunicorn with the same middleware and settings."""

import secrets
from typing import Any

from django.urls import path
from django.utils import timezone
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from crm.models import InboundEvent
from leadops.urls import urlpatterns as production_urlpatterns


class FloorView(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []

    def post(self, request: Request) -> Response:
        body = request.body  # the raw bytes first, as a webhook keeps them; then DRF parses them
        data = request.data
        # One row, never processed (IGNORED), with a fresh external id so the
        # unique constraint never turns it into a repeat.
        event = InboundEvent.objects.create(
            provider="website",
            external_id=f"bench-floor:{secrets.token_hex(8)}",
            body=body,
            headers={"keys": len(data) if isinstance(data, dict) else 0},
            status=InboundEvent.Status.IGNORED,
            received_at=timezone.now(),
        )
        return Response({"id": event.public_id})


urlpatterns = [*production_urlpatterns, path("bench/floor/", FloorView.as_view())]
