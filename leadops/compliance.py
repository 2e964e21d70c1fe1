"""The 10DLC evidence pack in the back office (agents/reporting/evidence_pack.py):
`/admin/compliance/evidence/` shows the pre-flight first, then what a carrier's
brand and campaign registration would be given; `?format=json` downloads it.
Owners and managers of the business only: it holds consent evidence of
contacts. A thin view over the pack."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from agents.reporting.evidence_pack import MISSING, evidence_pack
from crm.models import Business
from crm.permissions import business_ids_where, can_anywhere


@staff_member_required
@require_GET
def evidence_page(request: HttpRequest) -> HttpResponse:
    if not can_anywhere(request.user, "registration.view"):
        raise PermissionDenied("the evidence pack is for the owners and managers of a business")
    allowed = business_ids_where(request.user, "registration.view")
    businesses = Business.objects.order_by("name")
    if allowed is not None:
        businesses = businesses.filter(pk__in=allowed)
    chosen = businesses.filter(slug=request.GET.get("business", "")).first() or businesses.first()
    if chosen is None:
        raise PermissionDenied("no business of yours")
    pack = evidence_pack(chosen, now=timezone.now(), base_url=settings.PUBLIC_BASE_URL)
    if request.GET.get("format") == "json":
        response = HttpResponse(json.dumps(pack.as_json(), indent=2), content_type="application/json")
        response["Content-Disposition"] = f'attachment; filename="{chosen.slug}-10dlc-evidence.json"'
        return response
    return render(
        request,
        "leadops/compliance/evidence.html",
        {
            "title": "10DLC evidence pack",
            "pack": pack,
            "business": chosen,
            "businesses": businesses,
            "missing": sum(1 for f in pack.findings if f.level == MISSING),
        },
    )
