"""The systems of record in the back office: the sync status page per
business, and connecting a provider's account (OAuth, authorization code).

- `/admin/sync/` (owners and managers): each connection of the businesses
  the user leads — its status, last success, last error, records waiting
  and failed — and, for an owner, a "Connect" button per provider (again
  after its tokens were refused or the app removed). Every other team
  member (a technician) sees their own calendar's connection and connects
  it there.
- `POST /admin/sync/<provider>/connect/` (owners; for a calendar, the
  member whose calendar it is): keeps a random state
  with the business in the session and sends the person to the provider's
  consent page.
- `GET /admin/sync/<provider>/callback/`: the provider sends the person
  back with a code and the state; the state must be the session's, the
  code is exchanged for tokens (kept encrypted), the account read, and the
  connection saved (crm.services.sync.connection_connect).
- `POST /admin/sync/<provider>/key/` (owners; adapters that connect with an
  API key, such as Housecall Pro): the pasted key is tried by reading the
  account with it, and only a key the provider accepts is saved (encrypted,
  never expiring), with the webhook signing secret pasted beside it.

Thin views: each calls the adapter or one service and renders.
"""

from __future__ import annotations

import secrets

import requests
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agents.sync.base import ADAPTERS, Session, SyncAdapter, SyncError, Throttled, TokenExpired
from crm.models import Business, SyncConnection, TeamMember
from crm.permissions import business_ids_where, can, can_anywhere
from crm.services.sync import connection_connect, connection_statuses, connection_statuses_of_members

SESSION_KEY = "sync_oauth"


def _adapter(provider: str) -> SyncAdapter:
    adapter = ADAPTERS.get(provider)
    if adapter is None:
        raise Http404(f"no sync adapter {provider!r}")
    return adapter


def _connector(request: HttpRequest, adapter: SyncAdapter, business: Business) -> TeamMember | None:
    """Who may connect: an owner connects the business's account; a
    calendar is one person's, connected by that member themself (their
    membership is the connection's member). PermissionDenied otherwise."""
    if adapter.per_member:
        member = TeamMember.objects.filter(business=business, user_id=request.user.pk or 0, is_active=True).first()
        if member is None:
            raise PermissionDenied("a calendar is connected by the team member whose calendar it is")
        return member
    if not can(request.user, "sync.connect", business.pk):
        raise PermissionDenied("only an owner of the business connects its accounts")
    return None


def _callback_url(request: HttpRequest, provider: str) -> str:
    return request.build_absolute_uri(reverse("sync-callback", args=[provider]))


@staff_member_required
@require_GET
def sync_status_page(request: HttpRequest) -> HttpResponse:
    """Leaders see their businesses' connections; every team member sees
    their own calendar's and may connect it (a technician's busy times are
    what keep their visits from being double-booked)."""
    memberships = list(
        TeamMember.objects.filter(user_id=request.user.pk or 0, is_active=True).select_related("business")
    )
    leader = can_anywhere(request.user, "syncconnection.view")
    if not leader and not memberships:
        raise PermissionDenied("the sync status is for the team members of a business")
    seen = business_ids_where(request.user, "syncconnection.view") if leader else frozenset()
    connectable = business_ids_where(request.user, "sync.connect")
    statuses = connection_statuses(seen)
    shown = {s.connection.pk for s in statuses}
    statuses += [s for s in connection_statuses_of_members([m.pk for m in memberships]) if s.connection.pk not in shown]
    businesses = Business.objects.order_by("name")
    if connectable is not None:
        businesses = businesses.filter(pk__in=connectable)
    by_business = {
        (s.connection.business_id, s.connection.provider): s.connection for s in statuses if not s.connection.member_id
    }
    mine = {(s.connection.member_id, s.connection.provider): s.connection for s in statuses if s.connection.member_id}
    offers = [
        {"business": b, "adapter": a, "connection": by_business.get((b.pk, a.provider))}
        for b in businesses
        for a in ADAPTERS.values()
        if not a.per_member
    ] + [
        {"business": m.business, "adapter": a, "connection": mine.get((m.pk, a.provider))}
        for m in sorted(memberships, key=lambda m: m.business.name)
        for a in ADAPTERS.values()
        if a.per_member
    ]
    return render(
        request,
        "leadops/sync.html",
        {"title": "Sync with your systems", "statuses": statuses, "offers": offers},
    )


