"""The agency's portfolio page (`/admin/reports/portfolio/`): one row per
business the reader may read revenue of, each linking into that business's
revenue report; nothing of a business they do not belong to
(agents/reporting/portfolio.py)."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from agents.reporting.portfolio import PERIOD, portfolio
from crm.api.revenue import report_businesses


@staff_member_required
@require_safe
def portfolio_page(request: HttpRequest) -> HttpResponse:
    businesses = report_businesses(request.user)
    if not businesses:
        raise PermissionDenied("the portfolio is for the owners and managers of a business")
    until = timezone.now()
    return render(
        request,
        "leadops/reports/portfolio.html",
        {
            "title": "Portfolio",
            "rows": portfolio(businesses, until=until),
            "since": until - PERIOD,
            "until": until,
        },
    )
