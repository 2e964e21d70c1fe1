"""The right to text, in the back office.

- `/admin/compliance/evidence/`: the 10DLC evidence pack
  (agents/reporting/evidence_pack.py), the pre-flight first, then what a
  carrier's brand and campaign registration would be given; `?format=json`
  downloads it. Owners and managers only: it holds consent evidence.
- `/admin/reports/sms-health/`: SMS health (agents/reporting/sms_health.py),
  and `POST /admin/sequences/<id>/resume/` for a sequence it paused.

Thin views over the reporting modules."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_POST

from agents.followup.sequences.pauses import sequence_resume
from agents.reporting.evidence_pack import MISSING, evidence_pack
from agents.reporting.sms_health import EXCEPTION_KIND, WINDOW, Health, limits_of, over_limits, sms_health
from crm.figures import Figure, before_words, figure, rate
from crm.models import Business, Sequence
from crm.permissions import business_ids_where, can, can_anywhere
from crm.services.exceptions import manager_exceptions_resolve
from leadops.charts import bar_chart, rate_figure


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
            "title": f"10DLC evidence pack — {chosen.name}",
            "pack": pack,
            "business": chosen,
            "businesses": businesses,
            "missing": sum(1 for f in pack.findings if f.level == MISSING),
        },
    )


# --- SMS health -------------------------------------------------------------------------------


def _health_businesses(request: HttpRequest) -> Any:
    if not can_anywhere(request.user, "report.view") or not can_anywhere(request.user, "money.view"):
        raise PermissionDenied("SMS health is for the owners and managers of a business")
    allowed = business_ids_where(request.user, "money.view")
    businesses = Business.objects.order_by("name")
    return businesses if allowed is None else businesses.filter(pk__in=allowed)


@staff_member_required
@require_GET
def sms_health_page(request: HttpRequest) -> HttpResponse:
    """Delivery, carrier errors, opt-outs and replies of the last 7 days, by
    number, template and sequence step; the sequences paused, with a
    Resume button for those who may."""
    businesses = _health_businesses(request)
    chosen = businesses.filter(slug=request.GET.get("business", "")).first() or businesses.first()
    if chosen is None:
        raise PermissionDenied("no business of yours")
    now = timezone.now()
    health = sms_health(chosen, until=now)
    previous = sms_health(chosen, until=now - WINDOW)
    limits = limits_of(chosen)
    return render(
        request,
        "leadops/compliance/sms_health.html",
        {
            "title": f"SMS health — {chosen.name}",
            "health": health,
            "figures": health_figures(health, previous),
            "chart": health_chart(health),
            "business": chosen,
            "businesses": businesses,
            "limits": limits,
            "steps": [(row, over_limits(row, limits)) for row in health.steps],
            "templates": [(row, over_limits(row, limits)) for row in health.templates],
            "paused": Sequence.objects.filter(business=chosen, paused_at__isnull=False).order_by("paused_at"),
            "may_resume": can(request.user, "sequence.resume", chosen.pk),
        },
    )


@staff_member_required
@require_POST
def sequence_resume_view(request: HttpRequest, public_id: str) -> HttpResponse:
    sequence = Sequence.objects.select_related("business").filter(public_id=public_id).first()
    if sequence is None or not can(request.user, "sequence.resume", sequence.business_id):
        raise PermissionDenied("only the business's owners and managers resume its sequences")
    actor = request.user.get_username()
    if sequence_resume(sequence, actor=actor):
        manager_exceptions_resolve(
            business_id=sequence.business_id, kind=EXCEPTION_KIND, subject=sequence.public_id, actor=actor
        )
        messages.success(request, f"The {sequence.key} sequence is running again.")
    return HttpResponseRedirect(reverse("sms-health") + f"?business={sequence.business.slug}")


def health_figures(health: Health, previous: Health) -> list[Figure]:
    """The week's four numbers against the week before; rates change in points."""
    against = before_words(WINDOW)
    total, was = health.total, previous.total
    return [
        figure("sent", "Texts sent", total.sent, (was.sent, against)),
        rate_figure("delivery", "Delivered", total.delivery_rate, was.delivery_rate, against),
        figure(
            "opt_outs",
            "Opt-outs per 100 texts",
            rate(total.opt_outs_per_100),
            (rate(was.opt_outs_per_100), against),
            fmt=lambda v: "—" if v is None else f"{v:.1f}",
            lower_is_better=True,
        ),
        rate_figure("replied", "Replied", health.reply_rate, previous.reply_rate, against),
    ]


def health_chart(health: Health) -> SafeString:
    """Opt-outs per 100 texts by sequence step: what pauses a sequence, worst first."""
    measured = [row for row in health.steps if row.opt_outs_per_100 is not None]
    worst = sorted(measured, key=lambda row: (-(row.opt_outs_per_100 or 0), row.key))[:10]
    bars = [(row.key, row.opt_outs_per_100 or 0.0, f"{row.opt_outs_per_100:.1f} ({row.sent:,} sent)") for row in worst]
    return bar_chart(bars, chart_id="health-chart", title="Opt-outs per 100 texts, by sequence step", color="#ba2121")
