"""Reads of the Human Gatekeeper's queue for the pages that decide it.

Who may decide is `approval.decide` in the request's business
(`crm.permissions`); these reads keep to those businesses. What went out to
the person after a held reply was proposed is read from the messages
themselves, so an approver sees it before approving words that may no
longer fit (an automatic booking confirmation already told them the time).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from approvals.models import ApprovalRequest
from crm.inbox import COUNT_CAP
from crm.models import Message, TeamMember
from crm.permissions import PERMISSIONS, business_ids_where

PENDING = ApprovalRequest.Status.PENDING


def approvals_decidable(user: Any) -> QuerySet[ApprovalRequest]:
    """Every request `user` may decide, of any status: those of the
    businesses where they hold `approval.decide`."""
    businesses = business_ids_where(user, "approval.decide")
    requests = ApprovalRequest.objects.all()
    return requests if businesses is None else requests.filter(business_id__in=businesses)


def approvals_pending(user: Any) -> QuerySet[ApprovalRequest]:
    """The pending requests `user` may decide, the longest waiting first,
    each with how many messages went out to its lead after its held message
    (`sent_since`: one step along the lead's messages index per row)."""
    later = (
        Message.objects.filter(
            lead=OuterRef("lead_id"),
            direction="out",
            status__in=Message.WENT_OUT,
            created_at__gt=OuterRef("message__created_at"),
        )
        .order_by()
        .values("lead")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return (
        approvals_decidable(user)
        .filter(status=PENDING)
        .select_related("business", "lead__contact", "message", "proposed_by_user")
        .annotate(sent_since=Coalesce(Subquery(later, output_field=IntegerField()), Value(0)))
        .order_by("created_at", "pk")
    )


def approvals_pending_count(user: Any) -> int:
    """How many requests wait for `user`'s decision, up to one past the
    inbox's cap (the badge says "99+")."""
    return approvals_decidable(user).filter(status=PENDING).order_by()[: COUNT_CAP + 1].count()


def approval_sent_since(request: ApprovalRequest, messages: Iterable[Message] | None = None) -> list[Message]:
    """What went out to the person after the request's held message was
    written, oldest first: from `messages` (the lead's, already read) or
    from the database. None for a request that holds no message."""
    held = request.message
    if held is None or request.lead_id is None:
        return []
    if messages is None:
        messages = Message.objects.filter(lead_id=request.lead_id, direction="out", created_at__gt=held.created_at)
    later = [
        m
        for m in messages
        if m.direction == "out" and m.pk != held.pk and m.status in Message.WENT_OUT and m.created_at > held.created_at
    ]
    return sorted(later, key=lambda m: (m.created_at, m.pk))


def approval_deciders(business_id: int) -> list[TeamMember]:
    """The people who decide a request of the business: its active members
    whose role holds `approval.decide`."""
    return list(
        TeamMember.objects.filter(business_id=business_id, is_active=True, role__in=PERMISSIONS["approval.decide"])
        .select_related("user")
        .order_by("role", "display_name", "pk")
    )
