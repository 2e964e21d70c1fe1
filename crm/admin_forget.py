"""The Contact admin's "Forget this person" action: owners only, and only
after the owner types the contact's id, since the erasure cannot be undone."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from crm.models import Contact
from crm.permissions import can
from crm.services.forget import contact_forget


class ForgetConfirmForm(forms.Form):
    confirm = forms.CharField(max_length=40, label="Type the contact's id to confirm")
    reason = forms.CharField(
        max_length=300, required=False, help_text="Why (kept in the receipt, with the person's data redacted)"
    )

    def __init__(self, *args: Any, contact: Contact, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.contact = contact

    def clean_confirm(self) -> str:
        typed = self.cleaned_data["confirm"].strip()
        if typed != self.contact.public_id:
            raise forms.ValidationError(f"That is not this contact's id; type {self.contact.public_id} to confirm.")
        return typed


@admin.action(description="Forget this person (erase their personal data)")
def contact_forget_action(
    modeladmin: Any, request: HttpRequest, queryset: QuerySet[Contact]
) -> TemplateResponse | None:
    contacts = list(queryset.select_related("business")[:2])
    if len(contacts) != 1:
        modeladmin.message_user(request, "Select exactly one contact to forget.", messages.ERROR)
        return None
    contact = contacts[0]
    if not can(request.user, "contact.forget", contact.business_id):
        modeladmin.message_user(request, "Only an owner of this business may forget a person.", messages.ERROR)
        return None
    form = ForgetConfirmForm(request.POST if "confirm" in request.POST else None, contact=contact)
    if form.is_valid():
        result = contact_forget(contact, actor=request.user.get_username(), reason=form.cleaned_data["reason"])
        erased = ", ".join(f"{table} {n}" for table, n in sorted(result.counts.items())) or "nothing left to erase"
        modeladmin.message_user(request, f"Forgot {contact.public_id}: {erased}.", messages.SUCCESS)
        return None
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"Forget {contact.public_id}",
        "opts": modeladmin.model._meta,
        "contact": contact,
        "form": form,
        "action": request.POST.get("action", "contact_forget_action"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/crm/contact/forget_confirm.html", context)
