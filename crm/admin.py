"""The Django admin as the main back office.

Every list is scoped by `crm.selectors.scoped`; the lead page is read-only
except through actions and forms that call CRM Sync, which writes the receipt.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html

from crm import models as m
from crm.admin_forget import contact_forget_action
from crm.localtime import when
from crm.permissions import PERMISSIONS, business_ids_where, can, can_anywhere
from crm.selectors import lead_search_q, lead_timeline, scope_for, scoped
from crm.services import lead_sync
from crm.services.contact_numbers import sending_number_clean, source_numbers_refusals
from crm.services.invitations import invitation_create, invitation_refusal, invitation_status
from crm.services.outbox import event_envelope
from crm.services.timers import timer_retry
from crm.services.webhooks import (
    WebhookRefused,
    webhook_delivery_replay,
    webhook_events_check,
    webhook_secret_check,
    webhook_secret_new,
    webhook_subscription_pause,
    webhook_subscription_resume,
    webhook_subscription_save,
    webhook_url_check,
)


def actor_of(request: HttpRequest) -> str:
    return request.user.get_username()


def business_id_of(obj: Any) -> int | None:
    """The business a record belongs to (a Business is its own)."""
    return obj.pk if isinstance(obj, m.Business) else getattr(obj, "business_id", None)


class ScopedAdmin(admin.ModelAdmin):
    """Rows the user may see, and nothing else, in lists and by typed URL.

    Every permission question the admin asks (the index, a list, a page, an
    action, a form's choices) is answered by `crm.permissions` for the user's
    role in the record's business, never by Django's groups, which would merge
    a user's roles across businesses.
    """

    lead_path: str | None = "lead"
    business_field: str = "business_id"
    # The record name in the permission table (default: the model's name).
    record: str = ""
    # An address typed without its scheme is https (Django 6's default, and
    # the only scheme a live webhook target may have).
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        qs = super().get_queryset(request)
        permission = f"{self._record()}.view"
        return scoped(
            qs, request.user, lead_path=self.lead_path, business_field=self.business_field, permission=permission
        )

    def _record(self) -> str:
        return self.record or self.model._meta.model_name

    def _allowed(self, request: HttpRequest, verb: str, obj: Any = None) -> bool:
        permission = f"{self._record()}.{verb}"
        if permission not in PERMISSIONS:
            return False
        if obj is None:
            return can_anywhere(request.user, permission)
        return can(request.user, permission, business_id_of(obj))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._allowed(request, "view")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request, "view", obj) or self._allowed(request, "change", obj)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._allowed(request, "change", obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._allowed(request, "add")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Records are never deleted through the admin: history is the product.
        return False

    # -- choices: a form offers only what the user may reach, so a forged POST
    # naming another business's row fails the form's own validation.

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs["queryset"] = self._choices(db_field, request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs["queryset"] = self._choices(db_field, request)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def _choices(self, db_field: Any, request: HttpRequest) -> QuerySet[Any]:
        related = db_field.remote_field.model
        qs = related._default_manager.all()
        permission = f"{self._record()}.change"
        businesses = business_ids_where(request.user, permission) if permission in PERMISSIONS else frozenset()
        if businesses is None:
            return qs
        if related is m.Business:
            return qs.filter(pk__in=businesses)
        if related is get_user_model():
            # A membership names a person already on one of these teams (new
            # people join through the business file or an operator).
            return qs.filter(memberships__business_id__in=businesses).distinct()
        if any(f.name == "business" for f in related._meta.fields):
            return qs.filter(business_id__in=businesses)
        return qs.none()

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = list(super().get_readonly_fields(request, obj))
        # A record never moves to another business.
        if obj is not None and any(f.name == "business" for f in self.model._meta.fields):
            readonly += [] if "business" in readonly else ["business"]
        return readonly

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # The form's choices already refuse other businesses; this is the last
        # word for fields a form does not offer (and for the business itself).
        if not can(request.user, f"{self._record()}.{'change' if change else 'add'}", business_id_of(obj)):
            raise PermissionDenied("not a business you may change")
        super().save_model(request, obj, form, change)


class ReadOnlyAdmin(ScopedAdmin):
    """Records written only by services (and by providers through them)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class BusinessFilter(admin.SimpleListFilter):
    title = "business"
    parameter_name = "business"
    field = "business__public_id"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        scope = scope_for(request.user)
        qs = (
            m.Business.objects.all()
            if scope.everything
            else m.Business.objects.filter(team__user_id=cast(int, request.user.pk)).distinct()
        )
        return [(b.public_id, b.name) for b in qs.order_by("name")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(**{self.field: self.value()}) if self.value() else queryset


class OwnerFilter(admin.SimpleListFilter):
    title = "owner"
    parameter_name = "owner"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        team = scoped(m.TeamMember.objects.all(), request.user, lead_path=None)
        scope = scope_for(request.user)
        if not scope.everything:
            team = team | m.TeamMember.objects.filter(pk__in=scope.member_ids)
        return [("none", "— unowned —")] + [(t.public_id, str(t)) for t in team.order_by("display_name")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "none":
            return queryset.filter(owner__isnull=True)
        return queryset.filter(owner__public_id=self.value()) if self.value() else queryset


class SourceFilter(admin.SimpleListFilter):
    title = "source"
    parameter_name = "source"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        sources = scoped(m.Source.objects.all(), request.user, lead_path=None)
        scope = scope_for(request.user)
        if not scope.everything and scope.setter_member_ids:
            sources = sources | m.Source.objects.filter(business__team__pk__in=scope.member_ids)
        return [(s.key, s.key) for s in sources.distinct().order_by("key")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if not self.value():
            return queryset
        return queryset.filter(pk__in=m.LeadTouch.objects.filter(source__key=self.value()).values("lead_id"))


class StageForm(forms.Form):
    stage = forms.ChoiceField(choices=m.Stage.choices)
    reason = forms.CharField(max_length=300)


class AssignForm(forms.Form):
    owner = forms.ModelChoiceField(queryset=m.TeamMember.objects.none())
    reason = forms.CharField(max_length=300)


class NextActionForm(forms.Form):
    next_action = forms.CharField(max_length=300)
    due_at = forms.DateTimeField(help_text="Your time zone (named at the top of the page), e.g. 2026-12-01 15:00")
    reason = forms.CharField(max_length=300)


def admin_bulk(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    objects: Any,
    apply: Callable[[Any], object],
    refusals: type[Exception] | tuple[type[Exception], ...],
    done: str,
) -> None:
    """Apply one service to each selected row; report how many went through
    and, one message each, why the others were refused."""
    applied, refused = 0, []
    for obj in objects:
        try:
            apply(obj)
            applied += 1
        except refusals as exc:
            refused.append(str(exc))
    if applied:
        modeladmin.message_user(request, done.format(n=applied), messages.SUCCESS)
    for text in refused:
        modeladmin.message_user(request, text, messages.ERROR)


def _stage_action(stage: str) -> Callable[..., None]:
    def action(modeladmin: LeadAdmin, request: HttpRequest, queryset: QuerySet[m.Lead]) -> None:
        def move(lead: m.Lead) -> object:
            if not can(request.user, "lead.change", lead.business_id):
                raise lead_sync.LeadSyncError(f"{lead.public_id}: you may not change leads of this business")
            return lead_sync.lead_transition(lead, stage, actor=actor_of(request), reason="stage changed in the admin")

        admin_bulk(modeladmin, request, queryset, move, lead_sync.LeadSyncError, f"Moved {{n}} lead(s) to {stage}.")

    action.__name__ = f"move_to_{stage}"
    return admin.action(description=f"Move to {m.Stage(stage).label.lower()}", permissions=["change"])(action)


@admin.register(m.Lead)
class LeadAdmin(ScopedAdmin):
    lead_path = "pk"
    list_display = [
        "public_id",
        "contact_name",
        "phone",
        "stage",
        "owner",
        "next_action",
        "next_action_due_at",
        "source",
        "hold",
        "business",
        "created_at",
    ]
    list_display_links = ["public_id", "contact_name"]
    list_select_related = ["contact", "owner", "business"]
    list_filter = ["stage", OwnerFilter, SourceFilter, BusinessFilter, "hold", "is_test"]
    search_fields = ["public_id"]  # widened by get_search_results
    search_help_text = "ID, name, email, or a phone number in any format"
    actions = [_stage_action(stage) for stage in m.Stage.values]
    list_per_page = 50
    show_full_result_count = False
    change_form_template = "admin/crm/lead/change_form.html"
    fields = (
        "public_id",
        "business",
        "contact_link",
        "first_touch",
        "latest_touch",
        "service_line",
        "stage",
        "owner",
        "next_action",
        "next_action_due_at",
        "sla_due_at",
        "sla_breached_at",
        "hold",
        "hold_reason",
        "exceptions",
        "routing_reason",
        "fit_score",
        "fit_explained",
        "facts",
        "request_text",
        "lost_reason",
        "is_test",
        "first_response_at",
        "speed_to_lead_seconds",
        "closed_at",
        "merged_link",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[m.Lead]:
        first_phone = m.ContactPoint.objects.filter(contact=OuterRef("contact_id"), kind="phone").order_by("created_at")
        first_touch = m.LeadTouch.objects.filter(lead=OuterRef("pk")).order_by("received_at", "id")
        return (
            super()
            .get_queryset(request)
            .annotate(
                phone_value=Subquery(first_phone.values("value")[:1]),
                source_key=Subquery(first_touch.values("source__key")[:1]),
            )
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        if not search_term.strip():
            return queryset, False
        return queryset.filter(lead_search_q(search_term)), False

    @admin.display(description="Why this fit score")
    def fit_explained(self, lead: m.Lead) -> str:
        reasons = [f"{r.get('points', 0):+d} {r.get('rule', '')}: {r.get('why', '')}" for r in lead.fit_reasons]
        # A model's words, when kept: they explain these points, never set them.
        words = lead.facts.get("fit_explanation") or {}
        if words.get("score") == lead.fit_score:
            said = " ".join(part for part in (words.get("fit"), words.get("offer")) if part)
            reasons.append(f"In the lead's words ({words.get('model', 'a model')}): {said}")
        return format_html("<br>".join(["{}"] * len(reasons)), *reasons) if reasons else "—"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # leads arrive through capture (or the demo), never a blank form

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="contact", ordering="contact__last_name")
    def contact_name(self, lead: m.Lead) -> str:
        return lead.contact.name or lead.contact.public_id

    @admin.display(description="contact")
    def contact_link(self, lead: m.Lead) -> str:
        url = reverse("admin:crm_contact_change", args=[lead.contact_id])
        return format_html('<a href="{}">{} ({})</a>', url, lead.contact.name, lead.contact.public_id)

    @admin.display(description="merged into")
    def merged_link(self, lead: m.Lead) -> str:
        if lead.merged_into_id is None:
            return "—"
        url = reverse("admin:crm_lead_change", args=[lead.merged_into_id])
        return format_html('<a href="{}">{}</a>', url, m.Lead.objects.get(pk=lead.merged_into_id).public_id)

    @admin.display(description="first touch")
    def first_touch(self, lead: m.Lead) -> str:
        return _touch_summary(lead.touches.order_by("received_at", "id").select_related("source").first())

    @admin.display(description="latest touch")
    def latest_touch(self, lead: m.Lead) -> str:
        return _touch_summary(lead.touches.order_by("-received_at", "-id").select_related("source").first())

    @admin.display(description="phone")
    def phone(self, lead: Any) -> str:
        return lead.phone_value or ""

    @admin.display(description="source")
    def source(self, lead: Any) -> str:
        return lead.source_key or ""

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/stage/", view(self.stage_view), name="crm_lead_stage"),
            path("<path:object_id>/assign/", view(self.assign_view), name="crm_lead_assign"),
            path("<path:object_id>/next-action/", view(self.next_action_view), name="crm_lead_next_action"),
            *super().get_urls(),
        ]

    def _assign_form(self, lead: m.Lead, data: Any = None) -> AssignForm:
        form = AssignForm(data, initial={"owner": lead.owner_id})
        form.fields["owner"].queryset = m.TeamMember.objects.filter(business=lead.business, is_active=True)  # type: ignore[attr-defined]
        return form

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        lead = self.get_object(request, object_id)
        extra = dict(
            extra_context or {}, show_save=False, show_save_and_continue=False, show_save_and_add_another=False
        )
        if lead is not None and lead.merged_into_id is not None and request.method == "GET":
            # The page stays (its history is here); the banner says where the conversation went.
            into = m.Lead.objects.get(pk=lead.merged_into_id).public_id
            self.message_user(
                request, f"This lead was merged into {into}: its conversation continues there.", messages.INFO
            )
        if lead is not None:
            extra.update(
                timeline=lead_timeline(lead),
                can_change=self.has_change_permission(request, lead),
                can_reassign=can(request.user, "lead.reassign", lead.business_id),
                stage_form=StageForm(initial={"stage": lead.stage}),
                assign_form=self._assign_form(lead),
                next_action_form=NextActionForm(
                    initial={"next_action": lead.next_action, "due_at": lead.next_action_due_at}
                ),
            )
        return super().change_view(request, object_id, form_url, extra)

    def _lead_change(
        self,
        request: HttpRequest,
        object_id: str,
        form_class: Any,
        apply: Callable[[m.Lead, dict[str, Any]], object],
        permission: str = "lead.change",
    ) -> HttpResponse:
        lead = get_object_or_404(self.get_queryset(request), pk=object_id)
        back = HttpResponseRedirect(reverse("admin:crm_lead_change", args=[lead.pk]))
        if request.method != "POST":
            return back
        if not can(request.user, permission, lead.business_id):
            raise PermissionDenied("your role in this business may not do this")
        form = self._assign_form(lead, request.POST) if form_class is AssignForm else form_class(request.POST)
        if not form.is_valid():
            self.message_user(request, f"Not changed: {form.errors.as_text()}", messages.ERROR)
            return back
        try:
            apply(lead, form.cleaned_data)
        except lead_sync.LeadSyncError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, "Saved, with a receipt.", messages.SUCCESS)
        return back

    def stage_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def apply(lead: m.Lead, data: dict[str, Any]) -> object:
            return lead_sync.lead_transition(lead, data["stage"], actor=actor_of(request), reason=data["reason"])

        return self._lead_change(request, object_id, StageForm, apply)

    def assign_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def apply(lead: m.Lead, data: dict[str, Any]) -> object:
            return lead_sync.lead_assign(lead, data["owner"], actor=actor_of(request), reason=data["reason"])

        return self._lead_change(request, object_id, AssignForm, apply, permission="lead.reassign")

    def next_action_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def apply(lead: m.Lead, data: dict[str, Any]) -> object:
            due: datetime = data["due_at"]
            return lead_sync.lead_set_next_action(
                lead, data["next_action"], due, actor=actor_of(request), reason=data["reason"]
            )

        return self._lead_change(request, object_id, NextActionForm, apply)


def _touch_summary(touch: m.LeadTouch | None) -> str:
    if touch is None:
        return "—"
    where = touch.source.key if touch.source else touch.provider
    campaign = f", campaign {touch.campaign_id}" if touch.campaign_id else ""
    return f"{when(touch.received_at)} · {touch.channel} via {where}{campaign}"


class ContactPointInline(admin.TabularInline):
    model = m.ContactPoint
    readonly_fields = ("public_id", "kind", "value", "raw_value", "is_valid", "created_at")
    fields = readonly_fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ContactAdminForm(forms.ModelForm):
    class Meta:
        model = m.Contact
        fields = "__all__"  # noqa: DJ007 (the ModelAdmin decides which fields show)

    def clean_sticky_from_number(self) -> str:
        return sending_number_clean(self.instance.business, self.cleaned_data.get("sticky_from_number", ""))


@admin.register(m.Contact)
class ContactAdmin(ScopedAdmin):
    form = ContactAdminForm
    lead_path = "leads"
    list_display = ["public_id", "first_name", "last_name", "postal_code", "business", "created_at"]
    list_select_related = ["business"]
    list_filter = [BusinessFilter]
    search_fields = ["public_id", "first_name", "last_name", "points__value"]
    readonly_fields = ["public_id", "business", "merged_into", "created_at", "updated_at"]
    inlines = [ContactPointInline]
    actions = [contact_forget_action]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).distinct()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        # A merged record's page is the person's page now, wherever it was
        # linked from; only for a user who may see the survivor (a merged
        # contact has no leads left, so a setter could not see it either).
        merged = (
            m.Contact.objects.filter(pk=object_id, merged_into__isnull=False).first()
            if str(object_id).isdigit()
            else None
        )
        keep = self.get_queryset(request).filter(pk=merged.merged_into_id).first() if merged is not None else None
        if merged is not None and keep is not None:
            self.message_user(request, f"Contact {merged.public_id} was merged into this one: the same person.")
            return HttpResponseRedirect(reverse("admin:crm_contact_change", args=[keep.pk]))
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(m.Receipt)
class ReceiptAdmin(ReadOnlyAdmin):
    list_display = ["public_id", "at", "actor", "action", "subject", "lead", "reason", "business", "seq"]
    list_select_related = ["lead", "business"]
    list_filter = [BusinessFilter, "action"]
    search_fields = ["public_id", "subject", "actor", "lead__public_id"]
    show_full_result_count = False


class SetupAdmin(ScopedAdmin):
    """A business's own setup (its team, service lines, templates…): edited
    here by those who may, and about no lead."""

    lead_path = None
    list_filter = [BusinessFilter]
    search_fields = ["public_id"]
    readonly_fields = ["public_id"]
    show_full_result_count = False


class RecordAdmin(ReadOnlyAdmin):
    """A record the services write, listed for reading. Every relation a list
    shows is in its `list_select_related`, so a page costs the same number of
    queries however many rows it shows."""

    list_filter = [BusinessFilter]
    search_fields = ["public_id"]
    readonly_fields = ["public_id"]
    # These tables only grow: no COUNT(*) of the whole table under every page.
    show_full_result_count = False


@admin.register(m.Business)
class BusinessAdmin(SetupAdmin):
    business_field = "pk"
    list_display = ["public_id", "slug", "name", "timezone", "region"]
    list_filter = []


class SourceAdminForm(forms.ModelForm):
    """Secrets are write-only: typed to set or replace, never shown back."""

    replace_secret = forms.CharField(
        required=False,
        strip=True,
        max_length=1000,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="The webhook secret or signing key; for twilio sources, the Twilio auth token of the account "
        "in config's account_sid. Leave empty to keep the current one.",
    )
    clear_secret = forms.BooleanField(required=False, label="Remove the secret")
    replace_page_token = forms.CharField(
        required=False,
        strip=True,
        max_length=1000,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Meta sources: the page access token; Instagram sources: the access token DM replies are sent "
        "with. Leave empty to keep the current one.",
    )
    clear_page_token = forms.BooleanField(required=False, label="Remove the page token")

    class Meta:
        model = m.Source
        # The secrets are set through the write-only inputs above, never rendered.
        fields = ["business", "key", "provider", "config", "first_response_minutes", "is_active"]

    def clean_config(self) -> Any:
        config = self.cleaned_data.get("config")
        if isinstance(config, dict) and "access_token" in config:
            raise forms.ValidationError("The page token goes in 'replace page token', not in the config.")
        if isinstance(config, dict) and "auth_token" in config:
            raise forms.ValidationError("The Twilio auth token goes in 'replace secret', not in the config.")
        return config

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        business, config = data.get("business"), data.get("config")
        if business is not None and isinstance(config, dict):
            # The business file's own rule, saying which setting (the
            # database's constraint would name no field).
            for reason in source_numbers_refusals(business, data.get("provider", ""), config).values():
                self.add_error("config", f"{reason}.")
        return data

    def save(self, commit: bool = True) -> m.Source:
        source: m.Source = super().save(commit=False)
        data = self.cleaned_data
        if data.get("replace_secret"):
            source.secret = data["replace_secret"]
        elif data.get("clear_secret"):
            source.secret = ""
        if data.get("replace_page_token"):
            source.page_token = data["replace_page_token"]
        elif data.get("clear_page_token"):
            source.page_token = ""
        if commit:
            source.save()
            self.save_m2m()
        return source


@admin.register(m.Source)
class SourceAdmin(ScopedAdmin):
    """Sources with their secrets shown only as set / not set."""

    lead_path = None
    form = SourceAdminForm
    list_display = ["key", "provider", "business", "is_active", "secret_state", "page_token_state"]
    list_select_related = ["business"]
    list_filter = [BusinessFilter, "provider", "is_active"]
    search_fields = ["key"]
    show_full_result_count = False
    readonly_fields = ["public_id", "secret_state", "page_token_state"]
    fieldsets = [
        (None, {"fields": ["public_id", "business", "key", "provider", "is_active", "first_response_minutes"]}),
        ("Settings (no secrets)", {"fields": ["config"]}),
        (
            "Secrets (write-only)",
            {
                "fields": [
                    "secret_state",
                    "replace_secret",
                    "clear_secret",
                    "page_token_state",
                    "replace_page_token",
                    "clear_page_token",
                ]
            },
        ),
    ]

    @admin.display(description="secret")
    def secret_state(self, source: m.Source) -> str:
        return "set" if source.secret else "not set"

    @admin.display(description="page token")
    def page_token_state(self, source: m.Source) -> str:
        return "set" if source.page_token else "not set"


@admin.action(description="Send a new invitation", permissions=["invite"])
def members_invite(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: Any) -> None:
    allowed = business_ids_where(request.user, "teammember.invite")
    chosen = queryset if allowed is None else queryset.filter(business_id__in=allowed)
    invited, skipped = 0, []
    for member in chosen.select_related("user", "business"):
        if refusal := invitation_refusal(member):
            skipped.append(f"{member}: {refusal}")
            continue
        invitation_create(member, sent_by=request.user)
        invited += 1
    if invited:
        modeladmin.message_user(
            request,
            f"{invited} invitation(s) on their way: the invitation column says whether each went out.",
            messages.SUCCESS,
        )
    if skipped:
        modeladmin.message_user(request, "No invitation for " + "; ".join(skipped), messages.WARNING)


@admin.register(m.TeamMember)
class TeamMemberAdmin(SetupAdmin):
    list_display = [
        "public_id",
        "display_name",
        "role",
        "business",
        "is_active",
        "weight",
        "max_open_leads",
        "invitation",
    ]
    list_select_related = ["business", "user"]
    list_filter = [BusinessFilter, "role", "is_active"]
    actions = [members_invite]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # Every row's invitations in one query, for the status column.
        return super().get_queryset(request).prefetch_related("invitations")

    def has_invite_permission(self, request: HttpRequest) -> bool:
        return can_anywhere(request.user, "teammember.invite")

    @admin.display(description="invitation")
    def invitation(self, member: m.TeamMember) -> str:
        return invitation_status(member, list(member.invitations.all()))

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        # A member added here who cannot sign in yet gets an invitation (sent after the commit).
        if not change and invitation_refusal(obj) is None:
            invitation_create(obj, sent_by=request.user)


@admin.register(m.ServiceLine)
class ServiceLineAdmin(SetupAdmin):
    list_display = [
        "public_id",
        "slug",
        "name",
        "keywords",
        "high_value_amount",
        "currency",
        "offer",
        "offer_templates",
        "business",
    ]
    list_select_related = ["business"]


@admin.register(m.ServiceArea)
class ServiceAreaAdmin(SetupAdmin):
    list_display = ["public_id", "name", "postal_codes", "business"]
    list_select_related = ["business"]


@admin.register(m.MessageTemplate)
class MessageTemplateAdmin(SetupAdmin):
    list_display = ["key", "channel", "approved", "business"]
    list_select_related = ["business"]


@admin.register(m.Sequence)
class SequenceAdmin(SetupAdmin):
    # Editable: steps as JSON ([{"after": "15m", "channel": "sms", "template": "nudge_sms"}, ...]); the
    # business file (`sequences`) is the checked way to change them.
    list_display = ["key", "trigger", "priority", "goal_stages", "is_active", "business"]
    list_select_related = ["business"]
    list_filter = [BusinessFilter, "trigger", "is_active"]


@admin.register(m.ContactPoint)
class ContactPointAdmin(RecordAdmin):
    lead_path = "contact__leads"
    list_display = ["public_id", "contact", "kind", "value", "raw_value", "is_valid", "created_at", "business"]
    list_select_related = ["contact", "business"]
    search_fields = ["public_id", "value"]


@admin.register(m.ConsentEvent)
class ConsentEventAdmin(RecordAdmin):
    lead_path = "contact_point__contact__leads"
    list_display = ["public_id", "contact_point", "channel", "action", "basis", "actor", "at", "business"]
    list_select_related = ["contact_point", "business"]


@admin.register(m.LeadTouch)
class LeadTouchAdmin(RecordAdmin):
    list_display = ["public_id", "lead", "channel", "provider", "campaign_id", "ad_id", "received_at", "business"]
    list_select_related = ["lead", "business"]


@admin.register(m.Message)
class MessageAdmin(RecordAdmin):
    list_display = [
        "public_id",
        "lead",
        "direction",
        "channel",
        "status",
        "block_reason",
        "to",
        "created_at",
        "business",
    ]
    list_select_related = ["lead", "business"]
    list_filter = [BusinessFilter, "direction", "status", "block_reason"]


# Call scoring's review queue: filter "review status: pending" (agents/reporting/call_scoring.py).
@admin.register(m.Call)
class CallAdmin(RecordAdmin):
    list_display = [
        "public_id",
        "lead",
        "direction",
        "status",
        "duration_seconds",
        "review_status",
        "flags",
        "started_at",
        "business",
    ]
    list_select_related = ["lead", "business"]
    list_filter = [BusinessFilter, "review_status", "status", "direction"]
    search_fields = ["public_id", "provider_sid"]


@admin.register(m.Task)
class TaskAdmin(RecordAdmin):
    list_display = ["public_id", "title", "lead", "owner", "kind", "due_at", "status", "business"]
    list_select_related = ["lead", "owner", "business"]
    list_filter = [BusinessFilter, "status", "kind"]


@admin.action(description="Retry the selected failed timers", permissions=["retry"])
def timers_retry(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: Any) -> None:
    allowed = business_ids_where(request.user, "timer.retry")
    failed = queryset.filter(status="failed")
    failed = failed if allowed is None else failed.filter(business_id__in=allowed)
    retried = sum(timer_retry(timer, actor=actor_of(request)) for timer in failed)
    modeladmin.message_user(request, f"{retried} timer(s) back in line for the next run.", messages.SUCCESS)


@admin.register(m.Timer)
class TimerAdmin(RecordAdmin):
    list_display = ["public_id", "kind", "lead", "due_at", "status", "attempts", "error", "business"]
    list_select_related = ["lead", "business"]
    list_filter = [BusinessFilter, "status", "kind"]
    actions = [timers_retry]

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return can_anywhere(request.user, "timer.retry")


@admin.register(m.Enrollment)
class EnrollmentAdmin(RecordAdmin):
    list_display = ["public_id", "lead", "sequence", "status", "stop_reason", "next_step_due_at", "business"]
    list_select_related = ["lead", "sequence", "business"]
    list_filter = [BusinessFilter, "status", "stop_reason"]


@admin.register(m.Appointment)
class AppointmentAdmin(ReadOnlyAdmin):
    """Appointments with their technician brief (written by agents.booking)."""

    list_display = ["public_id", "lead", "status", "starts_at", "ends_at", "assigned_to", "provider", "business"]
    list_select_related = ["lead", "assigned_to__user", "business"]
    list_filter = [BusinessFilter, "status", "provider"]
    search_fields = ["public_id", "lead__public_id", "external_id"]
    show_full_result_count = False
    fields = (
        "public_id",
        "lead_link",
        "status",
        "starts_at",
        "ends_at",
        "assigned_to",
        "availability",
        "location",
        "notes",
        "rescheduled_from",
        "outcome_at",
        "provider",
        "external_id",
        "created_at",
        "technician_brief",
    )
    readonly_fields = fields

    @admin.display(description="lead")
    def lead_link(self, appointment: m.Appointment) -> str:
        url = reverse("admin:crm_lead_change", args=[appointment.lead_id])
        return format_html('<a href="{}">{}</a>', url, appointment.lead.public_id)

    @admin.display(description="technician brief")
    def technician_brief(self, appointment: m.Appointment) -> str:
        return format_html('<pre id="technician-brief">{}</pre>', appointment.brief or "— (no brief yet)")


@admin.register(m.Estimate)
class EstimateAdmin(RecordAdmin):
    list_display = ["public_id", "lead", "status", "amount", "currency", "sent_at", "business"]
    list_select_related = ["lead", "business"]


# Inbound events (their replay runs the processing roles) and Job, Invoice,
# Payment and Refund (their forms call the revenue roles): leadops/admin/.
@admin.register(m.RejectedDelivery)
class RejectedDeliveryAdmin(RecordAdmin):
    lead_path = None
    list_display = ["day", "provider", "source", "count", "last_reason", "last_remote_addr", "last_at", "business"]
    list_select_related = ["source", "business"]
    list_filter = [BusinessFilter, "provider"]
    search_fields = ["source__key"]
    # Counted per day, with no public id of its own.
    readonly_fields = []


# --- outbound webhooks ---------------------------------------------------------

WEBHOOK_EVENT_CHOICES = [(m.ALL_EVENTS, "* (every event, those added later too)"), *m.EventType.choices]


class WebhookSubscriptionForm(forms.ModelForm):
    """The secret is write-only: typed (or generated) to set or replace it,
    never shown back; a generated one is shown once, in the save message."""

    url = forms.URLField(max_length=1000, assume_scheme="https", help_text="https://, on a public address")
    events_wanted = forms.MultipleChoiceField(
        label="events", choices=WEBHOOK_EVENT_CHOICES, widget=forms.CheckboxSelectMultiple
    )
    replace_secret = forms.CharField(
        required=False,
        strip=True,
        max_length=200,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="A Standard Webhooks secret (whsec_ and base64) the receiver already has. "
        "Leave empty to keep the current one.",
    )
    generate_secret = forms.BooleanField(
        required=False, help_text="Make a new secret (shown once, after saving): for a new receiver, or to rotate."
    )

    class Meta:
        model = m.WebhookSubscription
        fields = ["business", "url", "description"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["events_wanted"].initial = self.instance.events

    def clean_url(self) -> str:
        try:
            return webhook_url_check(self.cleaned_data["url"])
        except WebhookRefused as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean_replace_secret(self) -> str:
        secret: str = self.cleaned_data.get("replace_secret") or ""
        try:
            return webhook_secret_check(secret) if secret else ""
        except WebhookRefused as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean_events_wanted(self) -> list[str]:
        try:
            return webhook_events_check(self.cleaned_data.get("events_wanted") or [])
        except WebhookRefused as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("replace_secret") and data.get("generate_secret"):
            raise forms.ValidationError("Type a secret or have one generated, not both.")
        if not self.instance.pk and not (data.get("replace_secret") or data.get("generate_secret")):
            raise forms.ValidationError("A new webhook needs its secret: type the receiver's, or have one generated.")
        return data


@admin.action(description="Pause the selected webhooks (their deliveries wait)", permissions=["resume"])
def webhooks_pause(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: Any) -> None:
    allowed = business_ids_where(request.user, "webhook.resume")
    chosen = queryset if allowed is None else queryset.filter(business_id__in=allowed)
    reason = f"paused by {actor_of(request)}"
    paused = sum(webhook_subscription_pause(s, actor=actor_of(request), reason=reason) for s in chosen)
    modeladmin.message_user(request, f"{paused} webhook(s) paused.", messages.SUCCESS)


@admin.action(
    description="Resume the selected webhooks (their waiting deliveries go out in order)", permissions=["resume"]
)
def webhooks_resume(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: Any) -> None:
    allowed = business_ids_where(request.user, "webhook.resume")
    chosen = queryset.filter(status=m.WebhookSubscription.Status.PAUSED)
    chosen = chosen if allowed is None else chosen.filter(business_id__in=allowed)
    resumed = [webhook_subscription_resume(s, actor=actor_of(request)) for s in chosen]
    modeladmin.message_user(
        request, f"{len(resumed)} webhook(s) resumed; {sum(resumed)} deliveries go out now.", messages.SUCCESS
    )


@admin.register(m.WebhookSubscription)
class WebhookSubscriptionAdmin(SetupAdmin):
    """Where a business's events go. The URL is checked (https in live mode,
    public addresses only) when it is saved and again at every delivery."""

    form = WebhookSubscriptionForm
    list_display = [
        "url",
        "business",
        "status",
        "events_list",
        "failing_since",
        "consecutive_failures",
        "last_success_at",
        "deliveries_link",
    ]
    list_select_related = ["business"]
    list_filter = [BusinessFilter, "status"]
    search_fields = ["public_id", "url"]
    actions = [webhooks_pause, webhooks_resume]
    readonly_fields = [
        "public_id",
        "secret_state",
        "status",
        "pause_reason",
        "paused_at",
        "failing_since",
        "consecutive_failures",
        "last_success_at",
        "last_failure_at",
        "deliveries_link",
    ]
    fieldsets = [
        (None, {"fields": ["public_id", "business", "url", "events_wanted", "description"]}),
        ("Signing secret (write-only)", {"fields": ["secret_state", "replace_secret", "generate_secret"]}),
        (
            "Health",
            {
                "fields": [
                    "status",
                    "pause_reason",
                    "paused_at",
                    "failing_since",
                    "consecutive_failures",
                    "last_success_at",
                    "last_failure_at",
                    "deliveries_link",
                ]
            },
        ),
    ]

    def has_resume_permission(self, request: HttpRequest) -> bool:
        return can_anywhere(request.user, "webhook.resume")

    @admin.display(description="secret")
    def secret_state(self, subscription: m.WebhookSubscription) -> str:
        return "set" if subscription.pk and subscription.secret else "not set"

    @admin.display(description="events")
    def events_list(self, subscription: m.WebhookSubscription) -> str:
        return ", ".join(subscription.events)

    @admin.display(description="delivery log")
    def deliveries_link(self, subscription: m.WebhookSubscription) -> str:
        if not subscription.pk:
            return "—"
        url = reverse("admin:crm_webhookdelivery_changelist") + f"?subscription__id__exact={subscription.pk}"
        return format_html('<a href="{}">deliveries</a>', url)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not can(request.user, f"webhooksubscription.{'change' if change else 'add'}", business_id_of(obj)):
            raise PermissionDenied("not a business you may change")
        data = form.cleaned_data
        generated = webhook_secret_new() if data.get("generate_secret") else None
        saved, _ = webhook_subscription_save(
            business=obj.business,
            url=data["url"],
            events=data["events_wanted"],
            secret=generated or data.get("replace_secret") or None,
            description=data.get("description", ""),
            actor=actor_of(request),
            # The row as stored: the form has already set its new values on `obj`.
            subscription=m.WebhookSubscription.objects.get(pk=obj.pk) if change else None,
        )
        obj.pk, obj.public_id = saved.pk, saved.public_id
        if generated:
            messages.warning(
                request,
                f"The signing secret of {saved.url}, shown this once: {generated} — give it to the receiver now.",
            )

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """Nothing: the service saved the subscription whole."""


ATTEMPT_FIELDS = (
    "number",
    "at",
    "outcome",
    "status_code",
    "duration_ms",
    "error",
    "response_excerpt",
    "request_headers",
)
DELIVERY_FIELDS = (
    "public_id",
    "status",
    "event_type",
    "event_id_public",
    "subscription",
    "lead",
    "seq",
    "attempts",
    "attempt_limit",
    "next_attempt_at",
    "claimed_at",
    "delivered_at",
    "last_status_code",
    "last_error",
    "created_at",
    "payload",
)


class AttemptsInline(admin.TabularInline):
    """An outbound record's attempts, newest first: written by the sender
    only, read by whoever may read the record (`view_permission`)."""

    extra = 0
    can_delete = False
    ordering = ["-number"]
    view_permission = ""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_anywhere(request.user, self.view_permission)


class WebhookAttemptInline(AttemptsInline):
    model = m.WebhookAttempt
    fields = ATTEMPT_FIELDS
    readonly_fields = ATTEMPT_FIELDS
    view_permission = "webhookdelivery.view"


class EventTypeFilter(admin.SimpleListFilter):
    title = "event"
    parameter_name = "event_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(m.EventType.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(event__type=self.value()) if self.value() else queryset


@admin.register(m.WebhookDelivery)
class WebhookDeliveryAdmin(RecordAdmin):
    """The delivery log: each event per receiver, its attempts (status code,
    answer excerpt, what was sent) and the replay action."""

    lead_path = None
    list_display = [
        "public_id",
        "created_at",
        "event_type",
        "subscription",
        "lead",
        "status",
        "attempts",
        "last_status_code",
        "last_error",
        "next_attempt_at",
        "business",
    ]
    list_select_related = ["event", "subscription", "lead", "business"]
    list_filter = [BusinessFilter, "status", EventTypeFilter, "subscription"]
    search_fields = ["public_id", "event__public_id", "lead__public_id"]
    fields = DELIVERY_FIELDS
    readonly_fields = list(DELIVERY_FIELDS)
    inlines = [WebhookAttemptInline]
    actions = ["replay"]
    # The log only grows: a cheap page count.
    show_full_result_count = False

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return can_anywhere(request.user, "webhook.replay")

    @admin.display(description="event", ordering="event__type")
    def event_type(self, delivery: m.WebhookDelivery) -> str:
        return delivery.event.type

    @admin.display(description="webhook-id")
    def event_id_public(self, delivery: m.WebhookDelivery) -> str:
        return delivery.event.public_id

    @admin.display(description="payload (as signed and sent)")
    def payload(self, delivery: m.WebhookDelivery) -> str:
        envelope = event_envelope(delivery.event, delivery.business.public_id)
        return format_html("<pre>{}</pre>", json.dumps(envelope, indent=2, ensure_ascii=False))

    @admin.action(description="Replay the selected deliveries (dead, delivered or dry run)", permissions=["replay"])
    def replay(self, request: HttpRequest, queryset: QuerySet[m.WebhookDelivery]) -> None:
        allowed = business_ids_where(request.user, "webhook.replay")
        chosen = queryset if allowed is None else queryset.filter(business_id__in=allowed)
        replayed = sum(webhook_delivery_replay(d, actor=actor_of(request)) for d in chosen.select_related("business"))
        skipped = queryset.count() - replayed
        note = f"; {skipped} still waiting or in flight (left as they are)" if skipped else ""
        self.message_user(request, f"{replayed} deliveries replayed{note}.", messages.SUCCESS)