@staff_member_required
@require_POST
def sync_connect(request: HttpRequest, provider: str) -> HttpResponse:
    adapter = _adapter(provider)
    business = Business.objects.filter(slug=request.POST.get("business", "")).first()
    if business is None:
        raise PermissionDenied("no such business")
    _connector(request, adapter, business)
    if adapter.connects_with != "oauth":
        messages.error(request, f"{adapter.name} connects with an API key: paste it in its form.")
        return HttpResponseRedirect(reverse("sync-status"))
    state = secrets.token_urlsafe(24)
    request.session[SESSION_KEY] = {"state": state, "business": business.pk, "provider": provider}
    return HttpResponseRedirect(adapter.authorize_url(redirect_uri=_callback_url(request, provider), state=state))


@staff_member_required
@require_GET
def sync_callback(request: HttpRequest, provider: str) -> HttpResponse:
    adapter = _adapter(provider)
    pending = request.session.pop(SESSION_KEY, None) or {}
    back = HttpResponseRedirect(reverse("sync-status"))
    state = request.GET.get("state", "")
    if (
        not state
        or not secrets.compare_digest(str(pending.get("state", "")), state)
        or pending.get("provider") != provider
    ):
        messages.error(request, f"{adapter.name} sent you back without the connection this session started: try again.")
        return back
    business = Business.objects.filter(pk=int(pending.get("business") or 0)).first()
    if business is None:
        raise PermissionDenied("no such business")
    member = _connector(request, adapter, business)
    if request.GET.get("error") or not request.GET.get("code"):
        messages.error(request, f"{adapter.name} did not connect: {request.GET.get('error') or 'no code came back'}.")
        return back
    try:
        tokens = adapter.tokens_exchange(code=request.GET["code"], redirect_uri=_callback_url(request, provider))
        placeholder = SyncConnection(business=business, provider=provider)
        account = adapter.account(Session(placeholder, tokens.access_token, requests.Session()))
    except Throttled as exc:
        messages.error(request, f"{adapter.name} is busy ({exc}): connect again in {int(exc.wait.total_seconds())} s.")
        return back
    except SyncError as exc:
        messages.error(request, f"{adapter.name} did not connect: {exc}")
        return back
    taken = (
        SyncConnection.objects.filter(provider=provider, account_id=account.id)
        .exclude(business=business, member=member)
        .first()
    )
    if taken is not None:
        messages.error(request, f"That {adapter.name} account is connected to {taken.business} already.")
        return back
    connection_connect(
        business,
        provider=provider,
        account_id=account.id,
        account_name=account.name,
        access_token=tokens.access_token,
        refresh_token=tokens.refresh_token,
        expires_at=tokens.expires_at,
        actor=request.user.get_username(),
        member=member,
    )
    messages.success(request, f"{business} is connected to {adapter.name} ({account.name or account.id}).")
    return back


@staff_member_required
@require_POST
def sync_key(request: HttpRequest, provider: str) -> HttpResponse:
    adapter = _adapter(provider)
    if adapter.connects_with != "api_key":
        raise Http404(f"{adapter.name} connects through its consent page, not a pasted key")
    business = Business.objects.filter(slug=request.POST.get("business", "")).first()
    if business is None:
        raise PermissionDenied("no such business")
    member = _connector(request, adapter, business)
    back = HttpResponseRedirect(reverse("sync-status"))
    key, secret = request.POST.get("api_key", "").strip(), request.POST.get("webhook_secret", "").strip()
    if not key or not secret:
        messages.error(request, f"{adapter.name} needs both its API key and its webhook signing secret.")
        return back
    try:
        # The key is tried before anything is saved: one it refuses connects nothing.
        with requests.Session() as http:
            account = adapter.account(Session(SyncConnection(business=business, provider=provider), key, http))
    except Throttled as exc:
        messages.error(request, f"{adapter.name} is busy ({exc}): try again in {int(exc.wait.total_seconds())} s.")
        return back
    except TokenExpired:
        messages.error(request, f"{adapter.name} refused that API key: copy it again from {adapter.name}, whole.")
        return back
    except SyncError as exc:
        messages.error(request, f"{adapter.name} did not connect: {exc}")
        return back
    taken = (
        SyncConnection.objects.filter(provider=provider, account_id=account.id)
        .exclude(business=business, member=member)
        .first()
    )
    if taken is not None:
        messages.error(request, f"That {adapter.name} account is connected to {taken.business} already.")
        return back
    with transaction.atomic():
        connection = connection_connect(
            business,
            provider=provider,
            account_id=account.id,
            account_name=account.name,
            access_token=key,
            refresh_token="",
            expires_at=None,  # a key does not expire: the engine never refreshes it
            actor=request.user.get_username(),
            member=member,
        )
        connection.webhook_secret = secret
        connection.save(update_fields=["webhook_secret", "updated_at"])
    messages.success(request, f"{business} is connected to {adapter.name} ({account.name or account.id}).")
    return back
