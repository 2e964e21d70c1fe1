"""The revenue page: the revenue report (crm.attribution) for people, with
CSV and XLSX exports. Staff login; a user reads the revenue of the
businesses they own or manage. A thin view: the same validation and report
as the API endpoint."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework.exceptions import PermissionDenied, ValidationError

from crm.api.revenue import report_businesses, revenue_for
from crm.attribution import BY_CHOICES, REPEAT_CHOICES, TOUCH_CHOICES, revenue_csv_rows, revenue_table
from crm.exports import XLSX_TYPE, SafeCsvWriter, xlsx_bytes
from crm.localtime import zone_name


@staff_member_required
def revenue_page(request: HttpRequest) -> HttpResponse:
    params = request.GET.dict()
    params.pop("format", None)
    context = {
        "businesses": report_businesses(request.user),
        "by_choices": BY_CHOICES,
        "touch_choices": TOUCH_CHOICES,
        "repeat_choices": REPEAT_CHOICES,
        "params": params,
    }
    try:
        report, businesses = revenue_for(request.user, params)
    except PermissionDenied as exc:
        return render(request, "leadops/revenue.html", {**context, "error": str(exc.detail)}, status=403)
    except ValidationError as exc:
        detail = exc.detail if isinstance(exc.detail, dict) else {"query": exc.detail}
        error = "; ".join(f"{k}: {' '.join(str(m) for m in v)}" for k, v in detail.items())
        return render(request, "leadops/revenue.html", {**context, "error": error}, status=400)
    name = "revenue-" + "-".join(b.slug for b in businesses)[:80] + f"-{report.by}-{report.touch}"
    if request.GET.get("format") == "csv":
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
        SafeCsvWriter(response).writerows(revenue_csv_rows(report))
        return response
    if request.GET.get("format") == "xlsx":
        header, *rows = revenue_table(report)
        response = HttpResponse(xlsx_bytes("Revenue", header, rows, money=report.currency), content_type=XLSX_TYPE)
        response["Content-Disposition"] = f'attachment; filename="{name}.xlsx"'
        return response
    query = request.GET.copy()
    query["format"] = "csv"
    xlsx = request.GET.copy()
    xlsx["format"] = "xlsx"
    days_zone = businesses[0].timezone if len(businesses) == 1 else zone_name()
    return render(
        request,
        "leadops/revenue.html",
        {
            **context,
            "report": report,
            "selected": businesses,
            "csv_query": query.urlencode(),
            "xlsx_query": xlsx.urlencode(),
            "days_zone": days_zone,
        },
    )
