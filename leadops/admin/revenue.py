"""The admin for jobs, invoices, payments and refunds.

Here, not in crm's admin: crm cannot call the roles that must follow a
payment (settling the invoice, the lead's orchestrator event). Every
form here parses and calls one service in `agents.revenue`; the records
themselves stay read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from agents.revenue.jobs import JobError, invoice_issue, job_complete
from agents.revenue.payments import PaymentError, payment_link, payment_manual_record, refund_add
from crm import models as m
from crm.admin import BusinessFilter, ReadOnlyAdmin, ScopedAdmin, actor_of, admin_bulk
from crm.permissions import can
from crm.selectors import lead_list_visible


def _money_field() -> forms.DecimalField:
    return forms.DecimalField(max_digits=12, decimal_places=2, min_value=Decimal("0.01"))


class ManualPaymentForm(forms.Form):
    lead = forms.CharField(max_length=40, help_text="The lead's id, e.g. lead_01J…")
    amount = _money_field()
    currency = forms.CharField(max_length=3, initial="USD")
    received_at = forms.DateTimeField(help_text="Your time zone (named at the top of the page), e.g. 2026-12-01 15:00")
    invoice = forms.CharField(max_length=40, required=False, help_text="The invoice it pays (inv_…), if any")
    reference = forms.CharField(max_length=200, required=False, help_text="Check number, terminal receipt… (unique)")


class IssueInvoiceForm(forms.Form):
    lead = forms.CharField(max_length=40, help_text="The lead's id, e.g. lead_01J…")
    job = forms.CharField(max_length=40, required=False, help_text="The job it bills (job_…), if any")
    amount = _money_field()
    currency = forms.CharField(max_length=3, initial="USD")
    number = forms.CharField(max_length=64, required=False)
    due_at = forms.DateTimeField(required=False, help_text="Your time zone; empty: in 14 days")


class LinkForm(forms.Form):
    lead = forms.CharField(max_length=40, help_text="The lead this payment is for (lead_…)")
    invoice = forms.CharField(max_length=40, required=False, help_text="The invoice it pays (inv_…), if any")
    reason = forms.CharField(max_length=300)


class RefundForm(forms.Form):
    amount = _money_field()
    reason = forms.CharField(max_length=300)


def _visible_lead(request: HttpRequest, public_id: str) -> m.Lead:
    lead = lead_list_visible(request.user).select_related("business", "contact").filter(public_id=public_id.strip())
    found = lead.first()
    if found is None:
        raise forms.ValidationError(f"no lead {public_id!r} that you may see")
    return found


def _record(model: type[Any], lead: m.Lead, public_id: str) -> Any:
    if not public_id.strip():
        return None
    found = model.objects.filter(lead=lead, public_id=public_id.strip()).first()
    if found is None:
        raise forms.ValidationError(f"{public_id!r} is not a {model._meta.verbose_name} of {lead.public_id}")
    return found


class ServiceFormAdmin(ScopedAdmin):
    """Read-only records whose "add" page is a form that calls a service."""

    add_form: type[forms.Form]
    add_title = ""
    # Each subclass names the service its add form calls.
    add_record: Callable[[HttpRequest, dict[str, Any]], Any]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in self.model._meta.fields if f.name != "id"]

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: Any = None) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = self.add_form(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                record = self.add_record(request, form.cleaned_data)
            except forms.ValidationError as exc:
                form.add_error(None, exc)
            except (PaymentError, JobError) as exc:
                form.add_error(None, str(exc))
            else:
                self.message_user(request, f"{record.public_id} recorded, with a receipt.", messages.SUCCESS)
                return HttpResponseRedirect(
                    reverse(f"admin:crm_{self.model._meta.model_name}_change", args=[record.pk])
                )
        context = {
            **self.admin_site.each_context(request),
            "title": self.add_title,
            "form": form,
            "opts": self.model._meta,
            "has_view_permission": True,
        }
        return TemplateResponse(request, "admin/revenue/service_form.html", context)


@admin.register(m.Payment)
class PaymentAdmin(ServiceFormAdmin):
    list_display = [
        "public_id",
        "lead",
        "amount",
        "currency",
        "provider",
        "external_id",
        "match_status",
        "received_at",
        "business",
    ]
    list_select_related = ["lead", "business"]
    list_filter = ["match_status", "provider", BusinessFilter]
    search_fields = ["public_id", "external_id", "lead__public_id"]
    show_full_result_count = False
    change_form_template = "admin/crm/payment/change_form.html"
    add_form = ManualPaymentForm
    add_title = "Record a payment taken by hand (cash, check, card terminal)"

    def add_record(self, request: HttpRequest, data: dict[str, Any]) -> m.Payment:
        lead = _visible_lead(request, data["lead"])
        return payment_manual_record(
            lead=lead,
            amount=data["amount"],
            currency=data["currency"],
            received_at=data["received_at"],
            actor=actor_of(request),
            invoice=_record(m.Invoice, lead, data["invoice"]),
            reference=data["reference"],
        )

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/link/", view(self.link_view), name="crm_payment_link"),
            path("<path:object_id>/refund/", view(self.refund_view), name="crm_payment_refund"),
            *super().get_urls(),
        ]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        payment = self.get_object(request, object_id)
        extra = dict(extra_context or {}, show_save=False, show_save_and_continue=False)
        if payment is not None:
            first = payment.match_candidates[0] if payment.match_candidates else {}
            extra.update(
                candidates=payment.match_candidates,
                refunds=list(payment.refunds.order_by("refunded_at")),
                can_change=self.has_change_permission(request, payment),
                can_refund=can(request.user, "refund.add", payment.business_id),
                link_form=LinkForm(initial={"lead": first.get("lead", ""), "invoice": first.get("invoice") or ""}),
                refund_form=RefundForm(),
            )
        return super().change_view(request, object_id, form_url, extra)

    def _payment_form(
        self,
        request: HttpRequest,
        object_id: str,
        form_class: type[forms.Form],
        allowed: bool,
        apply: Callable[[m.Payment, dict[str, Any]], object],
        done: str,
    ) -> HttpResponse:
        payment = get_object_or_404(self.get_queryset(request), pk=object_id)
        back = HttpResponseRedirect(reverse("admin:crm_payment_change", args=[payment.pk]))
        if request.method != "POST":
            return back
        if not allowed:
            raise PermissionDenied("your role in this business may not change this payment")
        form = form_class(request.POST)
        if not form.is_valid():
            self.message_user(request, f"Not saved: {form.errors.as_text()}", messages.ERROR)
            return back
        try:
            apply(payment, form.cleaned_data)
        except forms.ValidationError as exc:
            self.message_user(request, f"Not saved: {' '.join(exc.messages)}", messages.ERROR)
        except PaymentError as exc:
            self.message_user(request, f"Not saved: {exc}", messages.ERROR)
        else:
            self.message_user(request, done, messages.SUCCESS)
        return back

    def link_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def apply(payment: m.Payment, data: dict[str, Any]) -> object:
            lead = _visible_lead(request, data["lead"])
            invoice = _record(m.Invoice, lead, data["invoice"])
            return payment_link(payment, lead=lead, invoice=invoice, actor=actor_of(request), reason=data["reason"])

        payment = get_object_or_404(self.get_queryset(request), pk=object_id)
        allowed = self.has_change_permission(request, payment)
        return self._payment_form(request, object_id, LinkForm, allowed, apply, "Linked, with a receipt.")

    def refund_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def apply(payment: m.Payment, data: dict[str, Any]) -> object:
            return refund_add(
                payment,
                amount=data["amount"],
                actor=actor_of(request),
                reason=data["reason"],
                refunded_at=timezone.now(),
            )

        payment = get_object_or_404(self.get_queryset(request), pk=object_id)
        allowed = can(request.user, "refund.add", payment.business_id)
        return self._payment_form(request, object_id, RefundForm, allowed, apply, "Refund recorded, with a receipt.")


@admin.register(m.Invoice)
class InvoiceAdmin(ServiceFormAdmin):
    list_display = ["public_id", "lead", "job", "number", "status", "amount", "currency", "issued_at", "business"]
    list_select_related = ["lead", "job", "business"]
    list_filter = ["status", BusinessFilter]
    search_fields = ["public_id", "number", "lead__public_id"]
    show_full_result_count = False
    add_form = IssueInvoiceForm
    add_title = "Issue an invoice"

    def add_record(self, request: HttpRequest, data: dict[str, Any]) -> m.Invoice:
        lead = _visible_lead(request, data["lead"])
        return invoice_issue(
            lead=lead,
            amount=data["amount"],
            currency=data["currency"],
            actor=actor_of(request),
            job=_record(m.Job, lead, data["job"]),
            number=data["number"],
            due_at=data["due_at"],
        )


@admin.register(m.Job)
class JobAdmin(ScopedAdmin):
    list_display = ["public_id", "lead", "status", "technician", "scheduled_for", "completed_at", "business"]
    list_select_related = ["lead", "technician", "business"]
    list_filter = ["status", BusinessFilter]
    search_fields = ["public_id", "lead__public_id"]
    show_full_result_count = False
    actions = ["complete"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in m.Job._meta.fields if f.name != "id"]

    @admin.action(description="Mark the selected jobs completed", permissions=["change"])
    def complete(self, request: HttpRequest, queryset: QuerySet[m.Job]) -> None:
        def apply(job: m.Job) -> object:
            return job_complete(job, actor=actor_of(request))

        admin_bulk(self, request, queryset, apply, JobError, "Completed {n} job(s).")


@admin.register(m.Refund)
class RefundAdmin(ReadOnlyAdmin):
    lead_path = "payment__lead"
    list_display = ["public_id", "payment", "amount", "currency", "provider", "external_id", "refunded_at", "business"]
    list_select_related = ["payment", "business"]
    list_filter = [BusinessFilter, "provider"]
    search_fields = ["public_id", "external_id", "payment__public_id"]
    show_full_result_count = False
